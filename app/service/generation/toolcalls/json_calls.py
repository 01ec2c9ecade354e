"""Calls written as JSON: Hermes' `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen2.5, Qwen3,
SmolLM3, Command R's action list...), Llama 3's bare `{"name": ..., "parameters": {...}}` (several separated by
`;`, or a built-in tool's Python call after `<|python_tag|>`), a bare reply that is a call (the markerless
fallback), and gpt-oss's arguments body (its name came in the header).

In pieces, a call streams when its head is name-first (what the tool-call grammars write, and what models write;
a "type" or "id" key may come before either); a wrapper (`{"function": {...}}`), arguments before the name, a name
no tool has or a list of calls inside an object stop the reader where they begin, and the rest is read whole.
Whole, the values are read by jsonscan's call shapes (`calls_from_text`: lenient about cut-off values, trailing
text, the shapes small models write).

Covered by tests/unit/service/generation/toolcalls/test_section_parsers.py (each syntax read whole) and
test_toolcall_pieces.py (in pieces).
"""
from __future__ import annotations

import json
import re
from typing import Iterable

from .jsonscan import Brackets, calls_from_text, loads_lenient, scan_brackets
from .whole_calls import PythonCalls
from .reader import MAX_HEAD, WS, SyntaxReader
from .types import CallPart, ToolCall

_STR = r'"(?:[^"\\]|\\.)*"'
_OTHER_KEY = rf'"(?:type|id|tool_call_id)"\s*:\s*{_STR}\s*,\s*'
# a JSON call's head up to its arguments object: the name first; a "type" or "id" key may come before either
_JSON_HEAD = re.compile(rf'\{{\s*(?:{_OTHER_KEY})*"(?:name|tool_name)"\s*:\s*({_STR})\s*,\s*(?:{_OTHER_KEY})*'
                        r'"(?:arguments|parameters)"\s*:\s*\{', re.S)
STRAY = ">,(:"            # one character glued before a call's `{` ('>{"' is one Qwen token)


def without_stray(s: str) -> str:
    """`s` without one stray punctuation character glued before a JSON object (`>{"name"...`)."""
    return s[1:] if len(s) > 1 and s[0] in STRAY and s[1] == "{" else s


class JsonCalls(SyntaxReader):
    """Hermes' section body: JSON call objects one after another, or one list of them; `<tool_call>>{...}` (a
    stray character before the object) is read whole, as Ollama's own parser finds the first object after the
    tag."""

    separators = WS + ","
    single = False                      # one JSON value only (a bare call, or a list of them)

    def __init__(self, tool_names: Iterable[str] | None = (), pieces: bool = True):
        super().__init__(tool_names, pieces)
        self.first_end: int | None = None   # where the first value ended in the body (a bare reply's end)
        self.in_list = False            # the calls are in a JSON list
        self.depth = 0                  # tail: the call object's open brackets
        # states: between | tail (the call object after its arguments) | after (a single value's end)

    def _whole(self, body: str) -> list[ToolCall] | None:
        calls = calls_from_text(body)
        if calls is None and not self.single:
            s = body.strip()
            text = without_stray(s)
            if text is not s:
                calls = calls_from_text(text)
        return calls

    def _after_args(self) -> None:
        self.state, self.depth = self.then, 1

    def _step(self, out: list[CallPart]) -> bool:
        b, p = self.body, self.pos
        if self.state == "tail":
            return self._tail()
        c = b[p]
        if c in self.separators:
            self.pos += 1
            return True
        if self.state == "after":
            self.stopped = True
            return False
        if self.in_list and c == "]":
            self.pos, self.state = p + 1, "after"
            self.first_end = self.first_end or self.pos
            return True
        if c == "[" and not self.started and not self.in_list:
            self.pos, self.in_list = p + 1, True
            return True
        if c == "{":
            return self._json_head(out)
        self.stopped = True
        return False

    def _tail(self) -> bool:
        """The rest of the call object after its arguments ("id": ...), up to its `}`."""
        end = scan_brackets(self.body, self.pos, self.depth)[0]
        if end is not None:
            self.pos = end
            self.state = "after" if self.single and not self.in_list else "between"
            if not self.in_list:
                self.first_end = self.first_end or self.pos
            return True
        return False                     # read again from the tail's start when more comes (tails are short)

    def _json_head(self, out: list[CallPart]) -> bool:
        b, p = self.body, self.pos
        j = Brackets().walk(b, p + 1, stop="bracket", end=p + MAX_HEAD)
        if j is not None:               # a value that is not a string: the arguments, or what is not streamed
            m = _JSON_HEAD.fullmatch(b, p, j + 1) if b[j] == "{" else None
            try:
                name = json.loads(m.group(1), strict=False).strip() if m is not None else ""
            except ValueError:
                name = ""
            if not name:
                self.stopped = True
                return False
            return self._open(name, j, out)
        if len(b) - p >= MAX_HEAD:
            self.stopped = True
        return False


class BareCalls(JsonCalls):
    """A reply (or what follows a call) that is one JSON value: a call, or a list of them."""

    single = True


class Llama3Calls(JsonCalls):
    """Llama 3.1-3.3 after `<|python_tag|>` (or bare): JSON call(s), several separated by `;`, or a built-in
    tool's Python call `brave_search.call(query="...")`."""

    separators = WS + ",;"

    def _whole(self, body: str) -> list[ToolCall] | None:
        text = body.strip()
        if text[:1] in "{[":
            return calls_from_text(text)
        return PythonCalls.read(text)


class ArgsBody(SyntaxReader):
    """A call whose name came before its body (gpt-oss's `to=functions.NAME`): the body is its arguments."""

    def __init__(self, name: str, tool_names: Iterable[str] | None = (), pieces: bool = True):
        super().__init__(tool_names, pieces)
        self.fixed = name

    def _whole(self, body: str) -> list[ToolCall] | None:
        args = loads_lenient(body) if body.strip() else {}
        return [ToolCall(self.fixed, args)] if isinstance(args, dict) else None

    def _step(self, out: list[CallPart]) -> bool:
        b, p = self.body, self.pos
        if b[p] in WS:
            self.pos += 1
            return True
        if self.state == "between" and b[p] == "{":
            return self._open(self.fixed, p, out, then="after")
        self.stopped = True
        return False
