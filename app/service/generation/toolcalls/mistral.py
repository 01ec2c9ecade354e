"""Mistral's calls: `[TOOL_CALLS]NAME[ARGS]{...}` (v11+, each later call after its own `[TOOL_CALLS]`, an optional
`[CALL_ID]ID` before `[ARGS]`), or the v3 JSON list `[TOOL_CALLS][{"name", "arguments", "id"}, ...]`.

Covered by tests/unit/service/generation/toolcalls/test_section_parsers.py (each syntax read whole) and
test_toolcall_pieces.py (in pieces).
"""
from __future__ import annotations

import re
from typing import Iterable

from app.engine.chat.formats import MISTRAL_CALLS

from .json_calls import JsonCalls
from .jsonscan import calls_from_text, loads_lenient
from .reader import MAX_HEAD, WS
from .types import CallPart, ToolCall

# a v11 call's head up to its arguments: NAME, an optional [CALL_ID]ID, [ARGS]
_HEAD = re.compile(r"([A-Za-z0-9_.\-]+)\s*(?:\[CALL_ID\]\s*([A-Za-z0-9]+)\s*)?\[ARGS\]\s*", re.S)
_NAME_SO_FAR = re.compile(r"[A-Za-z0-9_.\-]*(?:\s*\[[A-Z_]*\]?\s*[A-Za-z0-9]*)*\s*")   # what may grow into a head


class MistralCalls(JsonCalls):
    """The body after the first `[TOOL_CALLS]` (later ones still in it)."""

    def __init__(self, tool_names: Iterable[str] | None = (), pieces: bool = True):
        super().__init__(tool_names, pieces)
        self.v11 = False

    def _whole(self, body: str) -> list[ToolCall] | None:
        calls: list[ToolCall] = []
        for part in body.split(MISTRAL_CALLS):
            part = part.strip()
            if not part:
                continue
            m = _HEAD.match(part)
            if m:
                args = loads_lenient(part[m.end():])
                if not isinstance(args, dict):
                    return calls or None
                calls.append(ToolCall(m.group(1), args, m.group(2)))
                continue
            got = calls_from_text(part)
            if got is None:
                return calls or None
            calls.extend(got)
        return calls or None

    def _step(self, out: list[CallPart]) -> bool:
        if self.state != "between" or not (self.v11 or not self.started):
            return super()._step(out)
        b, p = self.body, self.pos
        while p < len(b) and b[p] in WS:
            p += 1
        self.pos = p
        if p == len(b):
            return False
        if b.startswith(MISTRAL_CALLS, p):
            self.pos = p + len(MISTRAL_CALLS)
            return True
        if MISTRAL_CALLS.startswith(b[p:]):
            return False
        if not self.v11 and b[p] in "[{":
            return super()._step(out)
        m = _HEAD.match(b, p)
        if m is not None and m.end() < len(b) and b[m.end()] == "{":
            self.v11 = True
            return self._open(m.group(1), m.end(), out, then="between")
        if len(b) - p >= MAX_HEAD or _NAME_SO_FAR.fullmatch(b, p) is None:
            self.stopped = True
        return False
