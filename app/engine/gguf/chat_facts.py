"""What a model can do in a chat, read from its GGUF: the template in use (its own, or a built-in one chosen from
the vocabulary when it has none), the family whose tool-call and thinking markup its replies use, and its
capabilities (`completion`, `tools`, `insert`, `thinking`, `embedding`) as Ollama's /api/show lists them.

Pure functions over the template text and the vocabulary's tokens, read in the service process only (/api/show,
the request's plan, and engine/client.py, which hands them to the runner at load for rendering and stops). The
family's markup itself (markers, sections, thinking, the call grammar's shape) and how its templates show
thinking are its record in app/engine/chat/formats.py. See docs/architecture.md, "Chat templates".
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import lru_cache

from app.engine.chat.formats import GENERIC, TOOLS_VAR, detect_family, format_for
from app.engine.gguf.builtin_templates import BUILTIN, PLAIN, PLAIN_STOPS

# The token texts llama.cpp recognises as fill-in-the-middle markers when the GGUF has no fim_*_token_id keys
# (src/llama-vocab.cpp): Qwen2.5-Coder, StarCoder/SmolLM, DeepSeek-Coder, CodeLlama, CodeGemma.
FIM_PRE = ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
           "<|fim_begin|>")
FIM_SUF = ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
           "<|fim_hole|>")
FIM_MID = ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
           "<|fim_end|>")
RANK_POOLING = 4                  # llama.cpp LLAMA_POOLING_TYPE_RANK: a reranker (classification head)


@dataclass(frozen=True)
class ChatFacts:
    template: str | None             # the Jinja template rendered for chat (None: the model has no chat use)
    template_source: str             # "gguf" or "builtin:<name>" or "builtin:plain"
    template_reason: str             # why this template, in words (shown by /api/show)
    family: str                      # reply markup: hermes, llama3, mistral, deepseek, harmony, ...
    capabilities: tuple[str, ...]
    think_open: str | None = None    # the marker that opens thinking (the runner echoes it when the prompt ends with it)
    renders_tools: bool = False      # the template writes the `tools` list itself (else the service describes them)
    think_toggle: str | None = None  # the template variable that turns thinking off / sets effort
    stops: tuple[str, ...] = ()      # end-of-turn strings to stop on (built-in templates)
    fim: tuple[str, str, str] | None = None   # prefix, suffix, middle marker texts
    sampling: tuple = ()             # the publisher's sampling defaults (ModelInfo.sampling: general.sampling.*)
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"template_source": self.template_source, "template_reason": self.template_reason,
                "family": self.family, "capabilities": list(self.capabilities)}


def fim_markers(tokens: set[str], ids: dict[str, int], token_list=None) -> tuple[str, str, str] | None:
    """The fill-in-the-middle token texts: from the GGUF's fim_*_token_id keys, else by llama.cpp's names."""
    def by_id(key):
        i = ids.get(key)
        if isinstance(i, int) and token_list is not None and 0 <= i < len(token_list):
            return token_list[i]
        return None

    pre, suf, mid = by_id("pre"), by_id("suf"), by_id("mid")
    pre = pre or next((t for t in FIM_PRE if t in tokens), None)
    suf = suf or next((t for t in FIM_SUF if t in tokens), None)
    mid = mid or next((t for t in FIM_MID if t in tokens), None)
    return (pre, suf, mid) if pre and suf and mid else None


def choose_builtin(architecture: str, tokens: set[str]) -> tuple[str, str, str, tuple[str, ...]]:
    """(name, template, reason, stops) for a GGUF without a chat template: the markup its vocabulary has."""
    for name, (tpl, needs, stops) in BUILTIN.items():
        if all(t in tokens for t in needs):
            return (name, tpl, f"the GGUF has no chat template; {architecture} vocabulary has "
                    f"{', '.join(needs)}, so llama.cpp's built-in '{name}' template is used", stops)
    return ("plain", PLAIN, f"the GGUF has no chat template and its {architecture} vocabulary has no chat markup "
            "tokens (a base model?): plain 'User:'/'Assistant:' turns are used", PLAIN_STOPS)


def chat_facts(architecture: str, template: str | None, tokens: set[str], *, is_embedding: bool = False,
               fim_ids: dict | None = None, token_list=None, is_reranker: bool = False) -> ChatFacts:
    stops: tuple[str, ...]
    if template:
        source, reason, stops = "gguf", "the GGUF's own tokenizer.chat_template", ()
    else:
        name, template, reason, stops = choose_builtin(architecture, tokens)
        source = f"builtin:{name}"
    family = detect_family(template) if source == "gguf" else GENERIC.name
    thinks, think_open, toggle = format_for(family).template_thinking(template if source == "gguf" else None)
    fim = fim_markers(tokens, fim_ids or {}, token_list)
    caps: list[str] = []
    if is_reranker:                       # pooling type rank: scores (query, document) pairs, nothing else
        caps.append("rerank")
    elif is_embedding:
        caps.append("embedding")
    else:
        caps.append("completion")
        if source == "gguf" and (TOOLS_VAR.search(template) or "tool_calls" in template):
            caps.append("tools")
        if fim:
            caps.append("insert")
        if thinks:
            caps.append("thinking")
    return ChatFacts(template=template, template_source=source, template_reason=reason, family=family,
                     capabilities=tuple(caps), think_open=think_open, think_toggle=toggle, stops=stops, fim=fim,
                     renders_tools=bool(source == "gguf" and TOOLS_VAR.search(template)))


def read_chat_facts(path) -> ChatFacts:
    """ChatFacts for a GGUF file (reads its metadata and vocabulary; cached per file version)."""
    p, version = _file_version(path)
    facts = _read_cached(p, version)
    _latest[p] = (version, facts)
    return facts


def cached_chat_facts(path) -> ChatFacts | None:
    """read_chat_facts's answer when this version of the file was read before, else None. Only a stat: cheap
    enough for an event loop, which then needs no thread hop per request (a hop costs a request's time to first
    token ~0.2 ms on a busy machine)."""
    p, version = _file_version(path)
    hit = _latest.get(p)
    return hit[1] if hit is not None and hit[0] == version else None


_latest: dict[str, tuple[tuple, ChatFacts]] = {}    # real path -> (file version, ChatFacts) of its latest read


def _file_version(path) -> tuple[str, tuple]:
    p = os.path.realpath(os.fspath(path))
    st = os.stat(p)
    return p, (st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=32)
def _read_cached(path: str, _version_key) -> ChatFacts:
    from app.engine.gguf.model_info import read_model_info
    from app.engine.gguf.parser import parse_gguf

    info = read_model_info(path)
    gf = parse_gguf(path, keep_arrays=1 << 22)
    token_list = gf.get("tokenizer.ggml.tokens")
    token_list = token_list if isinstance(token_list, list) else []
    fim_ids = {k: gf.get(f"tokenizer.ggml.fim_{k}_token_id") for k in ("pre", "suf", "mid")}
    facts = chat_facts(info.architecture, info.chat_template, set(token_list), is_embedding=info.is_embedding,
                       fim_ids=fim_ids, token_list=token_list, is_reranker=info.pooling_type == RANK_POOLING)
    return replace(facts, sampling=info.sampling)
