"""Tokenizing a long prompt from an earlier one's tokens (app/engine/runner/prompt/prefix_tokens.py) gives exactly
the tokens of tokenizing it whole: on SmolLM2's and Qwen2.5-Coder's vocabularies (vocab-only loads), for an
agent's turns (OpenCode's recorded system prompt and tools in ChatML, a conversation growing by tool calls and
results), for edits anywhere in the text, and for texts whose special tokens cannot be paired one to one."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.output.text import Vocab
from app.engine.runner.prompt.prefix_tokens import MIN_CHARS, PrefixTokens, common_prefix_chars

FIXTURE = Path(__file__).resolve().parents[4] / "support" / "fixtures" / "agents" / "opencode" / "02-build.json"


@pytest.fixture(scope="module", params=["smollm2", "qwen"])
def vocab(request, smollm2_path):
    if request.param == "qwen":
        path = request.getfixturevalue("qwen_coder_path")
    else:
        path = smollm2_path
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.vocab_only = True
    model = L.llama_model_load_from_file(str(path).encode(), mp)
    assert model
    v = L.llama_model_get_vocab(model)
    yield v, Vocab(v, L.llama_vocab_n_tokens(v))
    L.llama_model_free(model)


def chatml(system: str, tools: list, turns: list[tuple[str, str]]) -> str:
    out = f"<|im_start|>system\n{system}\n\n# Tools\n<tools>\n"
    out += "\n".join(json.dumps(t) for t in tools) + "\n</tools><|im_end|>\n"
    for role, text in turns:
        out += f"<|im_start|>{role}\n{text}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def recorded():
    body = json.loads(FIXTURE.read_text())["body"]
    system = "\n".join(m["content"] if isinstance(m["content"], str) else
                       "\n".join(p.get("text", "") for p in m["content"]) for m in body["messages"]
                       if m["role"] == "system")
    return system, body["tools"]


def test_an_agents_turns_are_tokenized_as_whole_texts(vocab):
    v, out = vocab
    system, tools = recorded()
    pt = PrefixTokens(v, out.piece)
    turns = [("user", "Write hello.py that prints hello.")]
    rng = random.Random(3)
    for i in range(6):
        text = chatml(system, tools, turns)
        assert len(text) > MIN_CHARS
        for add_special in (True, False):
            assert pt.tokenize(text, add_special) == tokenize(v, text, add_special, True), (i, add_special)
        call = json.dumps({"name": "write", "arguments": {"filePath": f"/tmp/p/f{i}.py",
                                                            "content": "print('hello')\n" * rng.randint(1, 5)}})
        turns += [("assistant", f"<tool_call>\n{call}\n</tool_call>"),
                  ("user", f"<tool_response>\nWrote file successfully ({i}).\n</tool_response>")]
    assert pt.reused_chars > 5 * len(system)          # the turns after the first came from the earlier tokens


def test_edits_anywhere_give_the_whole_texts_tokens(vocab):
    """An edit early (a date in the system prompt), in the middle, inside a special token's text, next to one,
    at the very end: every result equals the whole text's tokens."""
    v, out = vocab
    system, tools = recorded()
    turns = [("user", "Fix the bug in main.py, please.")]
    for i in range(30):                                   # a session's history after the system prompt and tools
        turns += [("assistant", f"<tool_call>\n{{\"name\": \"read\", \"arguments\": {{\"path\": \"m{i}.py\"}}}}\n</tool_call>"),
                  ("user", f"<tool_response>\ndef f{i}(x):\n    return x * {i}\n" * 8 + "</tool_response>")]
    base = chatml(system, tools, turns)
    rng = random.Random(11)
    spliced = 0
    for _ in range(40):
        pt = PrefixTokens(v, out.piece)
        pt.tokenize(base, True)
        at = rng.randrange(len(base) // 4, len(base)) if _ % 2 else rng.randrange(len(base))
        edit = rng.choice(["x", " ", "\n", "<|im_end|>", "<|im_start|>user\n", "", "é", "<tool_call>", "2026-11-28"])
        cut = rng.randint(0, 12)
        text = base[:at] + edit + base[at + cut:]
        assert pt.tokenize(text, True) == tokenize(v, text, True, True), (at, edit, cut)
        spliced += pt.reused_chars > 0
    assert spliced >= 10                                  # most edits past the first half reuse the earlier tokens


def test_special_texts_that_do_not_pair_are_never_cuts(vocab):
    """A BOS added by the tokenizer has no text; a special token's text written inside plain words pairs or not
    depending on the vocabulary: whatever happens, the tokens are the whole text's."""
    v, out = vocab
    bos = out.piece(L.llama_vocab_bos(v), special=True).decode("utf-8", "replace") if L.llama_vocab_bos(v) >= 0 else ""
    body = ("word " * 3000) + "<|im_start|>user\nquoted: <|im_end|><|im_end|> and " + bos + " and <|im_start|>\n"
    pt = PrefixTokens(v, out.piece)
    pt.tokenize(body + "first question", True)
    for tail in ("second question", "<|im_end|>", bos + bos):
        text = body + tail
        assert pt.tokenize(text, True) == tokenize(v, text, True, True), tail


def test_common_prefix_chars():
    assert common_prefix_chars("abcdef", "abcxyz") == 3
    assert common_prefix_chars("", "abc") == 0 and common_prefix_chars("abc", "abc") == 3
    a = "q" * 100_000
    assert common_prefix_chars(a, a[:-1] + "r") == 99_999
