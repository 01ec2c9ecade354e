"""Anthropic's Messages API wire format -> the internal request (as the `anthropic` package's types define it).

System text (a string or text blocks, `cache_control` and all), system turns inside `messages` (the
mid-conversation system messages Claude Code sends: a system message at their place), content blocks (text,
image, text documents, tool_use, tool_result, thinking), tools with `input_schema`, tool_choice (auto / any / tool
/ none), `thinking` (enabled / adaptive / disabled), `output_config` (`effort`, `format`), `stop_sequences`,
sampling fields -> internal (Ollama) option names. What only steers Anthropic's own servers (`metadata`,
`context_management`, `cache_control`, `service_tier`, the `anthropic-beta` header) is read for its shape and
otherwise ignored, as the API ignores it for a model without that feature. README's Anthropic section has the
field table. Errors are 400s naming the field; the error middleware writes them in Anthropic's shape."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...generation import images as image_input
from ...generation.options import check_int, check_number, parse_stop
from ...generation.request import EFFORT_LEVELS, GenerationRequest, field, model_name, ollama_options
from ...generation.tools import call_message, check_tool_results, function_tool
from ...http.errors import ApiError

ROLES = ("user", "assistant", "system")
EFFORTS = ("low", "medium", "high", "xhigh", "max")      # output_config.effort as Anthropic accepts it


@dataclass(frozen=True)
class WireChoices:
    stop_sequences: tuple[str, ...] = ()


def _bad(message: str, param: str = "messages") -> ApiError:
    return ApiError(400, message, param=param)


def _text_of(content, where: str, param: str = "messages") -> str:
    """A tool_result's content, a system turn or the system field: a string or a list of text blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, b in enumerate(content):
            if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
                kind = b.get("type") if isinstance(b, dict) else type(b).__name__
                raise _bad(f"{where}[{j}]: only text blocks are supported here, got {kind!r}", param)
            parts.append(b["text"])
        return "".join(parts)
    raise _bad(f"{where} must be a string or a list of text blocks", param)


def _document(b: dict, where: str) -> str:
    """A document block whose source is text (plain text, or content blocks of text) -> its text, titled as
    given; a PDF or URL document needs what this server does not have."""
    source = b.get("source")
    if not isinstance(source, dict):
        raise _bad(f"{where}.source must be an object")
    kind = source.get("type")
    if kind == "text" and isinstance(source.get("data"), str):
        text = source["data"]
    elif kind == "content":
        text = _text_of(source.get("content"), f"{where}.source.content")
    else:
        raise _bad(f"{where}: {kind!r} documents are not supported by this server (only text documents)")
    title = b.get("title")
    return f"{title}\n\n{text}" if isinstance(title, str) and title else text


def _user(blocks, i: int) -> list[dict]:
    """A user turn: tool results become tool messages (first, in order), the text and images one user message."""
    out, text, imgs = [], [], []
    for j, b in enumerate(blocks):
        where = f"messages[{i}].content[{j}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            text.append(b["text"])
        elif kind == "tool_result":
            tid = b.get("tool_use_id")
            if not isinstance(tid, str) or not tid:
                raise _bad(f"{where}.tool_use_id is required")
            content = _text_of(b.get("content"), f"{where}.content")
            if b.get("is_error"):
                content = f"Error: {content}"
            out.append({"role": "tool", "content": content, "tool_call_id": tid})
        elif kind == "image":
            imgs.append(_image(b.get("source"), f"{where}.source"))
        elif kind == "document":
            text.append(_document(b, where))
        elif kind == "search_result":
            raise _bad(f"{where}: search_result blocks are not supported by this server")
        else:
            raise _bad(f"{where}: unknown or malformed content block {kind!r}")
    if text or imgs or not out:
        msg: dict[str, Any] = {"role": "user", "content": "".join(text)}
        if imgs:
            msg["images"] = imgs
        out.append(msg)
    return out


def _image(source, where: str) -> bytes:
    """An image block's source: {"type": "base64", "media_type", "data"}; a URL source is refused (never fetched)."""
    if not isinstance(source, dict):
        raise _bad(f"{where} must be an object")
    if source.get("type") == "url":
        return image_input.from_url(source.get("url"), f"{where}.url", "messages")     # refuses http(s) with a 400
    if source.get("type") != "base64":
        raise _bad(f"{where}.type must be 'base64' (got {source.get('type')!r})")
    return image_input.from_base64(source.get("data"), f"{where}.data", "messages")


def _assistant(blocks, i: int) -> dict:
    msg: dict = {"role": "assistant", "content": ""}
    text, calls, thinking = [], [], []
    for j, b in enumerate(blocks):
        where = f"messages[{i}].content[{j}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            text.append(b["text"])
        elif kind == "tool_use":
            name, tid, args = b.get("name"), b.get("id"), b.get("input", {})
            if not isinstance(name, str) or not name:
                raise _bad(f"{where}.name is required")
            if not isinstance(tid, str) or not tid:
                raise _bad(f"{where}.id is required")
            if not isinstance(args, dict):
                raise _bad(f"{where}.input must be an object, got {json.dumps(args)[:60]}")
            calls.append(call_message(name, args, tid))
        elif kind == "thinking" and isinstance(b.get("thinking"), str):
            thinking.append(b["thinking"])
        elif kind == "redacted_thinking":
            continue
        else:
            raise _bad(f"{where}: unknown or malformed content block {kind!r}")
    msg["content"] = "".join(text)
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning_content"] = "".join(thinking)     # the name Hugging Face templates (Qwen3...) read
    return msg


def parse_messages(raw) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise _bad("'messages' must be a non-empty array")
    out: list[dict] = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _bad(f"messages[{i}].role must be one of user, assistant, system")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise _bad(f"messages[{i}].content must be a string or an array of content blocks")
        if m["role"] == "system":           # a system turn at its place, as the chat template shows one
            out.append({"role": "system", "content": _text_of(blocks, f"messages[{i}].content")})
        elif m["role"] == "user":
            out.extend(_user(blocks, i))
        else:
            out.append(_assistant(blocks, i))
    check_tool_results(out)
    return out


# Tools Anthropic defines (a dated `type`): those that run on Anthropic's side (web search and fetch, code
# execution, tool search, MCP connectors) and those whose schema is built into Claude (bash, the text editor,
# memory, computer use) cannot be offered here as they are; they are left out and named in the
# X-Strata-Dropped-Tools response header, never a 400 (the model answers without them).
ANTHROPIC_TOOLS = ("web_search", "web_fetch", "code_execution", "tool_search_tool", "mcp_toolset", "bash",
                   "text_editor", "memory", "computer")


def _anthropic_tool(kind) -> bool:
    return isinstance(kind, str) and any(kind == a or kind.startswith(a + "_") for a in ANTHROPIC_TOOLS)


def parse_tools(raw) -> tuple[list[dict] | None, list[str]]:
    """-> (custom tools as function tools, the names of the Anthropic-defined tools left out)."""
    if raw is None:
        return None, []
    if not isinstance(raw, list):
        raise _bad("'tools' must be an array", "tools")
    tools, dropped = [], []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise _bad(f"tools[{i}] must be an object", "tools")
        kind = t.get("type", "custom")
        if _anthropic_tool(kind):
            dropped.append(t["name"] if isinstance(t.get("name"), str) and t["name"] else kind)
            continue
        if kind not in ("custom", None):
            raise _bad(f"tools[{i}].type {kind!r} is not a tool type (custom, or one of Anthropic's tools)",
                       "tools")
        tools.append(function_tool(t.get("name"), t.get("description"), t.get("input_schema"), f"tools[{i}]",
                                   "tools"))
    return tools or None, dropped


def parse_tool_choice(raw, tools, dropped: list[str] | tuple[str, ...] = ()) -> tuple[str | None, bool]:
    """-> (internal tool_choice, parallel calls allowed). Naming a tool that was left out (`dropped`) leaves the
    choice to the model."""
    if raw is None:
        return None, True
    if not isinstance(raw, dict) or raw.get("type") not in ("auto", "any", "tool", "none"):
        raise _bad("'tool_choice.type' must be one of auto, any, tool, none", "tool_choice")
    parallel = not field(raw, "disable_parallel_tool_use", bool, False, name="tool_choice.disable_parallel_tool_use")
    kind = raw["type"]
    if kind == "none":
        return "none", parallel
    if not tools and dropped:
        return None, parallel                # only Anthropic's own tools were given: none is left to choose
    if not tools:
        raise _bad(f"'tool_choice' is {kind!r} but no tools were given", "tool_choice")
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    name = raw.get("name")
    if name in dropped:
        return "auto", parallel
    if not isinstance(name, str) or name not in [t["function"]["name"] for t in tools]:
        raise _bad(f"'tool_choice.name' must name one of the tools, got {name!r}", "tool_choice")
    return name, parallel


MIN_THINKING_BUDGET = 1024          # Anthropic's own minimum


def parse_effort(raw) -> str | None:
    """`output_config.effort` -> a thinking effort (low / medium / high; Anthropic's xhigh and max are high). It
    steers thinking under adaptive thinking; without thinking it is ignored (the reply's length is not bounded by
    it on Anthropic's models either)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _bad("'output_config' must be an object", "output_config")
    effort = raw.get("effort")
    if effort is None:
        return None
    if not isinstance(effort, str) or effort not in EFFORTS:
        raise _bad(f"'output_config.effort' must be one of {', '.join(EFFORTS)}, got {effort!r}",
                   "output_config.effort")
    return EFFORT_LEVELS[effort][1]


def parse_thinking(raw, max_tokens: int | None = None,
                   effort: str | None = None) -> tuple[bool | str | None, int | None]:
    """-> (think, thinking budget in tokens). `enabled` needs `budget_tokens`, at least 1024 and below
    max_tokens, as Anthropic requires; the runner ends the thinking block when the budget is spent. `adaptive`
    lets the model think as much as `output_config.effort` says (the effort's budget: think_budget.py). Either is a preference: a model that
    cannot think answers without thinking (GenerationRequest.think_mode "prefer"), as Anthropic's API serves
    thinking requests to its models without it."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict) or raw.get("type") not in ("enabled", "disabled", "adaptive"):
        raise _bad("'thinking.type' must be enabled, disabled or adaptive", "thinking.type")
    if raw["type"] == "disabled":
        return False, None
    if raw["type"] == "adaptive":
        return effort or True, None
    budget = field(raw, "budget_tokens", int, required=True, name="thinking.budget_tokens")
    if budget < MIN_THINKING_BUDGET:
        raise _bad(f"'thinking.budget_tokens' must be at least {MIN_THINKING_BUDGET}, got {budget}",
                   "thinking.budget_tokens")
    if max_tokens is not None and budget >= max_tokens:
        raise _bad(f"'max_tokens' must be greater than 'thinking.budget_tokens' ({budget}), got {max_tokens}",
                   "thinking.budget_tokens")
    return True, budget


def sampling_options(body: dict) -> dict:
    opts: dict = {"num_predict": check_int("max_tokens", field(body, "max_tokens", int, required=True), 1)}
    if body.get("temperature") is not None:
        opts["temperature"] = check_number("temperature", body["temperature"], 0, 1)
    if body.get("top_p") is not None:
        opts["top_p"] = check_number("top_p", body["top_p"], 0, 1)
    if body.get("top_k") is not None:
        opts["top_k"] = check_int("top_k", body["top_k"], 0)
    if body.get("stop_sequences") is not None:
        opts["stop"] = parse_stop("stop_sequences", body["stop_sequences"])
    return opts


# Claude Code's first system block: billing metadata for Anthropic's servers, with a nonce (cch=) that changes on
# every request. Meaningless to a model, and at the very start of the prompt it would make every request's
# tokens differ from the last one's there, so no prompt cache could reuse the 15-20k tokens of system prompt and
# tools after it (llama.cpp drops it too: ggml-org/llama.cpp#20623).
BILLING_HEADER = "x-anthropic-billing-header:"


def parse_system(raw) -> str | None:
    """The system prompt: a string or text blocks, without Claude Code's attribution block."""
    if raw is None:
        return None
    if isinstance(raw, list):
        raw = [b for b in raw if not (isinstance(b, dict) and isinstance(b.get("text"), str)
                                      and b["text"].lstrip().startswith(BILLING_HEADER))]
    elif isinstance(raw, str) and raw.lstrip().startswith(BILLING_HEADER):
        raw = raw.lstrip().partition("\n")[2]
    return _text_of(raw, "system", "system")


def parse_output_format(body: dict) -> dict | None:
    """Structured output: `output_config.format` (or the beta's top-level `output_format`),
    {"type": "json_schema", "schema": {...}} -> the schema the reply must match."""
    config = body.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    where = "output_config.format"
    if fmt is None:
        fmt, where = body.get("output_format"), "output_format"
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise _bad(f"'{where}' must be {{\"type\": \"json_schema\", \"schema\": {{...}}}}", where)
    return fmt["schema"]


def check_ignored(body: dict) -> None:
    """Fields that only steer Anthropic's own servers: their shape is checked, their value is not used."""
    for key in ("metadata", "context_management", "container"):
        if body.get(key) is not None and not isinstance(body[key], dict) and not (
                key == "container" and isinstance(body[key], str)):
            raise _bad(f"{key!r} must be an object", key)
    user = (body.get("metadata") or {}).get("user_id")
    if user is not None and not isinstance(user, str):
        raise _bad("'metadata.user_id' must be a string", "metadata.user_id")
    edits = (body.get("context_management") or {}).get("edits")
    if edits is not None and not (isinstance(edits, list) and all(isinstance(e, dict) for e in edits)):
        raise _bad("'context_management.edits' must be an array of objects", "context_management.edits")
    if body.get("service_tier") is not None and body["service_tier"] not in ("auto", "standard_only"):
        raise _bad(f"'service_tier' must be auto or standard_only, got {body['service_tier']!r}", "service_tier")


def parse_messages_request(body: dict, *, count_only: bool = False) -> tuple[GenerationRequest, WireChoices]:
    """/v1/messages (and /v1/messages/count_tokens, which takes the same body and needs no max_tokens)."""
    req = GenerationRequest(model=model_name(body), messages=parse_messages(body.get("messages")))
    req.return_progress = bool(field(body, "return_progress", bool, False))
    system = parse_system(body.get("system"))
    if system:
        req.messages = [{"role": "system", "content": system}] + (req.messages or [])
    req.tools, req.dropped_tools = parse_tools(body.get("tools"))
    req.tool_choice, req.parallel_tool_calls = parse_tool_choice(body.get("tool_choice"), req.tools,
                                                                 req.dropped_tools)
    check_ignored(body)
    effort = parse_effort(body.get("output_config"))
    req.json_schema = parse_output_format(body)
    req.think_mode = "prefer"                  # a model that cannot think answers without thinking
    if count_only:
        req.think, _ = parse_thinking(body.get("thinking"), effort=effort)
        return req, WireChoices()
    req.stream = field(body, "stream", bool, False)
    req.options = {**ollama_options(body), **sampling_options(body)}     # max_tokens: the reply's limit
    req.think, req.think_budget = parse_thinking(body.get("thinking"), req.options["num_predict"], effort)
    if req.think and req.think_budget is None:
        req.think_effort = effort            # adaptive thinking under an effort: that effort's budget
    return req, WireChoices(tuple(req.options.get("stop", ())))
