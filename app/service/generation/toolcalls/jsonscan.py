"""JSON helpers for model output: where does a JSON value end, mend a cut-off one, read the shapes models use
for a tool call.

Models write calls as JSON, and small models write it imperfectly: a missing closing brace when they stop
early, `arguments` as a JSON string instead of an object, the call wrapped in `{"tool_call": ...}`. The parsers
accept those shapes and never raise on bad input: they return None, and the caller keeps the text.
"""
from __future__ import annotations

import json

from .types import ToolCall

_CLOSER = {"{": "}", "[": "]"}


def scan_brackets(text: str, start: int, depth: int = 0, in_str: bool = False,
                  esc: bool = False) -> tuple[int | None, int, bool, bool]:
    """Read text[start:] balancing brackets from the given state (depth, inside a string, after a backslash):
    (index just past the bracket that brings depth to 0, or None, and the state at the end of what was read).
    Strings and escapes are honoured; nothing is validated. A growing text is read on from the returned state."""
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1, depth, in_str, esc
    return None, depth, in_str, esc


def json_end(text: str, start: int = 0) -> int | None:
    """Index just past the object/array that starts at text[start] ('{' or '['), or None while it is still open.
    Strings and escapes are honoured; this only balances brackets and does not validate."""
    return scan_brackets(text, start)[0]


def mend(text: str) -> str:
    """Close what a cut-off JSON value left open (a string, objects, arrays); drop a dangling comma or colon.
    `{"name": "f", "arguments": {"city": "Par` -> `{"name": "f", "arguments": {"city": "Par"}}`."""
    stack, in_str, esc = [], False, False
    for c in text:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            stack.append(_CLOSER[c])
        elif c in "}]" and stack:
            stack.pop()
    out = text
    if in_str:
        out += '"'
    out = out.rstrip()
    while out.endswith((",", ":")):
        out = out[:-1].rstrip()
    return out + "".join(reversed(stack))


def loads_lenient(text: str):
    """json.loads, then the first complete value with trailing text ignored, then a mended cut-off value.
    None when nothing sensible comes out."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text, strict=False)     # a raw newline inside a string: models write them
    except ValueError:
        pass
    if text[0] in "{[":
        end = json_end(text)
        try:
            return json.loads(text[:end] if end else mend(text), strict=False)
        except ValueError:
            return None
    return None


def _arguments(raw):
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    if isinstance(raw, str):          # arguments sent as a JSON string (OpenAI's wire shape)
        v = loads_lenient(raw) if raw.strip() else {}
        return v if isinstance(v, dict) else None
    return None


def call_from_obj(obj) -> ToolCall | None:
    """One call from the shapes models write: {"name", "arguments"|"parameters"}, OpenAI's
    {"type": "function", "function": {...}}, {"function": {...}}, {"tool_call": {...}}; with an optional id."""
    if not isinstance(obj, dict):
        return None
    for wrapper in ("function", "tool_call", "function_call"):
        inner = obj.get(wrapper)
        if isinstance(inner, dict) and isinstance(inner.get("name"), str):
            call = call_from_obj(inner)
            if call is not None and call.id is None and isinstance(obj.get("id"), str):
                call.id = obj["id"]
            return call
    name = obj.get("name", obj.get("tool_name"))          # Command R writes tool_name
    if not isinstance(name, str) or not name.strip():
        return None
    raw = obj.get("arguments", obj.get("parameters", obj.get("args", obj.get("input"))))
    args = _arguments(raw)
    if args is None:
        return None
    cid = obj.get("id", obj.get("tool_call_id"))
    cid = cid if isinstance(cid, str) else None
    return ToolCall(name=name.strip(), arguments=args, id=cid)


def calls_from_value(value) -> list[ToolCall] | None:
    """A JSON value that is one call, a list of calls or {"tool_calls": [...]}; None if any part is not a call."""
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    if not items:
        return None
    calls = [c for c in (call_from_obj(v) for v in items) if c is not None]
    return calls if len(calls) == len(items) else None


def calls_from_text(text: str) -> list[ToolCall] | None:
    """Calls from JSON text (lenient: trailing text, cut-off values, several objects one after another)."""
    text = text.strip()
    if not text or text[0] not in "{[":
        return None
    calls: list[ToolCall] = []
    pos = 0
    while pos < len(text):
        end = json_end(text, pos)
        chunk = text[pos:end] if end else text[pos:]
        got = calls_from_value(loads_lenient(chunk))
        if got is None:
            return calls or None
        calls.extend(got)
        if end is None:
            break
        pos = end
        while pos < len(text) and text[pos] in " \t\r\n,;":
            pos += 1
        if pos < len(text) and text[pos] not in "{[":
            break                       # trailing prose after the calls: ignored here, the caller keeps it
    return calls or None
