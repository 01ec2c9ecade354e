"""All the partial-JSON work on model output, in one place: where a JSON value ends, mend a cut-off one, read one
a piece at a time, read the shapes models use for a tool call.

Models write calls as JSON, and small models write it imperfectly: a missing closing brace when they stop
early, `arguments` as a JSON string instead of an object, the call wrapped in `{"tool_call": ...}`. The readers
accept those shapes and never raise on bad input: they return None, and the caller keeps the text.

- `Brackets` is the one lenient walk (brackets balanced, strings and escapes honoured, nothing validated):
  `json_end`, `scan_brackets`, `mend` and a call's head use it.
- `JsonReader` reads one JSON value a piece at a time and gives back, as soon as it is certain, the same value as
  `json.dumps(value, ensure_ascii=False)` writes it: string contents as they come (a character once its escape
  is complete), a number or true/false/null once it ends, a key together with its value's first character, a
  separator with what follows it. What it gave is never taken back: `closers()` is what completes the text given
  so far into a whole value (a value cut short), and text that is not JSON stops it (`broken`). So the pieces of
  a call's arguments add up to exactly the arguments string a client is finally given.
"""
from __future__ import annotations

import json
import re
from json.encoder import encode_basestring       # json's own string writer (what json.dumps uses)

from .types import ToolCall

_CLOSER = {"{": "}", "[": "]"}
_PLAIN_OUT = re.compile(r'[^"\[\]{}]+')         # a run outside strings with no bracket or quote
_PLAIN_IN = re.compile(r'[^"\\]+')                # a run inside a string with no quote or backslash


class Brackets:
    """The one lenient walk over JSON-ish text: brackets balanced, strings and escapes honoured, nothing validated
    (a Python list or a value with single quotes is walked the same way). It reads on from where it stopped, so a
    growing text is read once: `depth` (opened minus closed brackets), `open` (the closers still owed, innermost
    last), and whether it is inside a string or after a backslash there."""

    __slots__ = ("depth", "open", "in_str", "esc")

    def __init__(self, depth: int = 0, in_str: bool = False, esc: bool = False) -> None:
        self.depth, self.in_str, self.esc = depth, in_str, esc
        self.open: list[str] = []

    def walk(self, text: str, start: int, stop: str = "end", end: int | None = None) -> int | None:
        """Read text[start:end]. stop="end": the index just past the bracket that brings depth to 0; "bracket":
        the index of the first bracket outside strings (not read). None: not found in what was given (all read)."""
        i, n = start, len(text) if end is None else min(end, len(text))
        while i < n:
            if self.in_str:
                if self.esc:
                    self.esc = False
                    i += 1
                    continue
                m = _PLAIN_IN.match(text, i, n)
                if m is not None:
                    i = m.end()
                    continue
                if text[i] == "\\":
                    self.esc = True
                else:
                    self.in_str = False
                i += 1
                continue
            m = _PLAIN_OUT.match(text, i, n)
            if m is not None:
                i = m.end()
                continue
            c = text[i]
            if c == '"':
                self.in_str = True
            elif stop == "bracket":
                return i
            elif c in "{[":
                self.depth += 1
                self.open.append(_CLOSER[c])
            else:
                self.depth -= 1
                if self.open:
                    self.open.pop()
                if self.depth == 0:
                    return i + 1
            i += 1
        return None


def scan_brackets(text: str, start: int, depth: int = 0, in_str: bool = False,
                  esc: bool = False) -> tuple[int | None, int, bool, bool]:
    """Read text[start:] balancing brackets from the given state (depth, inside a string, after a backslash):
    (index just past the bracket that brings depth to 0, or None, and the state at the end of what was read)."""
    w = Brackets(depth, in_str, esc)
    end = w.walk(text, start)
    return end, w.depth, w.in_str, w.esc


def json_end(text: str, start: int = 0) -> int | None:
    """Index just past the object/array that starts at text[start] ('{' or '['), or None while it is still open.
    Strings and escapes are honoured; this only balances brackets and does not validate."""
    return Brackets().walk(text, start)


def mend(text: str) -> str:
    """Close what a cut-off JSON value left open (a string, objects, arrays); drop a dangling comma or colon.
    `{"name": "f", "arguments": {"city": "Par` -> `{"name": "f", "arguments": {"city": "Par"}}`."""
    w = Brackets(depth=-len(text) - 1)        # never reaches 0: the whole text is read
    w.walk(text, 0)
    out = text
    if w.in_str:
        out += '"'
    out = out.rstrip()
    while out.endswith((",", ":")):
        out = out[:-1].rstrip()
    return out + "".join(reversed(w.open))


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


# ---- a value read a piece at a time -------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORDS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")     # what json.loads reads besides numbers
_TOKEN_CHARS = frozenset("0123456789+-.eE") | frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WS = " \t\n\r"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")


def _scalar(token: str) -> str | None:
    """A number or a word, written as json.dumps writes what json.loads reads from it; None if it is neither."""
    if token in _WORDS:
        return token
    if _NUMBER.fullmatch(token):
        return json.dumps(json.loads(token))
    return None


class JsonReader:
    """One JSON value read a piece at a time; `feed` returns the canonical text that became certain."""

    def __init__(self) -> None:
        self.stack: list[list] = []     # open containers: [closer, members so far]
        self.state = "value"            # value | value_or_end | key_or_end | key | colon | comma_or_end | string
        #                                 | token
        self.pending = ""               # text held until the next value begins (", ", a key and ": ")
        self.token = ""
        self.in_key = False
        self.key: list[str] = []
        self.esc: str | None = None     # an escape being read: "" after the backslash, then "u" and hex digits
        self.high: int | None = None    # a \uD800-\uDBFF escape waiting for its low half
        self.done = False
        self.broken = False
        self.used = 0                   # characters read; once done, where the value ended

    # ---- public ---------------------------------------------------------------------------------------------
    def feed(self, text: str) -> str:
        out: list[str] = []
        i, n = 0, len(text)
        while i < n and not self.done and not self.broken:
            if self.state == "string":
                i = self._string(text, i, out)
                continue
            c = text[i]
            if self.state == "token":
                if c in _TOKEN_CHARS:
                    self.token += c
                    i += 1
                else:
                    self._end_token(out)
                continue
            if c not in _WS:
                self._structure(c, out)
                if self.broken:
                    break               # the character it could not read is not read
            i += 1
        self.used += i
        if self.broken and self.state == "token":
            self.used -= len(self.token)       # nor the number or word that did not parse
        return "".join(out)

    def finish(self) -> str:
        """The end of the text: a number that was still being read (a top-level scalar) ends here."""
        out: list[str] = []
        if self.state == "token" and not self.broken:
            self._end_token(out)
        return "".join(out)

    def closers(self) -> str:
        """What completes the text given so far into a whole value: a number or word still being read (when it
        is one), the open string's quote, the open containers' brackets. A key without its value is left out."""
        out = ""
        if self.state == "token" and self.stack:
            tail = _scalar(self.token)
            if tail is not None:
                out += self.pending + tail
        elif self.state == "string" and not self.in_key:
            out += '"'
        return out + "".join(closer for closer, _ in reversed(self.stack))

    # ---- internals ------------------------------------------------------------------------------------------
    def _structure(self, c: str, out: list[str]) -> None:
        st = self.state
        if st in ("value", "value_or_end"):
            if c == "]" and st == "value_or_end":
                self._close(c, out)
            else:
                self._value(c, out)
        elif st in ("key_or_end", "key"):
            if c == '"':
                self.state, self.in_key, self.key = "string", True, []
            elif c == "}" and st == "key_or_end":
                self._close(c, out)
            else:
                self.broken = True
        elif st == "colon":
            if c == ":":
                self.pending += encode_basestring("".join(self.key)) + ": "
                self.state = "value"
            else:
                self.broken = True
        elif st == "comma_or_end":
            if c == ",":
                self.pending = ", "
                self.state = "key" if self.stack[-1][0] == "}" else "value"
            elif c == self.stack[-1][0]:
                self._close(c, out)
            else:
                self.broken = True
        else:
            self.broken = True

    def _value(self, c: str, out: list[str]) -> None:
        if c in "{[":
            out.append(self.pending + c)
            self.pending = ""
            self.stack.append(["}" if c == "{" else "]", 0])
            self.state = "key_or_end" if c == "{" else "value_or_end"
        elif c == '"':
            out.append(self.pending + '"')
            self.pending = ""
            self.state, self.in_key = "string", False
        elif c in _TOKEN_CHARS:
            self.state, self.token = "token", c
        else:
            self.broken = True

    def _close(self, c: str, out: list[str]) -> None:
        out.append(c)
        self.stack.pop()
        self._after_value()

    def _after_value(self) -> None:
        if not self.stack:
            self.done = True
            self.state = "done"
        else:
            self.stack[-1][1] += 1
            self.state = "comma_or_end"

    def _end_token(self, out: list[str]) -> None:
        text = _scalar(self.token)
        if text is None:
            self.broken = True
            return
        out.append(self.pending + text)
        self.pending, self.token = "", ""
        self._after_value()

    def _chars(self, s: str, out: list[str]) -> None:
        if self.high is not None:                  # a high surrogate not followed by its low half stands alone
            h, self.high = self.high, None
            s = chr(h) + s
        if not s:
            return
        if self.in_key:
            self.key.append(s)
        else:
            out.append(encode_basestring(s)[1:-1])

    def _string(self, text: str, i: int, out: list[str]) -> int:
        n = len(text)
        while i < n:
            if self.esc is not None:
                i = self._escape(text, i, out)
                if self.broken:
                    return i
                continue
            c = text[i]
            if c == '"':
                self._chars("", out)
                i += 1
                if self.in_key:
                    self.state = "colon"
                else:
                    out.append('"')
                    self._after_value()
                return i
            if c == "\\":
                self.esc = ""
                i += 1
                continue
            m = _PLAIN_IN.match(text, i)
            assert m is not None                   # text[i] is neither a quote nor a backslash
            self._chars(m.group(0), out)
            i = m.end()
        return i

    def _escape(self, text: str, i: int, out: list[str]) -> int:
        c = text[i]
        esc = self.esc or ""
        if not esc:
            if c == "u":
                self.esc = "u"
                return i + 1
            if c not in _ESCAPES:
                self.broken = True
                return i
            self.esc = None
            self._chars(_ESCAPES[c], out)
            return i + 1
        if c not in _HEX:
            self.broken = True
            return i
        esc += c
        if len(esc) < 5:
            self.esc = esc
            return i + 1
        self.esc = None
        code = int(esc[1:], 16)
        if 0xDC00 <= code <= 0xDFFF and self.high is not None:
            h, self.high = self.high, None
            self._chars(chr(0x10000 + ((h - 0xD800) << 10) + (code - 0xDC00)), out)
        elif 0xD800 <= code <= 0xDBFF:
            self._chars("", out)                   # an earlier high half stands alone
            self.high = code
        else:
            self._chars(chr(code), out)
        return i + 1


def string_so_far(raw: str) -> tuple[str, bool]:
    """The text of a JSON string's body written so far (`raw`: after its opening quote; an escape not yet
    complete is left out), and whether the string closed."""
    r = JsonReader()
    given = r.feed('"' + raw)
    return json.loads(given + ("" if r.done else '"')), r.done
