"""Tool calls given in pieces as the model writes them (toolcalls/reader.py, the parsers' `stream_calls`).

Every family's reply is fed split at every character boundary and one character at a time; each way must give
the content, thinking and calls of the whole parse, and for each call: its parts in order (Open, Args..., Done,
nothing between), the Args pieces adding up to exactly the arguments string a client is finally given
(`json.dumps(arguments, ensure_ascii=False)`), and, for a syntax that streams, the first piece out before the
call's text is complete. Broken calls: what a client that was already sent a call's first pieces then sees."""
from __future__ import annotations

import json
import random

import pytest

from app.service.generation.chat_features import ReplyReader
from app.service.generation.request import GenerationRequest
from app.service.generation.result import TextDelta, ThinkingDelta, ToolCallArguments, ToolCallEvent, ToolCallStart
from app.service.generation.toolcalls import Args, Done, Open, ToolCall, make_parser, parse_all
from app.service.generation.toolcalls.jsonscan import JsonReader
from app.engine.chat.plan import plan_chat

TOOLS = ["get_weather", "get_time", "write_file"]
B, E, S = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
HARMONY_CALL = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris", "days" : 3}<|call|>')
WRITE = ('{"name": "write_file", "arguments": {"path": "a.py", "content": "def f():\\n    return \\"\\u00e9\\ud83d\\ude00\\"'
         '\\n", "mode": 420, "ratio": 2.50, "flags": [true, false, null], "opts": {}}}')
# a fenced call writing a file that holds a code block: the fence closes after the JSON value, not at its first ```
FENCED_WRITE = ('```json\n{"name": "write_file", "arguments": {"path": "README.md", "content": "# Build\\n```sh\\n'
                'make\\n```\\n"}}\n```\nDone.')

# (family, reply, whether its calls stream in pieces)
STREAMED = [
    ("hermes", 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
               '</tool_call>'),
    ("hermes", '<think>\nweather and time\n</think>\n\n<tool_call>\n' + WRITE + '\n</tool_call>\n<tool_call>\n'
               '{"name": "get_time", "arguments": {"tz": "CET", "o": {"dst": true, "l": [1, -2e3, null]}}}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"type": "function", "name": "get_weather", "arguments": {"city": "Paris"}, "id": "x"}\n'
               '</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'),              # cut by max_tokens
    ("hermes", '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'),          # a fenced bare call
    ("hermes", FENCED_WRITE),                         # ... whose arguments hold a code fence
    ("hermes", '[{"name": "get_weather", "arguments": {"city": "Paris"}}, '                     # a forced parallel list
               '{"name": "get_time", "arguments": {"tz": "UTC"}}]'),
    ("generic", '{"name": "get_weather", "arguments": {"city": "Paris"}}\n{"name": "get_time", "arguments": {}}'),
    ("command_r", '<|START_THINKING|>I need the weather.<|END_THINKING|><|START_ACTION|>[\n'
                  '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}\n]<|END_ACTION|>'),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
               '{"name": "get_time", "parameters": {"tz": "UTC"}}'),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    ("llama3", '<|python_start|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|python_end|>'),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}, '
                '{"name": "get_time", "arguments": {"tz": "UTC"}}]'),
    ("mistral", '[THINK]Need it.[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'
                '[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{}'),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Par'),
    ("harmony", HARMONY_CALL),
    ("harmony", '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Par'),
    ("qwen3_coder", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
    ("qwen3_coder", 'I will write it.<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a "b".py\n</parameter>\n'
                    '<parameter=content>\ndef f():\n\n    return "\u00e9\\n"\n\n</parameter>\n<parameter=mode>\n420'
                    '\n</parameter>\n<parameter=opts>\n{"dry": true,  "n": [1, 2]}\n</parameter>\n<parameter=note>\n'
                    'true story\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n'
                    '<parameter=tz>\nUTC\n<parameter=fmt>\niso\n</function>\n</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\n"
                    "print(1)\nprint("),                                                       # cut by max_tokens
]
WHOLE = [                                # syntaxes read whole: the call comes in one piece once complete
    ("hermes", '<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>'),
    ("hermes", '<tool_call>\n{"name": "other_tool", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("hermes", '```json\n{"name": "other_tool", "arguments": {"city": "Paris"}}\n```'),      # bare: content
    ("hermes", '{"name": "get_weathe", "arguments": {"city": "Paris"}} then text'),
    ("hermes", '<tool_call>\n{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}\n</tool_call>'),
    ("llama3", '<|python_tag|>get_weather.call(city="Paris")'),
    ("deepseek", "<｜tool▁calls▁begin｜>" + B + "function" + S + 'get_weather\n```json\n{"city": "Paris"}\n```' + E +
                 B + "get_time" + S + '{}' + E + "<｜tool▁calls▁end｜>"),
    ("functiongemma", "<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>"),
    ("pythonic", '[get_weather(city="Paris"), get_time(tz="UTC")]'),
    ("qwen3_coder", "<tool_call>\n<function=other_tool>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
                    "</tool_call>"),
]


def feed(family, pieces, tools=TOOLS):
    """The items of a pieces-mode parse, each with the number of the feed that gave it (finish: len(pieces))."""
    p = make_parser(family, tools, stream_calls=True)
    out = []
    for n, piece in enumerate(pieces):
        out += [(n, item) for item in p.feed(piece).items]
    return out + [(len(pieces), item) for item in p.finish().items]


def summary(items):
    """(content, thinking, [(name, arguments)], [(name, arguments text)] of the calls streamed) + checks of order."""
    content = thinking = ""
    calls, texts = [], []
    open_call = None
    for item in items:
        if open_call is not None:
            assert isinstance(item, (Args, Done)), f"{item!r} inside a streamed call"
        if isinstance(item, tuple):
            if item[0] == "content":
                content += item[1]
            else:
                thinking += item[1]
        elif isinstance(item, ToolCall):
            calls.append((item.name, item.arguments))
        elif isinstance(item, Open):
            open_call = (item.name, [])
        elif isinstance(item, Args):
            assert open_call is not None and item.text
            open_call[1].append(item.text)
        else:
            assert isinstance(item, Done) and open_call is not None and item.name == open_call[0]
            text = "".join(open_call[1])
            assert text == json.dumps(item.arguments, ensure_ascii=False)      # the final arguments string
            calls.append((item.name, item.arguments))
            texts.append((item.name, text))
            open_call = None
    assert open_call is None
    return content, thinking, calls, texts


def whole_result(family, text):
    d = parse_all(family, text, TOOLS)
    return d.content, d.thinking, [(c.name, c.arguments) for c in d.calls]


def splits(text):
    yield [text]
    for k in range(1, len(text)):
        yield [text[:k], text[k:]]
    yield list(text)


@pytest.mark.parametrize("family,text", STREAMED, ids=[f"{f}-{i}" for i, (f, _) in enumerate(STREAMED)])
def test_streamed_calls_add_up_to_the_whole_parse_at_every_split(family, text):
    want = whole_result(family, text)
    assert want[2], "the case has calls"
    for pieces in splits(text):
        content, thinking, calls, texts = summary(item for _, item in feed(family, pieces))
        assert (content, thinking, calls) == want, pieces
        assert len(texts) == len(calls), "every call streamed"


@pytest.mark.parametrize("family,text", STREAMED, ids=[f"{f}-{i}" for i, (f, _) in enumerate(STREAMED)])
def test_a_calls_first_piece_comes_before_the_call_is_complete(family, text):
    """Fed one character at a time: each call's name and first arguments piece come in an earlier feed than its
    end (Done), and its arguments come in more than one piece."""
    items = feed(family, list(text))
    opened = args_at = None
    n_args = 0
    for n, item in items:
        if isinstance(item, Open):
            opened, args_at, n_args = n, None, 0
        elif isinstance(item, Args):
            args_at = n if args_at is None else args_at
            n_args += 1
        elif isinstance(item, Done):
            assert opened is not None and args_at is not None and args_at < n and n_args > 1, item
            opened = None


@pytest.mark.parametrize("family,text", WHOLE, ids=[f"{f}-{i}" for i, (f, _) in enumerate(WHOLE)])
def test_syntaxes_read_whole_give_the_call_once_complete(family, text):
    want = whole_result(family, text)
    for pieces in splits(text):
        items = [item for _, item in feed(family, pieces)]
        assert not any(isinstance(i, (Open, Args, Done)) for i in items), pieces
        assert summary(items)[:3] == want


def test_not_streamed_without_tools_or_without_asking():
    text = STREAMED[0][1]
    for p in (make_parser("hermes", (), stream_calls=True), make_parser("hermes", TOOLS)):
        d = p.feed(text).extend(p.finish())
        assert not any(isinstance(i, (Open, Args, Done)) for i in d.items) and d.calls


# ---- broken calls ---------------------------------------------------------------------------------------------

def test_a_call_that_turns_malformed_keeps_what_was_sent_and_shows_the_rest():
    """Its first pieces went out: the call stands, its arguments closed after the last valid member, and the
    text that did not parse is content (llama-server ends such a stream with an error: "Invalid diff")."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": tru}}\n</tool_call>'
    for pieces in splits(text):
        content, thinking, calls, texts = summary(item for _, item in feed("hermes", pieces))
        assert calls == [("get_weather", {"city": "Paris"})] and texts == [("get_weather", '{"city": "Paris"}')]
        assert content == "tru}}", pieces
    assert parse_all("hermes", text, TOOLS).calls == []      # whole, it is not a call (unchanged)


def test_a_fenced_call_whose_arguments_hold_a_code_fence_is_whole():
    want = ("Done.", "", [("write_file", {"path": "README.md", "content": "# Build\n```sh\nmake\n```\n"})])
    assert whole_result("hermes", FENCED_WRITE) == want
    for pieces in splits(FENCED_WRITE):
        assert summary(item for _, item in feed("hermes", pieces))[:3] == want, pieces
    broken = '```json\n{"name": "write_file", "arguments": {"path": "a.txt"}\n```\nDone.'     # its last } missing
    assert whole_result("hermes", broken) == ("Done.", "", [("write_file", {"path": "a.txt"})])


def test_a_call_whose_section_ends_inside_a_string_is_closed():
    text = '<tool_call>{"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1</tool_call>tail'
    content, _, calls, texts = summary(item for _, item in feed("hermes", list(text)))
    assert calls == [("write_file", {"path": "a.py", "content": "x = 1"})] and content == "tail"


def test_a_streamed_harmony_call_with_text_after_its_json():
    text = ('<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"} '
            'and more<|call|>')
    content, _, calls, _ = summary(item for _, item in feed("harmony", list(text)))
    assert calls == [("get_weather", {"city": "Paris"})] and content == "and more"


def test_a_random_model_never_breaks_the_invariant():
    """Random markup and JSON fragments (what a random-weight model writes): pieces never leak markup, every
    streamed call's pieces parse to its arguments, and a reply that streamed no call parses as it does whole."""
    frags = ["<tool_call>", "</tool_call>", "{", "}", "[", "]", '"name"', ":", '"get_weather"', ",", '"arguments"',
             '{"city": "Paris"}', '"city"', '"Par', "is", " ", "\n", "1", "-", ".5e", "tru", "e", "null", "\\", '"',
             "```json\n", "```", "[TOOL_CALLS]", "get_time", "[ARGS]", "<|python_tag|>", ";", "<think>", "</think>",
             "\\u00e9", "\\ud83d"]
    from app.engine.chat.formats import format_for
    for family in ("hermes", "mistral", "llama3", "generic"):
        rng = random.Random(family)
        for _ in range(300):
            text = "".join(rng.choice(frags) for _ in range(rng.randint(1, 30)))
            items = [item for _, item in feed(family, [text[i:i + 3] for i in range(0, len(text), 3)])]
            content = "".join(i[1] for i in items if isinstance(i, tuple) and i[0] == "content")
            assert not [m for m in format_for(family).shown if m in content], text
            streamed_any, open_text = False, None
            for item in items:
                if isinstance(item, Open):
                    streamed_any, open_text = True, ""
                elif isinstance(item, Args):
                    open_text += item.text
                elif isinstance(item, Done):
                    assert json.loads(open_text) == item.arguments, text
            if not streamed_any:
                assert summary(items)[:3] == whole_result(family, text), text


# ---- the events a stream gets -----------------------------------------------------------------------------------

def reader(family, parallel=True, think=None):
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in TOOLS]
    req = GenerationRequest(model="m", messages=[], tools=tools, parallel_tool_calls=parallel, think=think)
    return ReplyReader(req, plan_chat(family, tools, None, parallel), pieces=True)


def events_of(r, text):
    out = []
    for ch in text:
        out += r.feed(TextDelta(ch))
    return out + r.finish()


def test_thinking_text_and_two_calls_keep_their_order_and_indexes():
    text = ('<think>Two lookups.</think>Checking.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
            '</tool_call><tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>')
    evs = events_of(reader("hermes"), text)
    kinds = []
    for e in evs:
        k = type(e).__name__
        if not kinds or kinds[-1] != k or k == "ToolCallStart":
            kinds.append(k)
    assert kinds == ["ThinkingDelta", "TextDelta", "ToolCallStart", "ToolCallArguments", "ToolCallEvent",
                     "ToolCallStart", "ToolCallArguments", "ToolCallEvent"]
    starts = [e for e in evs if isinstance(e, ToolCallStart)]
    ends = [e for e in evs if isinstance(e, ToolCallEvent)]
    assert [(s.index, s.name) for s in starts] == [(0, "get_weather"), (1, "get_time")]
    assert [(e.index, e.id, e.arguments) for e in ends] == [(0, starts[0].id, {"city": "Oslo"}),
                                                            (1, starts[1].id, {"tz": "UTC"})]
    for s, e in zip(starts, ends):
        text = "".join(a.text for a in evs if isinstance(a, ToolCallArguments) and a.index == s.index)
        assert text == json.dumps(e.arguments)
    assert "".join(e.text for e in evs if isinstance(e, ThinkingDelta)) == "Two lookups."
    assert "".join(e.text for e in evs if isinstance(e, TextDelta)) == "Checking."


def test_one_call_only_when_parallel_calls_are_off():
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
            '<tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>')
    r = reader("hermes", parallel=False)
    done_at = None
    evs = []
    for i, ch in enumerate(text):
        evs += r.feed(TextDelta(ch))
        if done_at is None and r.calls_done:
            done_at = i + 1
    evs += r.finish()
    # the model may be stopped once the first call is complete (its arguments closed), no later than its end tag
    assert text.index('"Oslo"}') + len('"Oslo"}') <= done_at <= text.index("</tool_call>") + len("</tool_call>")
    assert {e.index for e in evs if isinstance(e, (ToolCallStart, ToolCallArguments, ToolCallEvent))} == {0}
    assert [e.name for e in evs if isinstance(e, ToolCallEvent)] == ["get_weather"]


def test_a_call_read_whole_still_comes_as_start_arguments_end():
    evs = events_of(reader("pythonic"), '[get_weather(city="Paris")]')
    assert [type(e) for e in evs] == [ToolCallStart, ToolCallArguments, ToolCallEvent]
    assert evs[1].text == '{"city": "Paris"}'


# ---- the JSON reader --------------------------------------------------------------------------------------------

VALUES = ['{"city": "Paris", "unit": "celsius"}',
          '{ "a" : [1, 2.50, -0, 1e3, true, false, null, {"b": {}}, []], "s": "x\\n\\"y\\u00e9\\ud83d\\ude00z\\/" }',
          '{"raw": "line\nbreak\ttab", "n": NaN, "i": -Infinity}', '{"lone": "\\ud83d\\n", "two": "\\ud83d\\ud83d\\ude00"}',
          '{}', '{"a":{"b":{"c":[[],[{}]]}}}', '{"k": 1E-2, "big": 123456789012345678901234567890}']


@pytest.mark.parametrize("value", VALUES)
def test_json_reader_writes_what_json_dumps_writes(value):
    want = json.dumps(json.loads(value, strict=False), ensure_ascii=False)
    for pieces in splits(value):
        r = JsonReader()
        got = "".join(r.feed(p) for p in pieces) + r.finish()
        assert r.done and got == want, pieces
    for cut in range(1, len(value)):        # every prefix, completed, is JSON; what was given is never changed
        r = JsonReader()
        given = r.feed(value[:cut])
        assert want.startswith(given)
        json.loads(given + r.closers(), strict=False)


@pytest.mark.parametrize("bad,given,used", [('{"a": tru}', "{", 6), ('{"a": 1,}', '{"a": 1', 8),
                                            ('{"a" 1}', "{", 5), ('{"a": "\\x"}', '{"a": "', 8),
                                            ('{"a": [1 2]}', '{"a": [1', 9), ('{"a": 01}', "{", 6)])
def test_json_reader_stops_where_the_text_is_not_json(bad, given, used):
    r = JsonReader()
    assert r.feed(bad) == given and r.broken and r.used == used
    json.loads(given + r.closers())
