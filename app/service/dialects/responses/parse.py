"""OpenAI's Responses API (POST /v1/responses) -> the internal request. Stateless: `input` as text or items
(messages, function_call, function_call_output), `instructions`, function tools, tool_choice, `reasoning`,
`text.format`; `previous_response_id` (server-side state) is refused with a 400 naming it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...generation import images as image_input
from ...generation.options import check_int, check_number
from ...generation.request import GenerationRequest, field, model_name, ollama_options
from ...generation.tools import call_message, check_tool_results, parse_tool_choice, parse_tools
from ...http.errors import ApiError
from ..openai.parse import parse_response_format

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


@dataclass(frozen=True)
class WireChoices:
    """What the response object echoes back that the internal request does not carry."""
    instructions: str | None = None
    tools: tuple = ()
    tool_choice: object = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    effort: str | None = None
    text_format: dict | None = None


def _bad(message: str, param: str = "input") -> ApiError:
    return ApiError(400, message, param=param)


def _content(content, where: str, images: list | None = None) -> str:
    """A content's text; `input_image` parts (data: URLs) go to `images` where the caller takes them."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a string or an array of content parts")
    parts = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif kind == "input_image" and images is not None:
            if p.get("file_id") and not p.get("image_url"):
                raise _bad(f"{where}.content[{j}]: file_id images are not supported (no file storage here); "
                           "send image_url as a data: URL")
            images.append(image_input.from_url(p.get("image_url"), f"{where}.content[{j}].image_url", "input"))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise _bad(f"{where}.content[{j}]: {kind} is not supported here")
        else:
            raise _bad(f"{where}.content[{j}]: unknown content part {kind!r}")
    return "".join(parts)


def _output_text(output) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _content(output, "function_call_output.output")
    return json.dumps(output)


def parse_input(raw) -> list[dict]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _bad("'input' must be a string or a non-empty array of items")
    out: list[dict] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            raw_role = item.get("role")
            role = ROLES.get(raw_role) if isinstance(raw_role, str) else None
            if role is None:
                raise _bad(f"{where}.role must be one of user, assistant, system, developer")
            imgs: list[bytes] = []
            msg: dict[str, Any] = {"role": role, "content": _content(item.get("content"), where, imgs)}
            if imgs:
                msg["images"] = imgs
            out.append(msg)
        elif kind == "function_call":
            name, cid, args = item.get("name"), item.get("call_id"), item.get("arguments", "{}")
            if not isinstance(name, str) or not name:
                raise _bad(f"{where}.name is required")
            if not isinstance(cid, str) or not cid:
                raise _bad(f"{where}.call_id is required")
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except ValueError:
                raise _bad(f"{where}.arguments must be a JSON object (a string that is not JSON)") from None
            if not isinstance(args, dict):
                raise _bad(f"{where}.arguments must be a JSON object")
            if not out or out[-1]["role"] != "assistant":        # calls join the assistant turn before them
                out.append({"role": "assistant", "content": ""})
            out[-1].setdefault("tool_calls", []).append(call_message(name, args, cid))
        elif kind == "function_call_output":
            cid = item.get("call_id")
            if not isinstance(cid, str) or not cid:
                raise _bad(f"{where}.call_id is required")
            out.append({"role": "tool", "content": _output_text(item.get("output", "")), "tool_call_id": cid})
        elif kind == "reasoning":
            continue                  # a previous turn's reasoning: the templates drop it from history anyway
        elif kind == "item_reference":
            raise _bad(f"{where}: item references need stored responses; this server is stateless")
        else:
            raise _bad(f"{where}.type {kind!r} is not supported")
    check_tool_results(out, "input")
    return out


def parse_reasoning(raw) -> tuple[bool | str | None, str | None]:
    """-> (think value for the internal request, the effort to echo)."""
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise _bad("'reasoning' must be an object", "reasoning")
    effort = raw.get("effort")
    if effort is None:
        return True, None
    if effort not in EFFORTS:
        raise _bad(f"'reasoning.effort' must be one of {', '.join(EFFORTS)}, got {effort!r}", "reasoning")
    if effort in ("none", "minimal"):
        return False, effort
    return ("high" if effort == "xhigh" else effort), effort


def parse_text_format(raw) -> tuple[bool, dict | None, dict | None]:
    if raw is None:
        return False, None, None
    fmt = raw.get("format") if isinstance(raw, dict) else None
    if fmt is None:
        return False, None, None
    if not isinstance(fmt, dict):
        raise _bad("'text.format' must be an object", "text")
    if fmt.get("type") == "json_schema":       # flat here: {"type", "name", "schema", "strict"}
        rf = {"type": "json_schema", "json_schema": {"schema": fmt.get("schema") or {"type": "object"}}}
    else:
        rf = fmt
    try:
        json_mode, schema = parse_response_format(rf)
    except ApiError as e:
        raise _bad(e.message.replace("response_format", "text.format"), "text") from None
    return json_mode, schema, fmt


def parse_responses(body: dict) -> tuple[GenerationRequest, WireChoices]:
    if body.get("previous_response_id") is not None or body.get("conversation") is not None:
        key = "previous_response_id" if body.get("previous_response_id") is not None else "conversation"
        raise _bad(f"'{key}' needs stored responses; this server is stateless: send the whole conversation in "
                   "'input'", key)
    req = GenerationRequest(model=model_name(body), messages=parse_input(body.get("input")))
    instructions = field(body, "instructions", str)
    if instructions:
        req.messages = [{"role": "system", "content": instructions}] + (req.messages or [])
    req.tools = parse_tools(body.get("tools"))
    req.tool_choice = parse_tool_choice(body.get("tool_choice"), req.tools)
    req.parallel_tool_calls = field(body, "parallel_tool_calls", bool, True)
    req.think, effort = parse_reasoning(body.get("reasoning"))
    req.think_mode = "prefer"                      # a model that cannot think ignores `reasoning`
    req.json_mode, req.json_schema, text_format = parse_text_format(body.get("text"))
    req.stream = field(body, "stream", bool, False)
    opts: dict = {}
    if body.get("max_output_tokens") is not None:
        opts["num_predict"] = check_int("max_output_tokens", body["max_output_tokens"], 1)
    if body.get("temperature") is not None:
        opts["temperature"] = check_number("temperature", body["temperature"], 0, 2)
    if body.get("top_p") is not None:
        opts["top_p"] = check_number("top_p", body["top_p"], 0, 1)
    req.options = {**ollama_options(body), **opts}
    wire = WireChoices(instructions=instructions, tools=tuple(body.get("tools") or ()),
                       tool_choice=body.get("tool_choice", "auto"), parallel_tool_calls=req.parallel_tool_calls,
                       temperature=opts.get("temperature"), top_p=opts.get("top_p"),
                       max_output_tokens=opts.get("num_predict"), effort=effort, text_format=text_format)
    return req, wire
