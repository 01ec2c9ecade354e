"""A reply ends at the first call it repeats (service/generation/call_repeats.py), in every call syntax, streamed in
pieces or not: the calls before the repeat are what the client gets (each once, indexes from 0, pieces adding up
to the call), the repeat and everything after it are dropped, and the generation is told to stop no later than
the end of the repeated call's text (where the syntax's reader streams calls; syntaxes read whole: at their
section's end)."""
from __future__ import annotations

import json

import pytest

from app.engine.chat.plan import plan_chat
from app.service.generation.call_repeats import CallRepeats, CallWatch, canonical, wanted
from app.service.generation.chat_features import ReplyReader
from app.service.generation.options import parse_ollama_options
from app.service.generation.request import GenerationRequest
from app.service.generation.result import (Finished, TextDelta, ToolCallArguments, ToolCallEvent,
                                           ToolCallStart)
from app.service.store.modelfile import parse_param_value

TOOLS = ["get_weather", "get_time", "write_file"]
W = ("get_weather", {"city": "Paris", "unit": "celsius"})
W2 = ("get_weather", {"city": "Paris", "unit": "fahrenheit"})
T = ("get_time", {"tz": "UTC"})


def hermes(calls):
    return "".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>\n' for n, a in calls)


def bare_lines(calls):
    return "\n".join(json.dumps({"name": n, "arguments": a}) for n, a in calls)


def bare_list(calls):
    return json.dumps([{"name": n, "arguments": a} for n, a in calls])


def mistral_list(calls):
    return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in calls])


def mistral_args(calls):
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in calls)


def llama3(calls):
    return "<|python_tag|>" + "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)


def qwen_xml(calls):
    out = ""
    for n, a in calls:
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in a.items())
        out += f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>\n"
    return out


def harmony(calls):
    return "".join(f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>"
                   f"{json.dumps(a)}<|call|>" for n, a in calls)


def command_r(calls):
    body = ",\n".join(json.dumps({"tool_call_id": str(i), "tool_name": n, "parameters": a})
                      for i, (n, a) in enumerate(calls))
    return f"<|START_ACTION|>[\n{body}\n]<|END_ACTION|>"


def pythonic(calls):
    return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={json.dumps(v)}" for k, v in a.items()) + ")"
                           for n, a in calls) + "]"


# (family, how it writes a list of calls, whether its reader gives calls as they complete)
SYNTAXES = [("hermes", hermes, True), ("hermes", bare_lines, True), ("generic", bare_lines, True),
            ("hermes", bare_list, True), ("mistral", mistral_list, True), ("mistral", mistral_args, True),
            ("llama3", llama3, True), ("qwen3_coder", qwen_xml, True), ("harmony", harmony, True),
            ("command_r", command_r, True), ("pythonic", pythonic, False)]
RUNAWAYS = [([W, W, W, W], [W]), ([W, W2, W, W2, W], [W, W2]), ([W, T, W2, T], [W, T, W2])]


def reader(family, pieces, watch=True):
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in TOOLS]
    req = GenerationRequest(model="m", messages=[], tools=tools)
    return ReplyReader(req, plan_chat(family, tools, None, True), pieces=pieces, watch=watch)


def run(family, text, pieces, step=1):
    """Feed `text` `step` characters at a time through the reader and the rule, as the pipeline does: (events
    passed on, characters fed when the rule said stop (None: never))."""
    r, g = reader(family, pieces), CallRepeats()
    out, stop_at = [], None
    for i in range(0, len(text), step):
        out += g.pass_on(r.feed(TextDelta(text[i:i + step])))
        if stop_at is None and (g.stop or r.repeated):
            stop_at = min(i + step, len(text))
            break
    out += g.pass_on(r.finish() + [Finished("stop", 1, 1, 0.0, 0.0)])
    return out, stop_at


def calls_of(events):
    return [(e.name, e.arguments) for e in events if isinstance(e, ToolCallEvent)]


def check_pieces(events):
    """Every streamed call: Start, Args adding up to its arguments, Event, in order, indexes from 0."""
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    ends = [e for e in events if isinstance(e, ToolCallEvent)]
    assert [e.index for e in ends] == list(range(len(ends)))
    if starts:
        assert [(s.index, s.id, s.name) for s in starts] == [(e.index, e.id, e.name) for e in ends]
        for e in ends:
            text = "".join(a.text for a in events if isinstance(a, ToolCallArguments) and a.index == e.index)
            assert json.loads(text) == e.arguments


@pytest.mark.parametrize("family,write,streams", SYNTAXES, ids=[f"{f}-{w.__name__}" for f, w, _ in SYNTAXES])
@pytest.mark.parametrize("pieces", [True, False], ids=["pieces", "whole"])
def test_a_reply_ends_at_its_first_repeated_call(family, write, streams, pieces):
    for calls, want in RUNAWAYS:
        text = write(calls)
        first_repeat = write(calls[:len(want) + 1])            # the text up to the end of the first repeat
        for step in (1, 3, 17):
            events, stop_at = run(family, text, pieces, step)
            assert calls_of(events) == want, (text, step)
            check_pieces(events)
            assert isinstance(events[-1], Finished)
            if streams:
                # stopped within the chunk that completed the repeat (the writer's separators aside)
                assert stop_at is not None and stop_at <= len(first_repeat.rstrip("]\n ;,")) + step, (text, step)
            else:
                assert stop_at is None or stop_at == len(text)


@pytest.mark.parametrize("pieces", [True, False], ids=["pieces", "whole"])
def test_calls_that_differ_all_stand_and_nothing_stops(pieces):
    for family, write, _ in SYNTAXES:
        calls = [W, W2, T, ("get_time", {"tz": "CET"})]
        events, stop_at = run(family, write(calls), pieces)
        assert calls_of(events) == calls and stop_at is None, family


def test_text_before_the_calls_stays_and_text_after_the_repeat_goes():
    text = "Let me check.\n" + hermes([W, W]) + "Here you go."
    for pieces in (True, False):
        events, _ = run("hermes", text, pieces)
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Let me check.\n"
        assert calls_of(events) == [W]


def test_the_same_arguments_in_another_key_order_are_a_repeat():
    a = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
    b = '{"name": "get_weather", "arguments": {"unit": "celsius", "city": "Paris"}}'
    text = f"<tool_call>\n{a}\n</tool_call>\n<tool_call>\n{b}\n</tool_call>\n<tool_call>\n{a}\n</tool_call>"
    events, _ = run("hermes", text, False)
    assert calls_of(events) == [W]
    # streamed in pieces, the reordered one's first pieces went out before it was complete: it stands, the reply
    # ends after it
    events, _ = run("hermes", text, True)
    assert calls_of(events) == [W, W]
    check_pieces(events)
    assert canonical("f", '{"b": 1, "a": [1, {"y": 2, "x": 1}]}') == canonical("f", {"a": [1, {"x": 1, "y": 2}], "b": 1})


def test_a_repeat_held_in_pieces_never_reaches_the_client():
    """The repeat's Start and argument pieces are held while they still spell the earlier call, then dropped."""
    r, g = reader("hermes", True), CallRepeats()
    out = []
    for ch in hermes([W, W]):
        out += g.pass_on(r.feed(TextDelta(ch)))
    starts = [e for e in out if isinstance(e, ToolCallStart)]
    assert len(starts) == 1 and g.stop and g.cut
    # a call of the same tool with other arguments is held only while its arguments match, then given
    r, g = reader("hermes", True), CallRepeats()
    out = []
    for ch in hermes([W, W2]):
        out += g.pass_on(r.feed(TextDelta(ch)))
    assert len([e for e in out if isinstance(e, ToolCallStart)]) == 2 and not g.stop
    args = "".join(e.text for e in out if isinstance(e, ToolCallArguments) and e.index == 1)
    assert args.startswith('{"city": "Paris", "unit": "')         # given while being written, not at its end


def test_the_watch_cuts_the_text_at_the_repeats_end():
    w = CallWatch("mistral", TOOLS)
    first = '[TOOL_CALLS][{"name": "get_time", "arguments": {"tz": "UTC"}}, '
    assert w.feed(first) is None
    rest = '{"name": "get_time", "arguments": {"tz": "UTC"}}, {"name": "get_weather"'
    cut = w.feed(rest)
    assert rest[:cut].endswith('"arguments": {"tz": "UTC"}') and w.repeated      # its arguments' end


def test_the_option_and_parameter():
    assert parse_ollama_options({}).stop_repeated_calls is True
    assert parse_ollama_options({"stop_repeated_calls": False}).stop_repeated_calls is False
    assert parse_ollama_options({}, {"stop_repeated_calls": False}).stop_repeated_calls is False
    assert parse_param_value("stop_repeated_calls", "false") is False

    class Job:
        def __init__(self, on, tools):
            self.options = parse_ollama_options({"stop_repeated_calls": on})
            self.parse_reply = True
            self.runner_request = type("R", (), {"plan": plan_chat("hermes", tools, None, True)})()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    assert wanted(Job(True, tools)) and not wanted(Job(False, tools)) and not wanted(Job(True, None))
