"""Qwen3-Coder's calls: `<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>`, or the
Hermes-shaped JSON it sometimes answers with (read as json_calls.JsonCalls reads it).

Covered by tests/unit/service/generation/toolcalls/test_section_parsers.py (each syntax read whole) and
test_toolcall_pieces.py (in pieces).
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring       # json's own string writer (what json.dumps uses)
from typing import Iterable

from .json_calls import JsonCalls
from .reader import MAX_HEAD, WS, held_suffix
from .types import CallPart, Done, Open, ToolCall


def parameter_value(text: str):
    """A parameter value written as text: JSON when it parses as JSON (numbers, objects), else the string."""
    t = text.strip("\n")
    try:
        return json.loads(t, strict=False)
    except ValueError:
        return t


_QC_FUNC, _QC_FUNC_END = "<function=", "</function>"
_QC_PARAM, _QC_PARAM_END = "<parameter=", "</parameter>"
_VALUE_ENDS = (_QC_PARAM_END, _QC_PARAM, _QC_FUNC_END)
_JSON_FIRST = frozenset(' \t\r{["-0123456789tfnNI')     # what a value json.loads might read can start with


def _good(name: str) -> bool:
    return bool(name) and not any(c in WS for c in name)


class QwenXmlCalls(JsonCalls):
    """Qwen3-Coder's `<function=NAME>` `<parameter=P>value</parameter>`... `</function>` (or its Hermes-shaped
    JSON). In pieces, the call opens at its complete name; each parameter goes as `"P": value`. A value is
    `parameter_value` of its text: one whose first character starts no JSON value is certainly text and is sent
    as it comes, any other once its parameter ends. Whole, the same framing runs over the body with any name,
    and what is not a function (text between calls, a name with spaces) is skipped up to the next one."""

    def __init__(self, tool_names: Iterable[str] | None = (), pieces: bool = True):
        super().__init__(tool_names, pieces)
        self.whole = False                # reading a whole body: any name, what is not a function skipped
        self.xml: bool | None = None      # None: not known yet; False: the JSON shape (JsonCalls')
        self.n_params = 0
        self.key = ""                     # the open parameter's `"P": `, sent with its value's first piece
        self.text_value: bool | None = None   # the open value is certainly text (sent as it comes)

    def _step(self, out: list[CallPart]) -> bool:
        if self.xml is False:
            return super()._step(out)
        b, p = self.body, self.pos
        st = self.state
        if st == "between":
            while p < len(b) and b[p] in WS:
                p += 1
            self.pos = p
            if p == len(b):
                return False
            if b.startswith(_QC_FUNC, p):
                self.xml, self.pos, self.state = True, p + len(_QC_FUNC), "fname"
                return True
            if _QC_FUNC.startswith(b[p:]):
                return False
            if self.whole:
                return self._skip()
            if self.xml is None and b[p] in "{[":
                self.xml = False
                return super()._step(out)
            self.stopped = True
            return False
        if st == "fname":
            j = b.find(">", p)
            name = b[p:j if j >= 0 else len(b)]
            if self.whole and j >= 0 and not _good(name):
                return self._skip()
            if any(c in WS for c in name) or len(name) > MAX_HEAD and not self.whole:
                self.stopped = True
                return False
            if j < 0:
                return False
            if name not in self.tool_names and not self.whole:
                self.stopped = True
                return False
            self.name, self.started, self.args_text = name, True, []
            out.append(Open(name))
            self._emit("{", out)
            self.pos, self.state, self.n_params = j + 1, "fbody", 0
            return True
        if st == "fbody":                        # between parameters: up to the next one or the function's end
            ends = [(b.find(m, p), m) for m in (_QC_PARAM, _QC_FUNC_END)]
            found = [(i, m) for i, m in ends if i >= 0]
            if not found:
                return False
            i, m = min(found)
            if m == _QC_FUNC_END:
                self._emit("}", out)
                self._done(out)
                self.pos, self.state = i + len(m), "between"
            else:
                self.pos, self.state = i + len(m), "pname"
            return True
        if st == "pname":
            j = b.find(">", p)
            name = b[p:j if j >= 0 else len(b)]
            end = b.find(_QC_FUNC_END, p) if self.whole else -1
            if self.whole and (j >= 0 and not _good(name) or 0 <= end < (j if j >= 0 else len(b))):
                self.state = "fbody"             # skipped, up to the next parameter or the function's end
                return True
            if any(c in WS for c in name) or len(name) > MAX_HEAD and not self.whole:
                self._end_call(out)
                return False
            if j < 0:
                return False
            self.key = (", " if self.n_params else "") + encode_basestring(name) + ": "
            self.n_params += 1
            self.pos, self.state, self.text_value = j + 1, "pvalue", None
            return True
        return self._value(out, final=False)     # pvalue

    def _value(self, out: list[CallPart], final: bool) -> bool:
        b, p = self.body, self.pos
        ends = [(b.find(m, p), m) for m in _VALUE_ENDS]
        found = [(i, m) for i, m in ends if i >= 0]
        stop, marker = min(found) if found else (len(b), "")
        if self.text_value is None:
            q = p
            while q < stop and b[q] == "\n":
                q += 1
            if q < stop or found or final:
                self.text_value = q < stop and b[q] not in _JSON_FIRST
                if self.text_value:
                    self._emit(self.key + '"', out)
                    p = self.pos = q
        if found or final:
            if self.text_value:
                self._emit(encode_basestring(b[p:stop].rstrip("\n"))[1:-1] + '"', out)
            else:
                self._emit(self.key + json.dumps(parameter_value(b[p:stop]), ensure_ascii=False), out)
            self.pos = stop + (len(marker) if marker == _QC_PARAM_END else 0)
            self.state = "fbody"
            return True
        if self.text_value:                     # text that cannot begin an end marker, newlines at its end held
            upto = len(b) - held_suffix(b[p:], _VALUE_ENDS)
            piece = b[p:upto].rstrip("\n")
            if piece:
                self._emit(encode_basestring(piece)[1:-1], out)
                self.pos = p + len(piece)
        return False

    def _skip(self) -> bool:
        """Whole: what is not a function is skipped, up to the next one (the end: stopped)."""
        i = self.body.find(_QC_FUNC, self.pos)
        if i < 0:
            self.stopped = True
            return False
        self.pos, self.state = i, "between"
        return True

    def close_whole(self) -> list[ToolCall] | None:
        self.whole = True
        out: list[CallPart] = []
        while not self.stopped and self.pos < len(self.body) and self._step(out):
            pass
        out += self.close()[0]
        calls = [ToolCall(p.name, p.arguments) for p in out if isinstance(p, Done)]
        return calls or JsonCalls._whole(self, self.body)     # Qwen3-Coder sometimes answers in Hermes' shape

    def _end_call(self, out: list[CallPart]) -> None:
        """The open call ends here (its body ended, or it went wrong): its last parameter and `}`."""
        if self.state == "pvalue":
            self._value(out, final=True)
        self._emit("}", out)
        self._done(out)
        self.stopped = True

    def close(self) -> tuple[list[CallPart], int]:
        if not self.xml:
            return super().close()
        out: list[CallPart] = []
        if self.state in ("fbody", "pname", "pvalue") and not self.stopped:
            self.pos = len(self.body) if self.state != "pvalue" else self.pos
            self._end_call(out)
        return out, self.pos
