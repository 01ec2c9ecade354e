"""A reply that only repeats the last round's calls is written again (service/generation/repeat_guard.py): which
calls count as the last round's, what the guard holds back while a streamed reply can still be such a repeat, and
that anything else passes untouched. Live, on Qwen2.5-Coder-0.5B: tests/integration/service/test_agent_frameworks.py."""
from __future__ import annotations

import json

from app.service.generation.repeat_guard import RETRY, RepeatGuard, last_round, spelled
from app.service.generation.result import Finished, TextDelta, ThinkingDelta, ToolCallArguments, ToolCallEvent, \
    ToolCallStart

WEATHER = {"location": "San Francisco", "unit": "celsius"}


def call(name, args, cid="c1"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def convo(*tail):
    return [{"role": "user", "content": "weather?"}, *tail]


END = Finished("stop", 10, 5, 0.1, 0.1)


def run(guard: RepeatGuard, events: list):
    out = []
    for ev in events:
        got = guard.push(ev)
        if got is RETRY:
            return RETRY
        out += got
    return out


def test_the_last_round_is_the_last_assistant_turn_answered_by_everything_after_it():
    answered = convo({"role": "assistant", "content": "", "tool_calls": [call("getWeather", WEATHER)]},
                     {"role": "tool", "content": "{\"temp\": 18}", "tool_call_id": "c1"})
    assert last_round(answered) == {("getWeather", spelled(WEATHER))}
    # OpenAI's wire string is read as the object it spells
    wire = convo({"role": "assistant", "tool_calls": [call("getWeather", '{"location":"San Francisco","unit":"celsius"}')]},
                 {"role": "tool", "content": "18", "tool_call_id": "c1"})
    assert last_round(wire) == last_round(answered)
    assert last_round(answered + [{"role": "user", "content": "again?"}]) == set()       # a new question
    assert last_round(convo()) == set() and last_round(None) == set()
    assert last_round(convo({"role": "assistant", "content": "hi"}, {"role": "tool", "content": "x"})) == set()
    older = answered + [{"role": "assistant", "content": "", "tool_calls": [call("other", {}, "c2")]},
                        {"role": "tool", "content": "ok", "tool_call_id": "c2"}]
    assert last_round(older) == {("other", "{}")}           # only the last round, not every earlier call


def test_a_reply_of_only_repeats_is_written_again():
    g = RepeatGuard({("getWeather", spelled(WEATHER))})
    assert run(g, [TextDelta("\n"), ToolCallEvent(0, "x", "getWeather", dict(WEATHER)), END]) is RETRY
    # streamed in pieces, in json.dumps' spelling
    g = RepeatGuard({("getWeather", spelled(WEATHER))})
    text = spelled(WEATHER)
    pieces = [ToolCallStart(0, "x", "getWeather"), ToolCallArguments(0, text[:10]), ToolCallArguments(0, text[10:]),
              ToolCallEvent(0, "x", "getWeather", dict(WEATHER)), END]
    assert run(g, pieces) is RETRY
    g = RepeatGuard({("getWeather", spelled(WEATHER))})         # as the pipeline asks: batch by batch
    assert g.pass_on(pieces[:2]) == [] and not g.retry
    assert g.pass_on(pieces[2:]) == [] and g.retry


def test_anything_else_passes_as_it_comes():
    rep = {("getWeather", spelled(WEATHER))}
    other = {"location": "Paris", "unit": "celsius"}
    for events in ([TextDelta("It is 18 degrees."), END],
                   [ToolCallEvent(0, "x", "getWeather", other), END],
                   [ToolCallEvent(0, "x", "getWeather", dict(WEATHER)), ToolCallEvent(1, "y", "getWeather", other), END],
                   [ToolCallEvent(0, "x", "getWeather", dict(WEATHER)), TextDelta(" Done."), END],
                   [ThinkingDelta("hmm"), ToolCallEvent(0, "x", "getWeather", dict(WEATHER)), END],
                   [TextDelta(" "), END]):                       # nothing at all: not a repeat (answer_hold's case)
        assert run(RepeatGuard(set(rep)), events) == events, events
    # the same arguments in another order are not the same call written again
    swapped = {"unit": "celsius", "location": "San Francisco"}
    assert run(RepeatGuard(set(rep)), [ToolCallEvent(0, "x", "getWeather", swapped), END]) != RETRY


def test_streamed_pieces_are_held_only_while_they_can_still_be_a_repeat():
    g = RepeatGuard({("getWeather", spelled(WEATHER))})
    assert g.push(TextDelta("\n")) == []
    assert g.push(ToolCallStart(0, "x", "getWeather")) == []
    assert g.push(ToolCallArguments(0, '{"location": "San')) == []
    diverged = ToolCallArguments(0, ' Jose"')
    assert g.push(diverged) == [TextDelta("\n"), ToolCallStart(0, "x", "getWeather"),
                                ToolCallArguments(0, '{"location": "San'), diverged]
    assert g.push(END) == [END]                             # the watch is over
    g = RepeatGuard({("getWeather", spelled(WEATHER))})
    start = ToolCallStart(0, "x", "convert")                # a tool the last round did not call: sent at once
    assert g.push(start) == [start]


def test_the_rule_is_an_option_and_a_modelfile_parameter():
    import pytest
    from app.service.generation.options import parse_ollama_options
    from app.service.http.errors import ApiError
    from app.service.store.modelfile import parse_param_value

    assert parse_ollama_options({}).answer_after_tools is True
    assert parse_ollama_options({}, {"answer_after_tools": False}).answer_after_tools is False      # PARAMETER
    assert parse_ollama_options({"answer_after_tools": True}, {"answer_after_tools": False}).answer_after_tools
    with pytest.raises(ApiError, match="answer_after_tools"):
        parse_ollama_options({"answer_after_tools": "yes"})
    assert parse_param_value("answer_after_tools", "false") is False


# ---- a cycle of rounds ------------------------------------------------------------------------------------------

def round_(name, args, result, cid):
    return [{"role": "assistant", "content": "", "tool_calls": [call(name, args, cid)]},
            {"role": "tool", "content": result, "tool_call_id": cid}]


def test_a_cycle_repeated_exactly_asks_for_its_first_round_again():
    from app.service.generation.repeat_guard import cycle_next, for_job
    sf = {"location": "San Francisco"}
    w1 = round_("weather", sf, '{"temperature": 79}', "a")
    c1 = round_("convert", {"temperature": 79}, '{"celsius": 26}', "b")
    w2 = round_("weather", '{"location":"San Francisco"}', '{"temperature": 79}', "c")     # wire string, new ids
    c2 = round_("convert", '{"temperature":79}', '{"celsius": 26}', "d")
    assert cycle_next(convo(*w1, *c1, *w2, *c2)) == {("weather", spelled(sf))}
    assert cycle_next(convo(*w1, *c1, *w2)) == set()                  # not a whole cycle twice yet
    assert cycle_next(convo(*w1, *c1)) == set() and cycle_next(None) == set()
    # a period of three, after other rounds
    e = round_("edit", {"path": "a.py"}, "ok", "e")
    t = round_("test", {}, "1 failed", "f")
    v = round_("view", {"path": "a.py"}, "x = 1", "g")
    assert cycle_next(convo(*c1, *t, *e, *v, *t, *e, *v)) == {("test", "{}")}
    # the guard is given it (next to the last round's calls)
    g = RepeatGuard(cycle_next(convo(*w1, *c1, *w2, *c2)) | last_round(convo(*w1, *c1, *w2, *c2)))
    assert run(g, [ToolCallEvent(0, "x", "weather", dict(sf)), END]) is RETRY
    assert for_job is not None


def test_a_cycle_whose_results_or_arguments_changed_is_work_not_a_loop():
    from app.service.generation.repeat_guard import cycle_next
    # run the tests, edit, run the tests again: they pass now
    t1 = round_("test", {}, "1 failed", "a")
    e1 = round_("edit", {"path": "a.py", "new": "x = 2"}, "ok", "b")
    t2 = round_("test", {}, "all passed", "c")
    e2 = round_("edit", {"path": "a.py", "new": "x = 2"}, "ok", "d")
    assert cycle_next(convo(*t1, *e1, *t2, *e2)) == set()
    # the same results, but another edit
    t2 = round_("test", {}, "1 failed", "c")
    e2 = round_("edit", {"path": "a.py", "new": "x = 3"}, "ok", "d")
    assert cycle_next(convo(*t1, *e1, *t2, *e2)) == set()
    # the weather agent's tool gives a new temperature each time: never the same cycle
    sf = {"location": "San Francisco"}
    rs = (round_("weather", sf, '{"temperature": 79}', "a") + round_("convert", {"temperature": 79}, '{"celsius": 26}', "b")
          + round_("weather", sf, '{"temperature": 77}', "c") + round_("convert", {"temperature": 77}, '{"celsius": 25}', "d"))
    assert cycle_next(convo(*rs)) == set()
    # a new question ends the rounds
    t2 = round_("test", {}, "1 failed", "c")
    assert cycle_next(convo(*t1, *e1, {"role": "user", "content": "go on"}, *t2, *e1)) == set()


# ---- the second try, judged before the client sees it -------------------------------------------------------------

EDIT = {"path": "a.py", "old": "x = 1", "new": "x = 2"}


def retried_after_repeat():
    """A guard that has just asked again: the first reply was only a repeat of the last round's edit (streamed in
    pieces, after a newline). Returns the guard's check for the second try and the first reply's events."""
    g = RepeatGuard({("edit", spelled(EDIT))})
    text = spelled(EDIT)
    first = [TextDelta("\n"), ToolCallStart(0, "call_1", "edit"), ToolCallArguments(0, text[:12]),
             ToolCallArguments(0, text[12:]), ToolCallEvent(0, "call_1", "edit", dict(EDIT))]
    assert g.pass_on(first + [END]) == [] and g.retry
    return g.retried(), first


def as_pieces(text: str, size: int = 5) -> list:
    return [TextDelta(text[i:i + size]) for i in range(0, len(text), size)]


def test_a_second_try_that_writes_the_call_as_text_sends_the_first_replys_calls():
    check, first = retried_after_repeat()
    written = '{"name": "edit", "arguments": ' + json.dumps(EDIT) + '}'
    pieces = as_pieces(written)
    assert check.pass_on(pieces[:3]) == []                     # held while it can still be a call written out
    out = check.pass_on(pieces[3:] + [END])
    assert out == first + [END] and check.replaced
    # "parameters" for "arguments", and in <tool_call> tags, as Qwen's template writes calls
    check, first = retried_after_repeat()
    tagged = '<tool_call>\n{"name": "edit", "parameters": ' + json.dumps(EDIT) + '}\n</tool_call>'
    assert check.pass_on(as_pieces(tagged) + [END]) == first + [END] and check.replaced


def test_a_second_try_that_writes_the_call_in_a_json_fence_sends_the_first_replys_calls():
    check, first = retried_after_repeat()
    fenced = '```json\n{"name": "edit", "arguments": ' + json.dumps(EDIT) + '}\n```\n'
    assert check.pass_on(as_pieces(fenced) + [END]) == first + [END] and check.replaced


def test_an_empty_second_try_sends_the_first_replys_calls():
    check, first = retried_after_repeat()
    assert check.pass_on([TextDelta(" \n"), END]) == first + [END] and check.replaced
    check, first = retried_after_repeat()
    assert check.pass_on([END]) == first + [END] and check.replaced


def test_a_real_answer_in_the_second_try_passes_unchanged():
    check, _ = retried_after_repeat()
    answer = [TextDelta("\n"), TextDelta("I changed x to 2 in a.py."), TextDelta(" Done.")]
    assert check.pass_on(answer[:2]) == answer[:2]             # sent as soon as it cannot be a call written out
    assert check.pass_on(answer[2:] + [END]) == answer[2:] + [END] and not check.replaced
    # JSON that is no call, and code in a fence, are answers too (held to the end, then sent whole)
    for text in ('{"x": 2}', '```python\nx = 2\n```', '{"name": "edit"}'):
        check, _ = retried_after_repeat()
        events = as_pieces(text) + [END]
        assert check.pass_on(events) == events and not check.replaced, text
    # thinking goes on as it comes; a real call (the reply is still read for calls) ends the watch
    check, _ = retried_after_repeat()
    thought = ThinkingDelta("the edit is done")
    assert check.pass_on([thought]) == [thought]
    call_ = ToolCallEvent(0, "c9", "view", {"path": "a.py"})
    assert check.pass_on([TextDelta("\n"), call_, END]) == [TextDelta("\n"), call_, END] and not check.replaced
