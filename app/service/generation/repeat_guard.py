"""A reply that only repeats the last round's calls is written again, as an answer.

An agent loop runs whatever calls a reply brings and asks again; it ends when a reply brings none, and takes that
reply's text as the answer. A small model that has just got its tool results often asks for the very same calls
again (Qwen2.5-Coder-0.5B at temperature 0 on ollama-ai-provider-v2's README example: `getWeather({"location":
"San Francisco", "unit": "celsius"})` again on every step until `stopWhen` ended the run, with no answer), and at
temperature 0 the same prompt gives the same reply each time, so the loop never ends by itself. The rule (the
`answer_after_tools` option, on by default; docs: README "Tool loops"): when the conversation ends with the results
of the last assistant turn's calls and the new reply consists only of calls that repeat those, each with the same
name and the same arguments in the same order (and nothing but whitespace besides), that reply is dropped and the
model is asked once more for its answer: the prompt without the tools' descriptions (as for `tool_choice: "none"`;
the reply is still read for calls) and the reply opening with text (GenerateRequest.bar_calls:
runner/sampling/answer_hold.py). Calls repeated from earlier turns are not touched: an agent that runs its tests,
edits a file and runs the same tests again is doing its work.

The same holds one step further out, for a cycle: when the conversation ends with two or more rounds that repeat
the rounds before them exactly, calls and results alike (weather, then convert, then the same weather with the same
result, then the same convert), a reply that only asks for the cycle's first round again (cycle_next) is written
again as an answer too: with the same results in front of it, the model would go round once more. A cycle whose
calls or results changed (tests fail, a file is edited, the tests run again) is not one.

Streamed, nothing of the reply is held back unless it can still be such a repeat: whitespace, and the pieces of
a call while its name is one of the last round's and its arguments so far begin the same JSON text (pieces are
written as json.dumps spells them: toolcalls/jsonscan.py). Anything else sends what was held and ends the watch.

The second try is judged before the client sees it (RetryCheck): barred from calling, a small model sometimes
writes the call it wanted as text (Qwen2.5-Coder-0.5B: `{"name": "edit", "arguments": {...}}`, bare, in a
```json fence or in <tool_call> tags) or writes nothing, and a client would take that for the answer. Either way
the first reply's calls go out instead, as the model made them, so the client gets a well-formed reply. Only what
can still be such a reply is held (whitespace, text that opens like one); anything else passes as it comes.
"""
from __future__ import annotations

import json
import re

from app.engine.chat.plan import EITHER

from .call_repeats import EventFilter, canonical
from .result import Finished, TextDelta, ThinkingDelta, ToolCallArguments, ToolCallEvent, ToolCallStart

RETRY = object()        # push()'s answer when the reply is only repeated calls: write it again (pass_on: `retry`)


def spelled(arguments) -> str:
    """A call's arguments as the reply's pieces spell them (an OpenAI wire string parsed first)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False)


def last_round(messages: list[dict] | None) -> set[tuple[str, str]]:
    """The calls of the last assistant message, when every message after it is a tool result: {(name,
    arguments spelled)}; empty otherwise."""
    if not messages:
        return set()
    i = len(messages) - 1
    while i >= 0 and isinstance(messages[i], dict) and messages[i].get("role") == "tool":
        i -= 1
    if i == len(messages) - 1 or i < 0 or not isinstance(messages[i], dict) or messages[i].get("role") != "assistant":
        return set()
    out = set()
    for call in messages[i].get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.add((fn["name"], spelled(fn.get("arguments") or {})))
    return out


def _round_key(m: dict) -> tuple:
    """An assistant turn's calls as compared across rounds: names and arguments (keys sorted), in order."""
    return tuple(canonical(fn.get("name") or "", fn.get("arguments") or {})
                 for fn in (c.get("function") for c in m.get("tool_calls") or () if isinstance(c, dict))
                 if isinstance(fn, dict))


def rounds(messages: list[dict] | None) -> list[tuple[dict, tuple, tuple]]:
    """The tool rounds the conversation ends with, oldest first: (the assistant message, its calls (_round_key),
    the contents of the tool results that answer it, in order), back to the first message that is neither."""
    out: list[tuple[dict, tuple, tuple]] = []
    msgs = messages or []
    i = len(msgs) - 1
    while i >= 0:
        j = i
        while j >= 0 and isinstance(msgs[j], dict) and msgs[j].get("role") == "tool":
            j -= 1
        m = msgs[j] if j >= 0 else None
        if j == i or not isinstance(m, dict) or m.get("role") != "assistant" or not m.get("tool_calls"):
            break
        results = tuple(json.dumps(msgs[k].get("content"), ensure_ascii=False, sort_keys=True)
                        for k in range(j + 1, i + 1))
        out.append((m, _round_key(m), results))
        i = j - 1
    return out[::-1]


def cycle_next(messages: list[dict] | None) -> set[tuple[str, str]]:
    """When the conversation ends with a cycle of two or more tool rounds that repeats the cycle before it exactly
    (the same calls, in the same order, and the same results), the calls of the round the cycle starts with (what
    the model would ask for next to go round once more): {(name, arguments spelled)}; empty otherwise. Rounds whose
    calls or results differ (tests run, a file edited, the tests run again and now pass) are no such cycle."""
    rs = rounds(messages)
    for period in range(2, len(rs) // 2 + 1):
        last, before = rs[-period:], rs[-2 * period:-period]
        if all(a[1:] == b[1:] for a, b in zip(last, before)):
            first = last[0][0]
            return {(fn["name"], spelled(fn.get("arguments") or {})) for fn in
                    (c.get("function") for c in first.get("tool_calls") or () if isinstance(c, dict))
                    if isinstance(fn, dict) and isinstance(fn.get("name"), str)}
    return set()


class RepeatGuard:
    """Watches a reply's events from its start (push): holds them while the reply can still be only repeats of
    `repeats`, and answers RETRY at its end if it was."""

    def __init__(self, repeats: set[tuple[str, str]]):
        self.repeats = repeats
        self.names = {name for name, _ in repeats}
        self.watching = bool(repeats)
        self.held: list = []
        self.repeated = 0                       # complete calls held, each a repeat
        self.args: dict[int, tuple[str, str]] = {}   # a call being streamed: index -> (name, arguments so far)
        self.retry = False

    def pass_on(self, events: list) -> list:
        """What of `events` goes to the client now; [] and `retry` set once the reply was only repeats."""
        out: list = []
        for ev in events:
            got = self.push(ev)
            if got is RETRY:
                self.retry = True
                return []
            out += got
        return out

    def push(self, ev):
        """The events to pass on now (a list), or RETRY."""
        if not self.watching:
            return [ev]
        if isinstance(ev, Finished):
            if self.repeated and not self.args:
                return RETRY
            return self._release(ev)
        if isinstance(ev, TextDelta) and not ev.text.strip():
            return self._hold(ev)
        if isinstance(ev, ToolCallStart) and ev.name in self.names:
            self.args[ev.index] = (ev.name, "")
            return self._hold(ev)
        if isinstance(ev, ToolCallArguments) and ev.index in self.args:
            name, text = self.args[ev.index]
            text += ev.text
            self.args[ev.index] = (name, text)
            if any(n == name and a.startswith(text) for n, a in self.repeats):
                return self._hold(ev)
        elif isinstance(ev, ToolCallEvent) and (ev.name, spelled(ev.arguments)) in self.repeats:
            self.args.pop(ev.index, None)
            self.repeated += 1
            return self._hold(ev)
        return self._release(ev)

    def _hold(self, ev) -> list:
        self.held.append(ev)
        return []

    def _release(self, ev) -> list:
        out, self.held, self.watching = self.held + [ev], [], False
        return out

    def retried(self) -> RetryCheck:
        """The check for the second try (after `retry` was set): what was held is the first reply's calls."""
        return RetryCheck(list(self.held))


_FENCED = re.compile(r"```[\w-]*[ \t]*\n?(.*?)\n?[ \t]*```", re.S)
_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>)?", re.S)
_OPENERS = ("{", "```", "<tool_call>")


def call_as_text(text: str) -> bool:
    """Whether `text` is a tool call written out: one JSON object with a "name" and "arguments" (or
    "parameters"), bare, in a code fence or in <tool_call> tags."""
    t = text.strip()
    for pattern in (_FENCED, _TAGGED, _FENCED):
        m = pattern.fullmatch(t)
        if m:
            t = m.group(1).strip()
    try:
        obj = json.loads(t)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("name"), str) and ("arguments" in obj or "parameters" in obj)


class RetryCheck(EventFilter):
    """Watches the second try's events (pass_on, as RepeatGuard's): holds them while the text so far is whitespace
    or opens as a call written out can, and at the end sends the first reply's `calls` in place of a reply that is
    empty or only such a call (`replaced`). Text that opens otherwise or a real call ends the watch; thinking
    passes as it comes."""

    retry = False                                   # never asks again (the pipeline reads it as RepeatGuard's)

    def __init__(self, calls: list):
        self.calls = calls
        self.held: list = []
        self.text = ""
        self.watching = True
        self.replaced = False

    def push(self, ev) -> list:
        if not self.watching:
            return [ev]
        if isinstance(ev, Finished):
            self.watching = False
            if not self.text.strip() or call_as_text(self.text):
                self.replaced, self.held = True, []
                return self.calls + [ev]
            return self._release(ev)
        if isinstance(ev, TextDelta):
            self.text += ev.text
            t = self.text.lstrip()
            if not t or any(o.startswith(t) or t.startswith(o) for o in _OPENERS):
                self.held.append(ev)
                return []
        elif isinstance(ev, ThinkingDelta):         # not the answer: it goes on, the watch stays
            return [ev]
        return self._release(ev)

    def _release(self, ev) -> list:
        out, self.held, self.watching = self.held + [ev], [], False
        return out


def for_job(job) -> RepeatGuard | None:
    """The guard for a generation (pipeline.Job), or None: the rule is off (`answer_after_tools` false), the
    reply is not read for calls, calls are forced or off or share the reply with a format, or the conversation
    does not end with the last round's results."""
    plan = job.runner_request.plan
    if not getattr(job.options, "answer_after_tools", False) or not job.parse_reply or plan is None \
            or not plan.tools or plan.tool_choice != "auto" or plan.grammar == EITHER:
        return None                 # (beside a format, a grammar shapes the reply from its first token)
    repeats = last_round(job.request.messages) | cycle_next(job.request.messages)
    return RepeatGuard(repeats) if repeats else None
