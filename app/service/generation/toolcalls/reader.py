"""What every call syntax's reader shares (docs/architecture.md, "Tool calls", "Streamed in pieces").

A reader reads the calls of one section body (or a bare reply) in the syntax its family's record names
(`Section.parser`, the table in syntaxes.py). It is fed the body a piece at a time and closed at its end, in one of
two ways:
- in pieces (a streamed request that supplied tools): a call opens (`Open`) once its name is complete, names a
  supplied tool and its arguments have begun; its arguments follow (`Args`, read by jsonscan.JsonReader, so they
  add up to exactly the arguments string a client is finally given); it closes (`Done`) when they end. What it
  cannot stream stops it where that begins: `close()` gives the offset from which the rest is read whole;
- whole (`read(body)`: feed everything, then close): every call the body holds, whatever it names, or None
  when the body is not a call in that syntax (the stream parser then keeps the text as content).
"""
from __future__ import annotations

import json
from typing import Iterable

from .jsonscan import JsonReader
from .types import Args, CallPart, Done, Open, ToolCall

WS = " \t\n\r"
MAX_HEAD = 4096          # a call's head longer than this is not streamed


def held_suffix(buf: str, markers) -> int:
    """Length of the longest tail of buf that is a proper prefix of one of the markers."""
    keep = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(buf)), keep, -1):
            if buf.endswith(m[:k]):
                keep = k
                break
    return keep


class SyntaxReader:
    """The shared machinery: the body so far, the open call's arguments read by a JsonReader, its parts.
    Subclasses read their syntax's framing (`_step`) and say what a whole body holds (`_whole`)."""

    streams = True                      # False: its calls are only ever read whole (Python calls, DeepSeek's...)

    def __init__(self, tool_names: Iterable[str] | None = (), pieces: bool = True):
        self.tool_names = set(tool_names or ())
        self.pieces = pieces and self.streams
        self.body = ""
        self.pos = 0                    # characters of body read
        self.args: JsonReader | None = None
        self.args_text: list[str] = []
        self.name = ""
        self.then = "tail"              # the state after the open call's arguments
        self.started = False            # a call was opened
        self.stopped = False            # the rest is read whole at the body's end
        self.state = "between"

    @classmethod
    def read(cls, body: str) -> list[ToolCall] | None:
        """The calls of a whole body: fed, then closed."""
        r = cls(pieces=False)
        r.feed(body)
        return r.close_whole()

    def feed(self, text: str) -> list[CallPart]:
        self.body += text
        out: list[CallPart] = []
        if not self.pieces:
            return out
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
        """The body ended: the last parts (an open call completed with its `closers`) and the offset in the body
        from which what was not streamed is read whole."""
        out: list[CallPart] = []
        if self.args is not None:        # cut short: what was given, completed
            args = self.args
            self._emit(args.finish(), out)
            if not args.done:
                self._emit(args.closers(), out)
            self._done(out)
        return out, self.pos

    def close_whole(self) -> list[ToolCall] | None:
        return self._whole(self.body)

    # ---- for subclasses -------------------------------------------------------------------------------------
    def _step(self, out: list[CallPart]) -> bool:
        """One step outside a call's arguments; False: wait for more text (or stopped)."""
        self.stopped = True
        return False

    def _whole(self, body: str) -> list[ToolCall] | None:
        raise NotImplementedError

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
            self._after_args()

    def _after_args(self) -> None:
        self.state = self.then

    def _open(self, name: str, at: int, out: list[CallPart], then: str = "tail") -> bool:
        """A call's head read up to (not including) its arguments' `{` at `at`: open it when it names a tool."""
        if name not in self.tool_names:
            self.stopped = True
            return False
        self.name, self.started, self.then = name, True, then
        self.pos, self.args, self.args_text = at, JsonReader(), []
        out.append(Open(name))
        return True
