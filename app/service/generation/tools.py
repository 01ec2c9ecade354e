"""Tools in requests, whichever dialect: checking them and putting them in the shapes chat templates expect.

Every dialect's parser turns its own wire shapes into these (Hugging Face's, which GGUF chat templates are
written for; docs/architecture.md, "Tool calls"):
- a tool:        {"type": "function", "function": {"name", "description", "parameters": JSON schema}}
- a call made:   {"id", "type": "function", "function": {"name", "arguments": {...}}}  (arguments an OBJECT:
                 templates iterate or `tojson` it; OpenAI's wire carries it as a JSON string)
- a tool result: {"role": "tool", "content", "tool_call_id", "name"}
and `tool_choice` into one of "none", "auto", "required" or the name of a function.
Bad input is a 400 that names the field.
"""
from __future__ import annotations

import json
import re
import uuid

from ..http.errors import ApiError

_NAME = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
CHOICES = ("none", "auto", "required")


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def function_tool(name, description, parameters, where: str, param: str) -> dict:
    """One tool in the template shape, checked: a name, and parameters that are a JSON-schema object."""
    if not isinstance(name, str) or not name.strip():
        raise _bad(f"{where}.name is required (a non-empty string)", param)
    if not _NAME.match(name):
        raise _bad(f"{where}.name {name!r} may only use letters, digits, '_', '-', '.', ':' (at most 128)", param)
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise _bad(f"{where}.parameters must be a JSON schema object", param)
    if description is not None and not isinstance(description, str):
        raise _bad(f"{where}.description must be a string", param)
    # description always present: some templates (gpt-oss) concatenate it, and a missing key fails them
    return {"type": "function", "function": {"name": name, "description": description or "",
                                             "parameters": parameters}}


def parse_tools(raw, param: str = "tools") -> list[dict] | None:
    """OpenAI's / Ollama's `tools` (also the flat {"type": "function", "name", "parameters"} of the Responses
    API). None or [] -> None."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise _bad(f"{param!r} must be an array of tools", param)
    tools, seen = [], set()
    for i, t in enumerate(raw):
        where = f"{param}[{i}]"
        if not isinstance(t, dict):
            raise _bad(f"{where} must be an object", param)
        kind = t.get("type", "function")
        if kind != "function":
            raise _bad(f"{where}.type {kind!r} is not supported (only 'function')", param)
        fn = t.get("function") if isinstance(t.get("function"), dict) else None
        if fn is not None:
            tool = function_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), f"{where}.function",
                                 param)
        elif "function" in t:
            raise _bad(f"{where}.function must be an object", param)
        else:
            tool = function_tool(t.get("name"), t.get("description"), t.get("parameters"), where, param)
        name = tool["function"]["name"]
        if name in seen:
            raise _bad(f"{where}: two tools are named {name!r}", param)
        seen.add(name)
        tools.append(tool)
    return tools or None


def tool_names(tools: list[dict] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or ()]


def parse_tool_choice(raw, tools: list[dict] | None, param: str = "tool_choice") -> str | None:
    """"none" | "auto" | "required" | a function's name; {"type": "function", "function": {"name"}} and the
    Responses API's {"type": "function", "name"} name one. None when absent."""
    if raw is None:
        return None
    name = None
    if isinstance(raw, str):
        if raw in CHOICES:
            choice = raw
        else:
            raise _bad(f"{param!r} must be one of none, auto, required or a function, got {raw!r}", param)
    elif isinstance(raw, dict) and raw.get("type") == "function":
        fn = raw["function"] if isinstance(raw.get("function"), dict) else raw
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"{param}.function.name is required", param)
        choice = name
    else:
        raise _bad(f"{param!r} must be one of none, auto, required or {{\"type\": \"function\", ...}}, "
                   f"got {json.dumps(raw)[:60]}", param)
    if choice != "none" and not tools:
        raise _bad(f"{param!r} is {choice!r} but no tools were given", param)
    if name is not None and name not in tool_names(tools):
        raise _bad(f"{param!r} names {name!r}, which is not among the tools", param)
    return choice


def _arguments(raw, where: str, param: str) -> dict:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise _bad(f"{where}.arguments must be a JSON object (got a string that is not JSON)", param) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _bad(f"{where}.arguments must be an object, got {json.dumps(raw)[:60]}", param)
    return raw


def parse_tool_calls(raw, where: str, param: str) -> list[dict]:
    """An assistant message's `tool_calls` (OpenAI or Ollama shape) in the template shape, ids filled in."""
    if not isinstance(raw, list):
        raise _bad(f"{where}.tool_calls must be an array", param)
    out = []
    for j, c in enumerate(raw):
        w = f"{where}.tool_calls[{j}]"
        if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
            raise _bad(f"{w} must be an object with a 'function'", param)
        fn = c["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            raise _bad(f"{w}.function.name is required", param)
        cid = c["id"] if isinstance(c.get("id"), str) and c["id"] else new_call_id()
        out.append(call_message(name, _arguments(fn.get("arguments"), f"{w}.function", param), cid))
    return out


def call_message(name: str, arguments: dict, call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def check_tool_results(messages: list[dict], param: str = "messages") -> None:
    """Every tool message answers a call an earlier assistant message made: by id (tool_call_id) or by
    function name (Ollama's tool_name); a tool message with neither is matched to the calls made before it.
    Fills in the missing one of id/name so templates that print either find it."""
    calls: dict[str, str] = {}            # id -> name
    names: dict[str, str] = {}            # name -> last id
    for i, m in enumerate(messages):
        for c in m.get("tool_calls") or ():
            calls[c["id"]] = c["function"]["name"]
            names[c["function"]["name"]] = c["id"]
        if m.get("role") != "tool":
            continue
        cid, name = m.get("tool_call_id"), m.get("name")
        if cid is not None:
            if cid not in calls:
                raise _bad(f"{param}[{i}] answers tool_call_id {cid!r}, but no earlier assistant message made "
                           "that call", param)
            m.setdefault("name", calls[cid])
        elif name is not None:
            if name not in names:
                raise _bad(f"{param}[{i}] is the result of tool {name!r}, but no earlier assistant message "
                           "called it", param)
            m["tool_call_id"] = names[name]
        elif not calls:
            raise _bad(f"{param}[{i}] is a tool result, but no earlier assistant message made a tool call", param)
