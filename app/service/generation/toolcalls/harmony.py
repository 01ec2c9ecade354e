"""gpt-oss replies in OpenAI's harmony format, parsed from the text the runner streams (special tokens shown).

    <|channel|>analysis<|message|>THINKING<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>CONTENT<|return|>

`analysis` is thinking, `final` is content, `commentary` addressed `to=functions.NAME` is a tool call (its
message is the JSON arguments), other `commentary` (preambles) is content. The reply starts inside the header
of the first message (the prompt ends with `<|start|>assistant`).

Why by hand and not through the `openai-harmony` package: its parser needs the o200k vocabulary, which the
package downloads at first use (and checks by SHA-256); Strata touches the network only when a user asks for a
pull, and no package here ships that file. The format is small and fixed; the tests hold recorded gpt-oss output.
"""
from __future__ import annotations

import re

from app.engine.chat.formats import (H_ANALYSIS, H_CALL, H_CHANNEL, H_CONSTRAIN, H_END, H_FINAL, H_MESSAGE, H_RETURN,
                                     H_START)

from .json_calls import ArgsBody, BareCalls
from .reader import held_suffix
from .types import Delta

_BODY_ENDS = (H_END, H_CALL, H_RETURN, H_START)
_STRAY = (H_CHANNEL, H_MESSAGE, H_CONSTRAIN)    # header markup inside a message body: removed
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(re.escape(H_CHANNEL) + r"\s*([A-Za-z_]+)")


class HarmonyParser:
    def __init__(self, tool_names=(), stream_calls: bool = False):
        self.tool_names = set(tool_names or ())
        self.stream_calls = stream_calls     # give a call in pieces as its message is written
        self.reader: ArgsBody | None = None
        self.mode = "header"                 # header | body
        self.buf = ""
        self.header = ""
        self.channel = ""
        self.recipient = ""
        self.args = ""
        self.n_calls = 0
        self.content_started = False

    def feed(self, text: str) -> Delta:
        out = Delta()
        self.buf += text
        self._run(out, final=False)
        return out

    def finish(self) -> Delta:
        out = Delta()
        self._run(out, final=True)
        if self.mode == "header" and (self.header + self.buf).strip():
            # no <|message|> at all: a model that ignored the format (or a forced call's bare JSON): a JSON
            # call naming a supplied tool is a call, anything else is content
            text = _strip_markup(self.header + self.buf)
            calls = BareCalls.read(text) if self.tool_names else None
            if calls and all(c.name in self.tool_names for c in calls):
                for c in calls:
                    out.add_call(c)
                self.n_calls += len(calls)
            else:
                self._route(text, H_FINAL, out)
        elif self.mode == "body":
            self._end_message(out)
        self.buf = self.header = ""
        return out

    def _run(self, out: Delta, final: bool) -> None:
        while self.buf:
            if self.mode == "header":
                i = self.buf.find(H_MESSAGE)
                if i < 0:
                    return
                self._open(self.header + self.buf[:i])
                self.header, self.buf = "", self.buf[i + len(H_MESSAGE):]
                self.mode = "body"
                continue
            first, hit = -1, None
            for m in _BODY_ENDS + _STRAY:
                i = self.buf.find(m)
                if i != -1 and (first == -1 or i < first):
                    first, hit = i, m
            if hit is None:
                keep = 0 if final else held_suffix(self.buf, _BODY_ENDS + _STRAY)
                self._route(self.buf[:len(self.buf) - keep], self.channel, out)
                self.buf = self.buf[len(self.buf) - keep:]
                return
            self._route(self.buf[:first], self.channel, out)
            self.buf = self.buf[first + len(hit):]
            if hit in _STRAY:
                continue
            self._end_message(out)
            self.mode = "header"

    def _open(self, header: str) -> None:
        m = _CHANNEL.search(header)
        self.channel = m.group(1) if m else H_FINAL
        r = _RECIPIENT.search(header)
        self.recipient = r.group(1) if r else ""
        self.args = ""
        name = self.recipient.removeprefix("functions.")
        self.reader = ArgsBody(name, self.tool_names) if self.stream_calls and self._is_call() else None

    def _is_call(self) -> bool:
        return bool(self.recipient) and self.recipient != "user"

    def _route(self, text: str, channel: str, out: Delta) -> None:
        if not text:
            return
        if self.mode == "body" and self._is_call():
            self.args += text
            if self.reader is not None:
                for p in self.reader.feed(text):
                    out.add_part(p)
        elif channel == H_ANALYSIS:
            out.add_text("thinking", text)
        else:
            if not self.content_started:
                text = text.lstrip()
                if not text:
                    return
                self.content_started = True
            out.add_text("content", text)

    def _end_message(self, out: Delta) -> None:
        reader, self.reader = self.reader, None
        if reader is not None and reader.started:    # streamed: it ends with what it was given
            parts, at = reader.close()
            for p in parts:
                out.add_part(p)
            self.n_calls += 1
            rest = self.args[at:]
            self.recipient, self.args = "", ""
            self._route(rest.strip(), H_FINAL, out)   # what was not JSON after the arguments stays visible
            return
        if self._is_call():
            whole = ArgsBody(self.recipient.removeprefix("functions."), pieces=False)
            whole.feed(self.args)
            calls = whole.close_whole()
            if calls:
                out.add_call(calls[0])
                self.n_calls += 1
            else:                            # arguments that are not JSON: keep them visible
                self.recipient = ""
                self._route(self.args, H_FINAL, out)
        self.recipient, self.args = "", ""


def _strip_markup(text: str) -> str:
    return re.sub(r"<\|[a-z_]+\|>", "", text)
