"""The streaming reply parser: text pieces in, content / thinking / complete tool calls out.

One parser per request, fed the runner's text as it arrives. Text that may be the start of a marker is held
back until it is resolved, so markup never reaches `content` and nothing is streamed and then retracted. A
tool-call section is emitted once it is complete (its end marker, or the end of the reply for formats without
one); with `stream_calls`, a call whose syntax allows it is given in pieces as it is written (Open, Args...,
Done: reader.py), and what its reader cannot stream is read whole at the section's end. A section that does
not parse is kept as content (markers removed): a call is never silently lost.

The fallback for models that drop their markers: when tools were supplied and the reply (or what follows a
call) starts with a JSON object or list (optionally in a ```json fence) that names one of the supplied tools,
it is a call. Anything else that starts that way is content, released once the JSON value is complete. Two
forms small models write count as such a start: the ReAct label `Action:` before the JSON (what smolagents'
ToolCallingAgent prompt teaches; Qwen2.5-Coder-0.5B writes it on every dialect), and one stray punctuation
character glued to the object (`>{"name": ...}`, `,{"`, `({"`: single tokens in Qwen's vocabulary that a
repeat penalty on `{"` makes the greedy pick). Inside a call section the same stray character is skipped
(`<tool_call>>{...}`), as Ollama's own parser finds the first object after the tag.
"""
from __future__ import annotations

import re

from app.engine.chat.formats import Section, format_for

from .json_calls import STRAY, BareCalls, without_stray
from .jsonscan import Brackets, json_end, mend
from .reader import SyntaxReader, held_suffix
from .syntaxes import read_calls, reader_for
from .whole_calls import PythonCalls
from .types import CallPart, Delta, Done, ToolCall

MAX_HELD = 256 * 1024     # a "JSON" reply that never closes is released as content past this many characters
_PY_LIST = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_PY_OPEN = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*$")
_BETWEEN_CALLS = " \t\r\n,;]"              # what may stand between and after streamed calls
ACTION_LABEL = "Action:"                   # ReAct's label before a call (smolagents' ToolCallingAgent prompt)


def after_label(s: str) -> str | None:
    """`s` (stripped on the left) without a leading `Action:` label and the whitespace after it; `s` itself when it
    has none; None while `s` may still grow into the label."""
    if s.startswith(ACTION_LABEL):
        return s[len(ACTION_LABEL):].lstrip()
    if ACTION_LABEL.startswith(s):
        return None
    return s


class OutputParser:
    def __init__(self, family: str | None = None, tool_names=(), stream_calls: bool = False):
        self.fmt = format_for(family)
        self.tool_names = set(tool_names or ())
        self.stream_calls = stream_calls         # give calls in pieces as they are written (reader.py)
        self.reader: SyntaxReader | None = None  # the open section's (or bare value's) streaming reader
        self.fed = 0                             # characters of it the reader was given
        self.mode = "text"                       # text | think | call | bare
        self.buf = ""
        self.section: Section | None = None
        self.content_started = False
        self.expect_call = True                  # at the start, or only whitespace since the last call
        self.strip_next = False                  # drop leading whitespace of the next content (after think/call)
        self.ws = ""                             # leading whitespace held until real content follows
        self.n_calls = 0
        self.n_thinking = 0
        self.fence_value = _ValueEnd()           # the bare value's end inside a ```json fence
        markers: list[tuple[str, str, Section | None]] = [(s.start, "call", s) for s in self.fmt.sections]
        if self.fmt.think:
            markers += [(self.fmt.think[0], "think", None), (self.fmt.think[1], "drop", None)]
        markers += [(m, "strip", None) for m in self.fmt.strip]
        # a section's end marker with no section open (the model wrote it twice, or alone), and the family's
        # other marker tokens (Mistral's [ARGS], DeepSeek's separators...) outside a section: removed
        known = {m for m, _, _ in markers}
        extra = [sec.end for sec in self.fmt.sections if sec.end and sec.end != "```"]
        extra += [m for m in self.fmt.shown if m not in known]
        markers += [(m, "strip", None) for m in dict.fromkeys(extra) if m not in known]
        self.markers = markers
        self.scrub = tuple(sorted({m for m, _, _ in markers} - {"```"}, key=len, reverse=True))

    # ---- public ---------------------------------------------------------------------------------------------
    def feed(self, text: str) -> Delta:
        out = Delta()
        self.buf += text
        self._run(out, final=False)
        return out

    def finish(self) -> Delta:
        out = Delta()
        self._run(out, final=True)
        if self.buf:                             # whatever is left in a mode that waits for more
            self._content(self.buf, out)
            self.buf = ""
        if not self.content_started and self.ws and not self.n_calls and not self.n_thinking:
            out.add_text("content", self.ws)     # a reply that is only whitespace stays what it was
        self.ws = ""
        return out

    # ---- internals ------------------------------------------------------------------------------------------
    def _content(self, text: str, out: Delta) -> None:
        if self.strip_next:
            text = text.lstrip()
            if not text:
                return
            self.strip_next = False
        if not self.content_started:
            if not text.strip():
                self.ws += text
                return
            text, self.ws = self.ws + text, ""
            self.content_started = True
        self.expect_call = False
        out.add_text("content", text)

    def _calls(self, calls: list[ToolCall], out: Delta) -> None:
        for c in calls:
            out.add_call(c)
        self.n_calls += len(calls)
        self.expect_call = self.strip_next = True
        self.ws = ""

    def _parts(self, parts: list[CallPart], out: Delta) -> None:
        for p in parts:
            out.add_part(p)
            if isinstance(p, Done):
                self.n_calls += 1
                self.expect_call = self.strip_next = True
                self.ws = ""

    def _feed_reader(self, text: str, upto: int, out: Delta, reader: SyntaxReader | None = None) -> None:
        """Give the streaming reader `text` up to `upto` (text: the section body or bare value read so far)."""
        reader = reader or self.reader
        if reader is not None and upto > self.fed:
            self._parts(reader.feed(text[self.fed:upto]), out)
            self.fed = upto

    def _end_streamed(self, text: str, cut: bool, out: Delta, whole, named: bool) -> bool:
        """The body `text` is complete (`cut`: the reply ended inside it). When the reader opened calls in it,
        they end here (an open one completed with what it was given) and what the reader did not stream is read
        whole by `whole(rest) -> calls | None` (`named`: only calls that name supplied tools), else kept as
        content. False: nothing was streamed, so the body is read the usual way."""
        reader, self.reader = self.reader, None
        if reader is None:
            return False
        self._feed_reader(text, len(text), out, reader)
        if not reader.started:
            return False
        parts, at = reader.close()
        self._parts(parts, out)
        rest = text[at:]
        if rest.strip(_BETWEEN_CALLS):
            calls = whole(_mended(rest) if cut else rest)
            if named:
                calls = self._named(calls)
            if calls:
                self._calls(calls, out)
            else:
                for m in self.scrub:
                    rest = rest.replace(m, "")
                self._content(rest.strip(), out)
        return True

    def _run(self, out: Delta, final: bool) -> None:
        step = {"text": self._text, "think": self._think, "call": self._call, "bare": self._bare}
        while self.buf and step[self.mode](out, final):
            pass

    def _think(self, out: Delta, final: bool) -> bool:
        assert self.fmt.think is not None            # "think" mode is entered only at the family's own marker
        close = self.fmt.think[1]
        i = self.buf.find(close)
        if i >= 0:
            piece, self.buf = self.buf[:i], self.buf[i + len(close):]
            if not self.n_thinking:
                piece = piece.lstrip()
            self._thinking(piece, out)
            self.mode, self.strip_next = "text", True
            return True
        keep = 0 if final else held_suffix(self.buf, [close])
        piece, self.buf = self.buf[:len(self.buf) - keep], self.buf[len(self.buf) - keep:]
        if not self.n_thinking:
            piece = piece.lstrip()
        self._thinking(piece, out)
        return False

    def _thinking(self, piece: str, out: Delta) -> None:
        if piece:
            out.add_text("thinking", piece)
            self.n_thinking += len(piece)

    def _call(self, out: Delta, final: bool) -> bool:
        section = self.section
        assert section is not None                   # "call" mode is entered at a section's start marker
        end = section.end or ""
        i = self.buf.find(end) if end else -1
        if i < 0 and not final:
            if self.reader is not None:          # stream what cannot be the start of the end marker
                self._feed_reader(self.buf, len(self.buf) - (held_suffix(self.buf, [end]) if end else 0), out)
            return False
        body = self.buf[:i] if i >= 0 else self.buf
        self.buf = self.buf[i + len(end):] if i >= 0 else ""
        cut = i < 0 and (bool(end) or _mended(body) != body)
        if self._end_streamed(body, cut, out, lambda text: read_calls(section.parser, text), named=cut):
            self.mode = "text"
            return True
        whole = body if i >= 0 else _mended(body)
        calls = read_calls(section.parser, whole)
        if whole != body or (end and i < 0):     # cut short (its JSON mended, or no end marker): maybe in the
            calls = self._named(calls)           # name too, so it must name a supplied tool
        if calls:
            self._calls(calls, out)
        else:                                    # not a call after all: keep what the model said, minus markup
            for m in self.scrub:
                body = body.replace(m, "")
            self._content(body, out)
        self.mode = "text"
        return True

    def _bare(self, out: Delta, final: bool) -> bool:
        s = without_stray(after_label(self.buf.lstrip()) or "")     # _bare_start saw a complete label
        if s.startswith("```"):
            nl = s.find("\n")
            close = self._fence_close(s, nl, final) if nl >= 0 else -1
            header = s[3:nl].strip().lower() if nl >= 0 else ""
            if nl >= 0 and header not in ("", "json"):
                self.reader = None
            if close < 0 and not final and len(s) < MAX_HELD:
                if self.reader is not None and nl >= 0:
                    body = s[nl + 1:]
                    self._feed_reader(body, len(body) - held_suffix(body, ["```"]), out)
                return False
            body = s[nl + 1:close] if close >= 0 else s[nl + 1:] if nl >= 0 else ""
            rest = s[close + 3:] if close >= 0 else ""
            if self._end_streamed(body, close < 0, out, _fenced_calls, named=True):
                self.buf = rest
                self.mode = "text"
                return True
            calls = self._named(_fenced_calls(body)) if header in ("", "json", "tool_code", "python") else None
        else:
            self._feed_reader(s, len(s), out)
            reader = self.reader
            if isinstance(reader, BareCalls) and reader.started and not reader.stopped:
                end = reader.first_end           # the reader knows where the value ends: no rescan per piece
            else:
                end = json_end(s)
            if end is None and not final and len(s) < MAX_HELD:
                return False
            if self._end_streamed(s[:end] if end else s, end is None, out, BareCalls.read, named=True):
                self.buf = s[end:] if end else ""
                self.mode = "text"
                return True
            value = s[:end] if end else mend(s)
            found = BareCalls.read(value)
            if found is None and self.fmt.bare_pythonic:
                found = PythonCalls.read(value)
            calls = self._named(found)
            rest = s[end:] if end else ""
        if calls:
            self.buf = rest
            self._calls(calls, out)
        else:                                    # not a call: read it again as text (markers, thinking...)
            self.expect_call = False
        self.mode = "text"
        return True

    def _fence_close(self, s: str, nl: int, final: bool) -> int:
        """Where the fence whose first line ends at `nl` closes (-1: not yet). After the JSON value it holds, whose
        strings may hold ``` themselves (a call writing a file with a code block); at the first ``` when it holds
        no JSON value, or one that is still open at the reply's end."""
        first = s.find("```", nl + 1)
        if first < 0:
            return -1
        start = nl + 1
        while start < len(s) and s[start] in " \t\r\n":
            start += 1
        if s[start] in "{[":
            end = self.fence_value.end(s, start)
            if end is not None:
                return s.find("```", end)
            if not final:
                return -1
        return first

    def _named(self, calls: list[ToolCall] | None) -> list[ToolCall] | None:
        """The fallback's rule, and a section cut short's (its name may be cut too): every call must name a
        supplied tool."""
        if calls and all(c.name in self.tool_names for c in calls):
            return calls
        return None

    def _bare_start(self, final: bool) -> bool | None:
        """At a point where a markerless call may start: True = it does, False = it does not, None = wait."""
        s = self.buf.lstrip()
        if not s:
            return None if not final else False
        rest = after_label(s)
        if rest is None or (rest is not s and not rest):      # the label, or all of it with nothing after yet
            return None if not final else False
        s = rest
        if s[0] == "{":
            return True
        if s[0] in STRAY:
            if len(s) < 2:
                return None if not final else False
            return s[1] == "{"
        if s[0] == "[":
            if self.fmt.bare_pythonic:
                if _PY_LIST.match(s):
                    return True
                if _PY_OPEN.match(s) and not final:
                    return None
            rest = s[1:].lstrip()
            if not rest:
                return None if not final else False
            return rest[0] == "{"
        if s[0] == "`":
            if len(s) < 3:
                return None if not final else False
            return s.startswith("```")
        return False

    def _text(self, out: Delta, final: bool) -> bool:
        if self.expect_call and self.tool_names:
            start = self._bare_start(final)
            if start is None:
                return False
            if start:
                self.mode = "bare"
                self.fence_value = _ValueEnd()
                self.reader = BareCalls(self.tool_names) if self.stream_calls else None
                self.fed = 0
                return True
        first, hit = -1, None
        for marker, kind, obj in self.markers:
            i = self.buf.find(marker)
            if i != -1 and (first == -1 or i < first):
                first, hit = i, (marker, kind, obj)
        if hit is not None:
            marker, kind, obj = hit
            self._content(self.buf[:first], out)
            self.buf = self.buf[first + len(marker):]
            if kind == "call":
                self.mode, self.section = "call", obj
                assert obj is not None
                self.reader = reader_for(obj.parser, self.tool_names) if self.stream_calls else None
                self.fed = 0
            elif kind == "think":
                self.mode = "think"
            elif kind == "drop":                 # a stray end-of-thinking marker: dropped, like its newlines
                self.strip_next = True
            return True
        keep = 0 if final else held_suffix(self.buf, [m for m, _, _ in self.markers])
        self._content(self.buf[:len(self.buf) - keep], out)
        self.buf = self.buf[len(self.buf) - keep:]
        return False


class _ValueEnd:
    """`json_end` of a growing text, read once: each call walks only what was added since the last."""

    def __init__(self) -> None:
        self.walk = Brackets()
        self.pos: int | None = None
        self.found: int | None = None

    def end(self, text: str, start: int) -> int | None:
        if self.found is None:
            self.found = self.walk.walk(text, start if self.pos is None else self.pos)
            self.pos = len(text)
        return self.found


def _fenced_calls(body: str) -> list[ToolCall] | None:
    return BareCalls.read(body) or PythonCalls.read(body)


def _mended(body: str) -> str:
    """A section cut off at the end of the reply: close an open JSON value so the call still parses."""
    s = body.strip()
    return mend(s) if s[:1] in "{[" else body
