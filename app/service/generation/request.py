"""The ONE internal request type of every API dialect, and the checks that keep it valid.

Each dialect's parser (dialects/<name>/parse.py) turns its wire format into a `GenerationRequest` or an
`EmbeddingRequest`; from there on nothing knows which dialect asked (pipeline.py runs it, the dialect's
renderer turns the result back into its wire format). See docs/architecture.md, "Adding an API dialect".

Validation lives here: a field of the wrong kind, an integer outside int32 or a number that is not finite is a
400 that names the field (`field()`), as Ollama refuses them. The model's own defaults (Modelfile PARAMETERs,
SYSTEM, TEMPLATE) are applied later, by generation.prepare(), once the model is known.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field as dc_field
from typing import Any

from ..http.errors import ApiError
from .keep_alive import DEFAULT, KeepAlive

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


@dataclass
class GenerationRequest:
    """A text generation, dialect-neutral.

    Exactly one of `messages` (chat: rendered with the model's chat template) or `prompt` (completion: rendered
    with the request's or the Modelfile's Go `template` unless `raw`) is set. Messages have the chat-template
    shape: {"role", "content"} plus optional fields the template understands ("tool_calls", "tool_name").
    `options` uses ONE vocabulary, Ollama's option names (num_predict, temperature, stop, num_ctx, ...): a
    dialect with other names (OpenAI's max_tokens) translates them in its parser, as Ollama's own OpenAI layer
    does. They are checked against the model's defaults in generation.prepare() (after the model is found, so
    an unknown model is a 404 first, as in Ollama)."""
    model: str                                   # as the client wrote it (renderers echo it where the wire does)
    messages: list[dict] | None = None
    prompt: str | None = None
    images: list[bytes] | None = None            # prompt requests: images before the prompt (messages carry their
                                                 # own as "images": [bytes]); checked by service/generation/images.py
    system: str | None = None                    # prompt requests: the system prompt (default: the Modelfile's)
    template: str | None = None                  # prompt requests: an Ollama Go template (default: the Modelfile's)
    raw: bool = False                            # prompt requests: no template at all
    options: dict = dc_field(default_factory=dict)
    logit_bias: dict[int, float] | None = None   # token id -> bias (no Ollama option name for it)
    keep_alive: KeepAlive = DEFAULT
    json_mode: bool = False                      # any JSON object
    json_schema: dict | None = None              # JSON that matches this schema
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    return_progress: bool = False                # a stream also says how a long prompt's reading goes (llama-server's
                                                 # `return_progress`; each dialect's renderer has its own frame)
    want_context: bool = False                   # Ollama /api/generate: return the context token ids
    context: list[int] | None = None             # Ollama /api/generate: token ids of a previous reply, before prompt
    # tools, thinking, fill-in-the-middle (tools.py has the shapes; docs/architecture.md, "Tool calls")
    tools: list[dict] | None = None              # {"type": "function", "function": {name, description, parameters}}
    tool_choice: str | None = None               # None (= auto) | "none" | "auto" | "required" | a function's name
    parallel_tool_calls: bool = True
    think: bool | str | None = None              # None: the template's default; "low" / "medium" / "high": effort
    think_budget: int | None = None              # at most this many thinking tokens (Anthropic budget_tokens)
    # an effort level (minimal / low / medium / high: OpenAI reasoning_effort, Responses reasoning.effort, Ollama's
    # think levels, Anthropic output_config.effort): the runner makes it a budget from the reply's room
    # (runner/sampling/think_budget.effort_budget) when no budget is given
    think_effort: str | None = None
    # how `think` was asked: "require" (Ollama's `think`: a model that cannot think is a 400, as Ollama answers)
    # or "prefer" (OpenAI's reasoning_effort, Responses' reasoning, Anthropic's thinking / output_config.effort:
    # ignored by a model that cannot think, as llama-server does); chat_features.settle_thinking applies it
    think_mode: str = "require"
    suffix: str | None = None                    # completion requests: the text after the gap (insert)
    # tools the request offered that cannot run on this server (the Responses API's hosted web_search,
    # file_search...): left out of `tools`, named in the X-Strata-Dropped-Tools response header
    dropped_tools: list[str] = dc_field(default_factory=list)
    # a prompt longer than the context (runner/prompt/context_fit.py): "error" (OpenAI, Anthropic, truncate=false),
    # "drop_messages" (Ollama's chat: oldest messages go), "truncate" (Ollama's prompt: the token rule)
    overflow: str = "error"
    # a reply that fills the context: True shifts it (Ollama's `shift`, its default), False ends it with "length"
    # (llama-server's, OpenAI's and Anthropic's rule); None: the overflow rule's (shift unless "error")
    shift: bool | None = None


# an effort level as the wire spells it (OpenAI, Responses, Anthropic's output_config.effort, Ollama's think) ->
# (the `think` value the template gets, the budget level: runner/sampling/think_budget.EFFORT_BUDGETS). "none"
# turns thinking off; minimal thinks at the template's least effort under the smallest budget; OpenAI's xhigh and
# Anthropic's xhigh / max are high.
EFFORT_LEVELS: dict[str, tuple[bool | str, str | None]] = {
    "none": (False, None), "minimal": ("low", "minimal"), "low": ("low", "low"), "medium": ("medium", "medium"),
    "high": ("high", "high"), "xhigh": ("high", "high"), "max": ("high", "high")}


@dataclass
class EmbeddingRequest:
    model: str
    inputs: list[str]                            # empty: only load the model (Ollama)
    truncate: bool = True
    normalize: bool = True                       # L2-normalise (False for Ollama's legacy /api/embeddings)
    dimensions: int | None = None                # keep the first N dimensions, normalised again
    options: dict = dc_field(default_factory=dict)
    keep_alive: KeepAlive = DEFAULT


# ---- checks -----------------------------------------------------------------------------------------------

_TYPES = {str: "a string", bool: "true or false", int: "an integer", float: "a number", dict: "an object",
          list: "an array"}


def field(body: dict, key: str, typ: type | tuple, default: Any = None, *, required: bool = False,
          name: str | None = None) -> Any:
    """body[key] checked against a type; None/absent -> default (or a 400 when required). Integers must lie in
    int32 and numbers be finite. `name` is how the error names the field (default: `key`)."""
    name = name or key
    v = body.get(key)
    if v is None:
        if required:
            raise ApiError(400, f"{name!r} is required", param=name)
        return default
    types = typ if isinstance(typ, tuple) else (typ,)
    if float in types and isinstance(v, int) and not isinstance(v, bool):
        v = float(v) if abs(v) < 2 ** 1023 else math.inf
    elif int in types and isinstance(v, float) and v.is_integer() and bool not in types:
        v = int(v)
    ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
    if not ok:
        want = " or ".join(_TYPES.get(t, t.__name__) for t in types)
        raise ApiError(400, f"{name!r} must be {want}, got {_show(body.get(key))}", param=name)
    if isinstance(v, float) and not math.isfinite(v):
        raise ApiError(400, f"{name!r} must be a finite number, got {_show(body.get(key))}", param=name)
    if isinstance(v, int) and not isinstance(v, bool) and not INT32_MIN <= v <= INT32_MAX:
        raise ApiError(400, f"{name!r} must be an integer between {INT32_MIN} and {INT32_MAX}, "
                            f"got {_show(body.get(key))}", param=name)
    return v


def ollama_options(body: dict) -> dict:
    """Ollama's `options` object and a top-level `num_ctx` on a non-Ollama endpoint (clients send them as extra
    body fields): internal options, checked later like Ollama's own (generation.request_options)."""
    opts = dict(field(body, "options", dict) or {})
    if body.get("num_ctx") is not None:
        opts["num_ctx"] = body["num_ctx"]
    return opts


def model_name(body: dict, key: str = "model") -> str:
    name = field(body, key, str, required=True)
    if not name.strip():
        raise ApiError(400, f"{key!r} must not be empty", param=key)
    return name.strip()


def in_range(name: str, v: int, lo: int, hi: int, message: str | None = None) -> int:
    if not lo <= v <= hi:
        raise ApiError(400, message or f"{name!r} must be between {lo} and {hi}, got {v}", param=name)
    return v


def _show(v) -> str:
    try:
        return json.dumps(v)[:60]
    except (TypeError, ValueError):
        return repr(v)[:60]
