"""A reply ends at the first call it repeats: the same tool with the same arguments as an earlier call of the same
reply.

At temperature 0 a small model that has begun a list of parallel calls may write the same call, or two calls in
turn, again and again until the reply's token limit (Qwen2.5-Coder-0.5B: edit/view calls toward a coding agent's
8,192-token limit at repeat_penalty 1.1; getWeather calls one after another at 1.0), and the agent waits minutes for
calls it runs once anyway. The rule (the `stop_repeated_calls`
option, on by default; docs: README "Tool loops"): when a call is complete and is identical to an earlier call of
this reply (same name; the same arguments as canonical JSON: keys sorted), the model is stopped there (the runner
is told to cancel the request; its last event still gives the token counts), that call and whatever follows it are
dropped, and the reply ends as a tool-call reply with the calls before it (Ollama's `done_reason` "stop", OpenAI's
`tool_calls`, Anthropic's `tool_use`): what an Ollama or LM Studio user expects of a list of calls, and nothing
pointless runs twice.

Whatever the call syntax: the rule reads the service's call events (ToolCallStart / ToolCallArguments /
ToolCallEvent), which every syntax's reader gives. Streamed in pieces, the pieces of a call are held while it can
still be a repeat (its name is an earlier call's and its arguments so far begin that call's arguments as they were
written); anything else passes at once (a repeat whose keys come in another order is seen only once it is
complete: its first pieces went out, so it stands, and the reply ends after it). A reply not streamed in pieces gets its calls once their section ends, and a
section may hold a whole list of calls (Mistral's `[TOOL_CALLS][...]`, Llama's `<|python_tag|>a; b`, a bare JSON
list): there a second parser that gives calls in pieces (`watch`, fed the same text) sees each call as soon as it is
complete, so the model stops at the repeat all the same; the reply's own parser is given the text up to the end of
that call, and its calls are then cut at the repeat. Syntaxes that are only ever read whole (Python-style lists,
DeepSeek's, FunctionGemma's) are checked when their section ends.
"""
from __future__ import annotations

import json

from .result import Finished, ToolCallArguments, ToolCallEvent, ToolCallStart
from .toolcalls import Done, ToolCall, make_parser


def canonical(name: str, arguments) -> tuple[str, str]:
    """A call as the rule compares calls: its name and its arguments as JSON with sorted keys (a wire string is
    parsed first)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return name, arguments
    return name, json.dumps(arguments, ensure_ascii=False, sort_keys=True)


class CallWatch:
    """The calls of a reply not given in pieces, seen as soon as each is complete: a parser that gives calls in
    pieces, fed the reply's text one character at a time so that the repeat's last character is known
    (`feed` returns how much of the text comes before the cut, or None)."""

    def __init__(self, family: str | None, tool_names):
        self.parser = make_parser(family, tool_names, stream_calls=True)
        self.seen: set[tuple[str, str]] = set()
        self.repeated = False

    def feed(self, text: str) -> int | None:
        """Feed `text`: the number of its characters up to and including the end of the first repeated call, or
        None when it holds none."""
        if self.repeated:
            return 0
        for i, ch in enumerate(text):
            for item in self.parser.feed(ch).items:
                if isinstance(item, (Done, ToolCall)):
                    key = canonical(item.name, item.arguments)
                    if key in self.seen:
                        self.repeated = True
                        return i + 1
                    self.seen.add(key)
        return None


class EventFilter:
    """Events in, events out: `push` one event and get what goes on to the client now (maybe nothing yet, maybe
    what was held with it)."""

    def push(self, ev) -> list:
        raise NotImplementedError

    def pass_on(self, events: list) -> list:
        out: list = []
        for ev in events:
            out += self.push(ev)
        return out


class CallRepeats(EventFilter):
    """Passes a reply's events on (pass_on) until a call repeats an earlier one of the reply; from there on it
    drops everything but Finished, and `stop` tells the generation to end the model's reply."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.written: dict[str, list[str]] = {}     # name -> the arguments of its earlier calls, as written
        self.stop = False                            # the model should stop (a repeat was seen, here or by a watch)
        self.cut = False                             # a repeat was dropped: nothing after it goes out
        self.held: list = []                         # the pieces of a call that can still be a repeat
        self.open: tuple[int, str, str] | None = None   # ... its index, name and arguments so far
        self.calls = 0                               # complete calls passed on
        self.sent: int | None = None                 # the index of the last call whose first pieces went out

    def push(self, ev) -> list:
        if isinstance(ev, Finished):
            held, self.held, self.open = self.held, [], None
            return ([] if self.cut else held) + [ev]
        if self.cut:
            return []
        if isinstance(ev, ToolCallStart):
            if ev.name in self.written:
                self.open = (ev.index, ev.name, "")
                self.held = [ev]
                return []
            self.sent = ev.index
            return [ev]
        if isinstance(ev, ToolCallArguments) and self.open is not None and ev.index == self.open[0]:
            index, name, text = self.open
            text += ev.text
            self.held.append(ev)
            if any(w.startswith(text) for w in self.written[name]):
                self.open = (index, name, text)
                return []
            return self._release()
        if isinstance(ev, ToolCallEvent):
            key = canonical(ev.name, ev.arguments)
            if key in self.seen:
                self.stop = self.cut = True
                if self.sent == ev.index:        # its first pieces went out (its keys in another order): it stands
                    return self._release() + [ev]
                self.held, self.open = [], None
                return []
            self.seen.add(key)
            self.written.setdefault(ev.name, []).append(json.dumps(ev.arguments, ensure_ascii=False))
            self.calls += 1
            return self._release() + [ev]
        return self._release() + [ev]

    def _release(self) -> list:
        if self.held:
            self.sent = self.held[0].index
        out, self.held, self.open = self.held, [], None
        return out


def wanted(job) -> bool:
    """Whether a generation (pipeline.Job) is watched for repeated calls: the rule is on (`stop_repeated_calls`),
    the reply is read for calls and tools may be called."""
    plan = job.runner_request.plan
    return bool(getattr(job.options, "stop_repeated_calls", False) and job.parse_reply and plan is not None
                and plan.tools)
