"""Tool calls read as the model writes them, so a stream can send a call in pieces (docs/architecture.md,
"Tool calls", "Streamed in pieces"); each call's arguments are read by
jsonscan.JsonReader.

- `CallReader` reads a call section's body (or a bare call) a piece at a time: a call opens (`Open`) once its
  name is complete, names a supplied tool and its arguments object has begun; its arguments follow (`Args`); it
  closes (`Done`) when the object does. What it cannot stream (a call whose name follows its arguments, a
  wrapper, a name no tool has, Python syntax) stops it where that begins; the stream parser reads the rest
  whole at the section's end, as it reads a section that was never streamed. `MistralCalls`, `QwenXmlCalls`
  and `ArgsBody` (gpt-oss: the name came in the header) read the other syntaxes the same way.

Covered by tests/unit/service/generation/toolcalls/test_toolcall_pieces.py.
"""
from __future__ import annotations

import json
import re
from json.encoder import encode_basestring       # json's own string writer (what json.dumps uses)
from typing import Iterable

from app.engine.chat.formats import MISTRAL_CALLS

from .jsonscan import Brackets, JsonReader, scan_brackets
from .section_parsers import parameter_value
from .types import Args, CallPart, Done, Open

_WS = " \t\n\r"


def held_suffix(buf: str, markers) -> int:
    """Length of the longest tail of buf that is a proper prefix of one of the markers."""
    keep = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(buf)), keep, -1):
            if buf.endswith(m[:k]):
                keep = k
                break
    return keep


# ---- calls ------------------------------------------------------------------------------------------------

_STR = r'"(?:[^"\\]|\\.)*"'
_OTHER_KEY = rf'"(?:type|id|tool_call_id)"\s*:\s*{_STR}\s*,\s*'
# a JSON call's head up to its arguments object: the name first (what the tool-call grammars write, and what
# models write); a "type" or "id" key may come before either
_JSON_HEAD = re.compile(rf'\{{\s*(?:{_OTHER_KEY})*"(?:name|tool_name)"\s*:\s*({_STR})\s*,\s*(?:{_OTHER_KEY})*'
                        r'"(?:arguments|parameters)"\s*:\s*\{', re.S)
_MISTRAL_HEAD = re.compile(r"([A-Za-z0-9_.\-]+)\s*(?:\[CALL_ID\]\s*[A-Za-z0-9]+\s*)?\[ARGS\]\s*\{", re.S)
_MISTRAL_NAME = re.compile(r"[A-Za-z0-9_.\-]*(?:\s*\[[A-Z_]*\]?\s*[A-Za-z0-9]*)*\s*")
MAX_HEAD = 4096          # a call's head longer than this is not streamed


class CallReader:
    """The calls of one section body (or a bare reply), read a piece at a time. `feed(text)` -> the parts that
    became certain; `close()` at the body's end -> the last parts (an open call completed with its `closers`)
    and the offset in the body from which the stream parser reads the rest whole. This one reads JSON calls:
    objects one after another, or one list of them."""

    def __init__(self, tool_names: Iterable[str], separators: str = _WS + ",", single: bool = False):
        self.tool_names = set(tool_names)
        self.separators = separators
        self.single = single            # one JSON value only (a bare call, or a list of them)
        self.first_end: int | None = None   # where that value ended in the body
        self.body = ""
        self.pos = 0                    # characters of body read
        self.args: JsonReader | None = None
        self.args_text: list[str] = []
        self.name = ""
        self.then = "tail"              # the state after the open call's arguments
        self.started = False            # a call was opened
        self.stopped = False            # the rest is read whole at the body's end
        self.state = "between"          # between | tail (the call object after its arguments) | after
        self.in_list = False            # the calls are in a JSON list
        self.depth = 0                  # tail: the call object's open brackets

    def feed(self, text: str) -> list[CallPart]:
        self.body += text
        out: list[CallPart] = []
        while not self.stopped and self.pos < len(self.body):
            if self.args is not None:
                self._read_args(out)
                if self.args is not None:
                    break
                continue
            if not self._step(out):
                break
        return out

    def close(self) -> tuple[list[CallPart], int]:
        out: list[CallPart] = []
        if self.args is not None:        # cut short: what was given, completed
            args = self.args
            self._emit(args.finish(), out)
            if not args.done:
                self._emit(args.closers(), out)
            self._done(out)
        return out, self.pos

    # ---- internals ------------------------------------------------------------------------------------------
    def _emit(self, text: str, out: list[CallPart]) -> None:
        if text:
            self.args_text.append(text)
            out.append(Args(text))

    def _done(self, out: list[CallPart]) -> None:
        out.append(Done(self.name, json.loads("".join(self.args_text), strict=False)))
        self.args, self.args_text = None, []

    def _read_args(self, out: list[CallPart]) -> None:
        args = self.args
        assert args is not None
        start = args.used
        self._emit(args.feed(self.body[self.pos:]), out)
        self.pos += args.used - start
        if args.broken:                  # not JSON from here: the call ends with what it was given
            self._emit(args.closers(), out)
            self._done(out)
            self.stopped = True
        elif args.done:
            self._done(out)
            self.state, self.depth = self.then, 1

    def _open(self, name: str, at: int, out: list[CallPart], then: str = "tail") -> bool:
        """A call's head read up to (not including) its arguments' `{` at `at`: open it when it names a tool."""
        if name not in self.tool_names:
            self.stopped = True
            return False
        self.name, self.started, self.then = name, True, then
        self.pos, self.args, self.args_text = at, JsonReader(), []
        out.append(Open(name))
        return True

    def _step(self, out: list[CallPart]) -> bool:
        """One step outside the arguments; False: wait for more text (or stopped)."""
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


class MistralCalls(CallReader):
    """Mistral's `[TOOL_CALLS]` body: `NAME[ARGS]{...}` (v11+, each later call after its own `[TOOL_CALLS]`), or
    the v3 JSON list `[{"name", "arguments"}, ...]`."""

    def __init__(self, tool_names: Iterable[str]):
        super().__init__(tool_names)
        self.v11 = False

    def _step(self, out: list[CallPart]) -> bool:
        if self.state != "between" or not (self.v11 or not self.started):
            return super()._step(out)
        b, p = self.body, self.pos
        while p < len(b) and b[p] in _WS:
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
        m = _MISTRAL_HEAD.match(b, p)
        if m is not None:
            self.v11 = True
            return self._open(m.group(1), m.end() - 1, out, then="between")
        if len(b) - p >= MAX_HEAD or _MISTRAL_NAME.fullmatch(b, p) is None:
            self.stopped = True
        return False


class ArgsBody(CallReader):
    """A call whose name came before its body (gpt-oss's `to=functions.NAME`): the body is its arguments."""

    def __init__(self, name: str, tool_names: Iterable[str]):
        super().__init__(tool_names)
        self.fixed = name

    def _step(self, out: list[CallPart]) -> bool:
        b, p = self.body, self.pos
        if b[p] in _WS:
            self.pos += 1
            return True
        if self.state == "between" and b[p] == "{":
            return self._open(self.fixed, p, out, then="after")
        self.stopped = True
        return False


_QC_FUNC, _QC_FUNC_END = "<function=", "</function>"
_QC_PARAM, _QC_PARAM_END = "<parameter=", "</parameter>"
_VALUE_ENDS = (_QC_PARAM_END, _QC_PARAM, _QC_FUNC_END)
_JSON_FIRST = frozenset(' \t\r{["-0123456789tfnNI')     # what a value json.loads might read can start with


class QwenXmlCalls(CallReader):
    """Qwen3-Coder's `<function=NAME>` `<parameter=P>value</parameter>`... `</function>` (or its Hermes-shaped
    JSON, read as CallReader reads it). The call opens at its complete name; each parameter goes as `"P": value`.
    A value is what the section parser makes of it (`section_parsers.parameter_value`: JSON when it parses as
    JSON, else the text, newlines around it dropped): one whose first character
    starts no JSON value is certainly text and is sent as it comes, any other once its parameter ends."""

    def __init__(self, tool_names: Iterable[str]):
        super().__init__(tool_names)
        self.xml: bool | None = None      # None: not known yet; False: the JSON shape (CallReader's)
        self.n_params = 0
        self.key = ""                     # the open parameter's `"P": `, sent with its value's first piece
        self.text_value: bool | None = None   # the open value is certainly text (sent as it comes)

    def _step(self, out: list[CallPart]) -> bool:
        if self.xml is False:
            return super()._step(out)
        b, p = self.body, self.pos
        st = self.state
        if st == "between":
            while p < len(b) and b[p] in _WS:
                p += 1
            self.pos = p
            if p == len(b):
                return False
            if b.startswith(_QC_FUNC, p):
                self.xml, self.pos, self.state = True, p + len(_QC_FUNC), "fname"
                return True
            if _QC_FUNC.startswith(b[p:]):
                return False
            if self.xml is None and b[p] in "{[":
                self.xml = False
                return super()._step(out)
            self.stopped = True
            return False
        if st == "fname":
            j = b.find(">", p)
            name = b[p:j if j >= 0 else len(b)]
            if any(c in _WS for c in name) or len(name) > MAX_HEAD:
                self.stopped = True
                return False
            if j < 0:
                return False
            if name not in self.tool_names:
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
            if any(c in _WS for c in name) or len(name) > MAX_HEAD:
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


def reader_for(parser: str, tool_names: Iterable[str]) -> CallReader | None:
    """The streaming reader of a section parser's syntax (None: its calls are read whole: Python calls,
    FunctionGemma's, DeepSeek's)."""
    names = tuple(tool_names)
    if not names:
        return None
    if parser == "hermes":
        return CallReader(names)
    if parser == "qwen3_coder":
        return QwenXmlCalls(names)
    if parser == "llama3":
        return CallReader(names, _WS + ",;")
    if parser == "mistral":
        return MistralCalls(names)
    return None
