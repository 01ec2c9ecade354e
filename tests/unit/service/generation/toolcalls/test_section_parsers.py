"""The pieces under the reply parsers, called directly: each call syntax's reader read whole (syntaxes.read_calls:
the text between the markers -> calls, or None so the text stays content), the marker hold-back of the stream parser
(reader.held_suffix, stream.OutputParser), the Delta type (types.py) and the gpt-oss channel parser (harmony.py).
Whole replies per family, streamed and not, are in test_toolcall_parsers.py."""
from __future__ import annotations

import pytest

from app.engine.chat.formats import DS_CALL, DS_SEP, MISTRAL_CALLS
from app.service.generation.toolcalls.syntaxes import read_calls
from app.service.generation.toolcalls.harmony import HarmonyParser
from app.service.generation.toolcalls.reader import held_suffix
from app.service.generation.toolcalls.stream import OutputParser
from app.service.generation.toolcalls.types import Delta, ToolCall


def named(calls) -> list[tuple]:
    return [(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("fmt, body, expect", [
    ("hermes", '{"name": "get_weather", "arguments": {"city": "Paris"}}', [("get_weather", {"city": "Paris"})]),
    ("qwen3_coder", "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                    "</parameter>\n</function>", [("get_weather", {"city": "Paris", "days": 3})]),
    ("qwen3_coder", '{"name": "f", "arguments": {}}', [("f", {})]),               # the Hermes shape it also writes
    ("pythonic", '[get_weather(city="Paris"), get_time(tz="CET")]',
     [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]),
    ("pythonic", '```tool_code\nget_weather(city="Paris")\n```', [("get_weather", {"city": "Paris"})]),
    ("llama3", '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": ";"}}',
     [("a", {"x": 1}), ("b", {"y": ";"})]),
    ("llama3", 'brave_search.call(query="weather")', [("brave_search", {"query": "weather"})]),
    ("mistral", '[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]',
     [("get_weather", {"city": "Paris"})]),
    ("mistral", 'get_weather[ARGS]{"city": "Paris"}' + MISTRAL_CALLS + 'get_time[ARGS]{"tz": "CET"}',
     [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]),
    ("deepseek", f'{DS_CALL[0]}function{DS_SEP}get_weather\n```json\n{{"city": "Paris"}}\n```{DS_CALL[1]}',
     [("get_weather", {"city": "Paris"})]),
    ("deepseek", f'{DS_CALL[0]}get_weather{DS_SEP}{{"city": "Paris"}}{DS_CALL[1]}',
     [("get_weather", {"city": "Paris"})]),
    ("functiongemma", "call:get_weather{city:<escape>Paris, France<escape>,days:3}",
     [("get_weather", {"city": "Paris, France", "days": 3})]),
])
def test_each_format_reads_its_call_section(fmt, body, expect):
    assert named(read_calls(fmt, body)) == expect


@pytest.mark.parametrize("body, expect", [
    ("Sure.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\nand then\n"
     "<function=get_time>\n</function>", [("get_weather", {"city": "Paris"}), ("get_time", {})]),
    ("<function=get weather>\n</function>\n<function=get_time>\n<parameter=tz zone>\nUTC\n</parameter>\n"
     "<parameter=fmt>\niso\n</parameter>\n</function>", [("get_time", {"fmt": "iso"})]),
    ("<function=get_time>\n<parameter=fmt>\niso\n<parameter=</function>", [("get_time", {"fmt": "iso"})]),
])
def test_qwen3_coder_read_whole_skips_what_is_not_a_function_or_parameter(body, expect):
    """Read whole, its streaming framing skips text between functions and a function or parameter whose name
    has a space, up to the next one; a parameter cut by the function's end is left out."""
    assert named(read_calls("qwen3_coder", body)) == expect


@pytest.mark.parametrize("fmt, body", [
    ("hermes", "I would call a tool here"),
    ("pythonic", "[x for x in range(3)]"),                 # not a call: nothing is evaluated
    ("pythonic", "__import__('os').system('true')"),       # a call whose argument is code, not a literal
    ("llama3", "just words"),
    ("mistral", "no brackets at all"),
    ("deepseek", f"{DS_CALL[0]}no separator{DS_CALL[1]}"),
    ("functiongemma", "get_weather{city:Paris}"),           # no `call:` prefix
    ("functiongemma", "call:{city:<escape>Paris<escape>}"),  # no name
])
def test_text_that_is_not_a_call_gives_none(fmt, body):
    assert read_calls(fmt, body) is None


def test_mistral_v11_keeps_the_models_call_id():
    calls = read_calls("mistral", 'get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}')
    assert [(c.name, c.arguments, c.id) for c in calls] == [("get_weather", {"city": "Paris"}, "a1b2c3d4e")]


@pytest.mark.parametrize("buf, markers, keep", [
    ("Hello <tool", ["<tool_call>"], 5),        # may be the start of the marker: held back
    ("Hello <tool_call>", ["<tool_call>"], 0),  # a whole marker is the parser's business, not a held tail
    ("Hello", ["<tool_call>"], 0),
    ("a <th", ["<think>", "<tool_call>"], 3),
    ("", ["<tool_call>"], 0),
])
def test_held_suffix_is_the_longest_tail_that_may_start_a_marker(buf, markers, keep):
    assert held_suffix(buf, markers) == keep


def test_the_stream_parser_holds_a_split_marker_and_never_leaks_it():
    p = OutputParser("hermes", ["get_weather"])
    out = Delta()
    pieces = ["Sure. <to", "ol_ca", 'll>{"name": "get_weather", ', '"arguments": {"city": "Paris"}}</tool', "_call>"]
    for piece in pieces:
        d = p.feed(piece)
        assert "<to" not in d.content and "tool_call" not in d.content, d
        out.extend(d)
    out.extend(p.finish())
    assert out.content.strip() == "Sure." and named(out.calls) == [("get_weather", {"city": "Paris"})]


def test_delta_is_false_when_empty_and_extends_in_place():
    a = Delta()
    assert not a
    b = Delta(content="x", thinking="t", calls=[ToolCall("f", {})])
    assert a.extend(b) is a and a and (a.content, a.thinking, named(a.calls)) == ("x", "t", [("f", {})])


def test_harmony_channels_and_a_recipient_call():
    reply = ("<|channel|>analysis<|message|>Need the weather.<|end|>"
             "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
             '{"city": "Paris"}<|call|>')
    p = HarmonyParser(["get_weather"])
    out = Delta()
    for i in range(0, len(reply), 7):                    # streamed in small pieces
        out.extend(p.feed(reply[i:i + 7]))
    out.extend(p.finish())
    assert out.thinking == "Need the weather." and out.content == ""
    assert named(out.calls) == [("get_weather", {"city": "Paris"})]


def test_harmony_final_channel_is_the_content():
    p = HarmonyParser()
    out = p.feed("<|channel|>final<|message|>It is sunny.<|return|>").extend(p.finish())
    assert out.content == "It is sunny." and not out.calls and out.thinking == ""
