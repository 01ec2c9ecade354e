"""OpenAI's wire format -> the internal request (as the `openai` package's types define it). Its sampling
fields are translated into the internal (Ollama) option names here, as Ollama's own OpenAI layer does; errors
are OpenAI-style 400s whose `param` names the field."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...generation import images as image_input
from ...generation.options import check_int, check_number, parse_stop
from ...generation.request import (EFFORT_LEVELS, EmbeddingRequest, GenerationRequest, INT64_MAX, INT64_MIN, field,
                                   in_range, model_name, ollama_options)
from ...generation.tools import check_tool_results, parse_tool_calls, parse_tool_choice, parse_tools
from ...http.errors import ApiError

@dataclass(frozen=True)
class WireChoices:
    """What the renderer needs from the body that the internal request does not carry."""
    include_usage: bool = False          # stream_options.include_usage: a last chunk with the token counts
    echo: bool = False                   # /v1/completions: the prompt comes first in the text
    logprobs: int | None = None          # /v1/completions: top-N alternatives per token (None: no logprobs)


ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
            "function": "tool"}


def _content(content, i: int) -> tuple[str, list[bytes]]:
    """A message's content -> (its text, its images: `image_url` parts with data: URLs)."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if isinstance(content, list):
        parts, imgs = [], []
        for part in content:
            if not isinstance(part, dict):
                raise ApiError(400, f"messages[{i}].content parts must be objects", param="messages")
            kind = part.get("type")
            if kind in ("text", "input_text"):
                if not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content text part needs 'text'", param="messages")
                parts.append(part["text"])
            elif kind == "image_url":
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                imgs.append(image_input.from_url(url, f"messages[{i}].content image_url.url", "messages"))
            elif kind in ("input_image", "input_audio", "file"):
                raise ApiError(400, f"messages[{i}]: content of type {kind!r} is not supported by this model",
                               param="messages")
            else:
                raise ApiError(400, f"messages[{i}]: unknown content part type {kind!r}", param="messages")
        return "".join(parts), imgs
    raise ApiError(400, f"messages[{i}].content must be a string or a list of parts", param="messages")


def parse_messages(raw) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}] must be an object", param="messages")
        role = m.get("role")
        role = ROLE_MAP.get(role) if isinstance(role, str) else None     # a list/object role is not a dict key
        if role is None:
            raise ApiError(400, f"messages[{i}].role must be one of system, developer, user, assistant, tool; "
                                f"got {m.get('role')!r}", param="messages")
        text, imgs = _content(m.get("content"), i)
        msg: dict[str, Any] = {"role": role, "content": text}
        if imgs:
            msg["images"] = imgs
        if role == "assistant" and m.get("tool_calls") is not None:
            msg["tool_calls"] = parse_tool_calls(m["tool_calls"], f"messages[{i}]", "messages")
        if role == "assistant" and isinstance(m.get("function_call"), dict):      # the deprecated single call
            msg["tool_calls"] = parse_tool_calls([{"function": m["function_call"]}], f"messages[{i}]", "messages")
        if role == "assistant" and isinstance(m.get("reasoning_content"), str) and m["reasoning_content"]:
            msg["reasoning_content"] = m["reasoning_content"]
        if role == "tool":
            if m.get("role") == "function":                 # deprecated: answered by function name
                msg["name"] = field(m, "name", str, required=True, name=f"messages[{i}].name")
            else:
                msg["tool_call_id"] = field(m, "tool_call_id", str, required=True, name=f"messages[{i}].tool_call_id")
        out.append(msg)
    check_tool_results(out)
    return out


def parse_response_format(rf) -> tuple[bool, dict | None]:
    if rf is None:
        return False, None
    if not isinstance(rf, dict) or "type" not in rf:
        raise ApiError(400, "'response_format' must be an object with a 'type'", param="response_format")
    t = rf["type"]
    if t == "text":
        return False, None
    if t == "json_object":
        return True, None
    if t == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
            raise ApiError(400, "'response_format.json_schema' must be an object with a 'schema' object",
                           param="response_format")
        return False, js.get("schema") or {"type": "object"}
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, got {t!r}",
                   param="response_format")


def _include_usage(body: dict) -> bool:
    so = field(body, "stream_options", dict) or {}
    return field(so, "include_usage", bool, False)


def sampling_options(body: dict) -> dict:
    """OpenAI's top-level sampling fields as internal (Ollama) options, with OpenAI's ranges."""
    opts: dict = {}
    if body.get("temperature") is not None:
        opts["temperature"] = check_number("temperature", body["temperature"], 0, 2)
    if body.get("top_p") is not None:
        opts["top_p"] = check_number("top_p", body["top_p"], 0, 1)
    if body.get("presence_penalty") is not None:
        opts["presence_penalty"] = check_number("presence_penalty", body["presence_penalty"], -2, 2)
    if body.get("frequency_penalty") is not None:
        opts["frequency_penalty"] = check_number("frequency_penalty", body["frequency_penalty"], -2, 2)
    if body.get("seed") is not None:      # OpenAI's seed is any 64-bit integer; llama.cpp's is 32 bits
        opts["seed"] = check_int("seed", body["seed"], INT64_MIN, INT64_MAX) & 0xFFFFFFFF
    for key in ("max_completion_tokens", "max_tokens"):
        if body.get(key) is not None:
            opts["num_predict"] = check_int(key, body[key], 1)
            break
    if body.get("stop") is not None:
        opts["stop"] = parse_stop("stop", body["stop"])
    return opts


def parse_logit_bias(body: dict) -> dict[int, float] | None:
    lb = body.get("logit_bias")
    if lb is None:
        return None
    if not isinstance(lb, dict):
        raise ApiError(400, "option 'logit_bias' must be an object of token id -> bias", param="logit_bias")
    bias = {}
    for k, v in lb.items():
        try:
            tok = int(k)
        except (TypeError, ValueError):
            raise ApiError(400, f"option 'logit_bias' keys must be token ids, got {k!r}", param="logit_bias") from None
        bias[tok] = check_number("logit_bias", v, -100, 100)
    return bias


def _check_n(body: dict) -> None:
    n = field(body, "n", int, 1)
    if n != 1:
        raise ApiError(400, f"'n' must be 1 (one choice per request), got {n}", param="n")


def _parse_tools(req: GenerationRequest, body: dict) -> None:
    """tools / tool_choice / parallel_tool_calls, and the deprecated functions / function_call."""
    if body.get("tools") is not None:
        req.tools = parse_tools(body.get("tools"))
        req.tool_choice = parse_tool_choice(body.get("tool_choice"), req.tools)
    elif body.get("functions") is not None:
        fns = field(body, "functions", list)
        req.tools = parse_tools([{"type": "function", "function": f} for f in fns], "functions")
        fc = body.get("function_call")
        fc = {"type": "function", "function": fc} if isinstance(fc, dict) else fc
        req.tool_choice = parse_tool_choice(fc, req.tools, "function_call")
    elif body.get("tool_choice") is not None:
        req.tool_choice = parse_tool_choice(body.get("tool_choice"), None)
    req.parallel_tool_calls = field(body, "parallel_tool_calls", bool, True)


EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")       # what OpenAI accepts


def parse_reasoning_effort(body: dict) -> tuple[bool | str | None, str | None]:
    """reasoning_effort (or reasoning.effort) -> (the internal `think`, the thinking budget's level:
    EFFORT_LEVELS); (None, None) when absent."""
    effort, name = body.get("reasoning_effort"), "reasoning_effort"
    if effort is None and isinstance(body.get("reasoning"), dict):
        effort, name = body["reasoning"].get("effort"), "reasoning.effort"
    if effort is None:
        return None, None
    if not isinstance(effort, str) or effort not in EFFORTS:
        raise ApiError(400, f"{name!r} must be one of {', '.join(EFFORTS)}, got {effort!r}", param=name)
    return EFFORT_LEVELS[effort]


def parse_chat(body: dict) -> tuple[GenerationRequest, WireChoices]:
    """/v1/chat/completions."""
    req = GenerationRequest(model=model_name(body), messages=parse_messages(body.get("messages")))
    req.return_progress = bool(field(body, "return_progress", bool, False))
    req.stream = field(body, "stream", bool, False)
    wire = WireChoices(include_usage=_include_usage(body))
    _check_n(body)
    req.json_mode, req.json_schema = parse_response_format(body.get("response_format"))
    _parse_tools(req, body)
    (req.think, req.think_effort), req.think_mode = parse_reasoning_effort(body), "prefer"   # ignored by a
    # model that cannot think
    req.logprobs = field(body, "logprobs", bool, False)
    req.top_logprobs = field(body, "top_logprobs", int, 0)
    in_range("top_logprobs", req.top_logprobs, 0, 20, "'top_logprobs' must be between 0 and 20")
    if req.top_logprobs and not req.logprobs:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    req.options = {**ollama_options(body), **sampling_options(body)}     # OpenAI's own fields win
    req.logit_bias = parse_logit_bias(body)
    return req, wire


def parse_completion(body: dict) -> tuple[GenerationRequest, WireChoices]:
    """/v1/completions."""
    req = GenerationRequest(model=model_name(body), raw=True)
    req.return_progress = bool(field(body, "return_progress", bool, False))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        elif all(isinstance(x, str) for x in prompt):
            raise ApiError(400, "only one prompt per request is supported", param="prompt")
        else:
            raise ApiError(400, "token-id prompts are not supported; send text", param="prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string", param="prompt")
    req.prompt = prompt
    req.stream = field(body, "stream", bool, False)
    usage = _include_usage(body)
    _check_n(body)
    if field(body, "best_of", int, 1) != 1:
        raise ApiError(400, "'best_of' must be 1", param="best_of")
    req.suffix = field(body, "suffix", str) or None     # insert: checked against the model's FIM tokens
    echo = field(body, "echo", bool, False)
    lp = field(body, "logprobs", int)
    if lp is not None:
        in_range("logprobs", lp, 0, 20, "'logprobs' must be between 0 and 20")
    req.logprobs, req.top_logprobs = lp is not None, lp or 0
    req.options = {**ollama_options(body), **sampling_options(body)}
    if body.get("max_tokens") is None and "num_predict" not in req.options:
        req.options["num_predict"] = 16            # OpenAI's default for /v1/completions
    req.logit_bias = parse_logit_bias(body)
    return req, WireChoices(include_usage=usage, echo=echo, logprobs=lp)


def parse_embeddings(body: dict) -> tuple[EmbeddingRequest, str]:
    """/v1/embeddings -> (request, encoding_format)."""
    name = model_name(body)
    raw = body.get("input")
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(s, str) for s in raw):
        inputs = list(raw)
    elif isinstance(raw, list) and raw and all(isinstance(s, (int, list)) for s in raw):
        raise ApiError(400, "token-id inputs are not supported; send text", param="input")
    else:
        raise ApiError(400, "'input' must be a non-empty string or array of strings", param="input")
    if any(s == "" for s in inputs):
        raise ApiError(400, "'input' must not contain empty strings", param="input")
    encoding = field(body, "encoding_format", str, "float")
    if encoding not in ("float", "base64"):
        raise ApiError(400, "'encoding_format' must be float or base64", param="encoding_format")
    dims = field(body, "dimensions", int)
    if dims is not None and dims < 1:
        raise ApiError(400, "'dimensions' must be >= 1", param="dimensions")
    return EmbeddingRequest(model=name, inputs=inputs, dimensions=dims), encoding
