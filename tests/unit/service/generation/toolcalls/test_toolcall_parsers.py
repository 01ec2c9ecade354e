"""Tool-call and thinking parsers, per family, on replies in each family's own format (incl. broken ones).

Each case is checked twice: parsed whole, and streamed in small pieces (every split must give the same
result: the streaming parser must hold back partial markers, never leak them, never lose a call)."""
from __future__ import annotations

import random

import pytest

from app.service.generation.toolcalls import make_parser, parse_all
from app.service.generation.toolcalls.jsonscan import calls_from_text, json_end, mend

TOOLS = ["get_weather", "get_time"]
W = {"name": "get_weather", "arguments": {"city": "Paris"}}


def streamed(family, text, tools=TOOLS, sizes=(1, 2, 3, 5, 7, 13)):
    """Feed text in pieces of varying size; the merged result."""
    rng = random.Random(len(text))
    p = make_parser(family, tools)
    content, thinking, calls = "", "", []
    pos = 0
    while pos < len(text):
        n = rng.choice(sizes)
        d = p.feed(text[pos:pos + n])
        pos += n
        content, thinking, calls = content + d.content, thinking + d.thinking, calls + d.calls
    d = p.finish()
    return content + d.content, thinking + d.thinking, calls + d.calls


def check(family, text, *, content="", thinking="", calls=(), tools=TOOLS):
    whole = parse_all(family, text, tools)
    got = (whole.content, whole.thinking, [(c.name, c.arguments) for c in whole.calls])
    want = (content, thinking, [(c["name"], c["arguments"]) for c in calls])
    assert got == want, f"whole: {got!r} != {want!r}"
    s_content, s_thinking, s_calls = streamed(family, text, tools)
    assert (s_content, s_thinking, [(c.name, c.arguments) for c in s_calls]) == want, "streamed differs"
    return whole


# ---- Hermes / Qwen2.5 / Qwen3 ------------------------------------------------------------------------------

def test_hermes_one_call():
    check("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', calls=[W])


def test_hermes_two_calls_and_thinking():
    text = ('<think>\nThe user wants weather and time.\n</think>\n\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>')
    check("hermes", text, thinking="The user wants weather and time.\n",
          calls=[W, {"name": "get_time", "arguments": {"tz": "CET"}}])


def test_hermes_missing_closing_tag_and_cut_off_json():
    check("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}', calls=[W])
    check("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', calls=[
        {"name": "get_weather", "arguments": {"city": "Par"}}])


def test_hermes_text_before_and_trailing_text_after():
    check("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                    '</tool_call>\nDone.', content="Let me check.\nDone.", calls=[W])


def test_hermes_invalid_json_stays_visible_without_markup():
    r = check("hermes", "<tool_call>\nget_weather(Paris\n</tool_call>", content="\nget_weather(Paris\n")
    assert "<tool_call>" not in r.content


def test_hermes_arguments_as_json_string():
    check("hermes", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
          calls=[W])


def test_qwen3_thinking_when_the_prompt_opened_it():
    # the runner echoes the <think> the template put at the end of the prompt, so the parser sees it
    check("hermes", "<think>\nshort thought\n</think>\n\nParis is sunny.", thinking="short thought\n",
          content="Paris is sunny.")


def test_thinking_cut_off_is_all_thinking():
    check("hermes", "<think>\nstill thinking when num_predict ran out", thinking="still thinking when num_predict ran out")


def test_stray_think_close_never_leaks():
    check("hermes", "</think>\n\nHello", content="Hello")


def test_plain_reply_untouched():
    check("hermes", " Hello, world!  ", content=" Hello, world!  ")
    check("hermes", "Use <b>bold</b> and < or > freely", content="Use <b>bold</b> and < or > freely")


# ---- the fallback: a bare JSON reply that names a supplied tool ---------------------------------------------

def test_fallback_bare_json_names_supplied_tool():
    # what Qwen2.5-Coder-0.5B answered without its <tool_call> tags (the example)
    check("hermes", '{"name": "get_weather", "arguments": {"city": "Paris"}}', calls=[W])
    check("generic", '  {"name": "get_weather", "arguments": {"city": "Paris"}}\n', calls=[W])
    check("generic", '[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                     '{"name": "get_time", "arguments": {}}]', calls=[W, {"name": "get_time", "arguments": {}}])


def test_fallback_in_a_json_fence_and_openai_shape():
    check("generic", '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', calls=[W])
    check("generic", '{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
          calls=[W])


def test_fallback_needs_a_supplied_tool_name():
    text = '{"name": "Alice", "arguments": {"age": 3}}'
    check("generic", text, content=text)
    check("generic", text, content=text, tools=[])
    check("generic", '{"answer": 42}', content='{"answer": 42}')


def test_fallback_two_bare_calls_and_trailing_text():
    check("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}\n'
                    '{"name": "get_time", "parameters": {}} and that is all',
          calls=[W, {"name": "get_time", "arguments": {}}], content="and that is all")


def test_fallback_cut_off_json_is_mended():
    check("generic", '{"name": "get_weather", "arguments": {"city": "Paris"', calls=[W])


def test_json_not_at_start_is_content():
    text = 'Here: {"name": "get_weather", "arguments": {"city": "Paris"}}'
    check("generic", text, content=text)


# ---- Llama 3.x ----------------------------------------------------------------------------------------------

def test_llama3_json_and_python_tag():
    check("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', calls=[W])
    check("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', calls=[W])
    check("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                    '{"name": "get_time", "parameters": {"tz": "UTC"}}',
          calls=[W, {"name": "get_time", "arguments": {"tz": "UTC"}}])
    check("llama3", '<|python_tag|>brave_search.call(query="weather in Paris")',
          calls=[{"name": "brave_search", "arguments": {"query": "weather in Paris"}}])


# ---- Mistral ------------------------------------------------------------------------------------------------

def test_mistral_v3_array_with_ids():
    r = check("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}]',
              calls=[W])
    assert r.calls[0].id == "abc123XYZ"


def test_mistral_v11_name_args_and_two_calls():
    check("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}',
          calls=[W, {"name": "get_time", "arguments": {}}])
    check("mistral", '[THINK]Need the weather.[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"',
          thinking="Need the weather.", content="Sure.", calls=[W])


def test_mistral_broken_section_is_content():
    check("mistral", "[TOOL_CALLS]not a call", content="not a call")


# ---- DeepSeek -----------------------------------------------------------------------------------------------

B, E, S = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def test_deepseek_r1_and_v3_format():
    text = ("<think>\nweather lookup\n</think>\n\n<｜tool▁calls▁begin｜>" + B + "function" + S +
            'get_weather\n```json\n{"city": "Paris"}\n```' + E + B + "function" + S +
            'get_time\n```json\n{}\n```' + E + "<｜tool▁calls▁end｜>")
    check("deepseek", text, thinking="weather lookup\n", calls=[W, {"name": "get_time", "arguments": {}}])


def test_deepseek_v31_format_and_missing_end():
    check("deepseek", "<｜tool▁calls▁begin｜>" + B + "get_weather" + S + '{"city": "Paris"}' + E, calls=[W])
    check("deepseek", B + "get_weather" + S + '{"city": "Paris"}', calls=[W])


# ---- Gemma --------------------------------------------------------------------------------------------------

def test_functiongemma():
    check("functiongemma", "<start_function_call>call:get_weather{city:<escape>Paris<escape>}<end_function_call>",
          calls=[W])
    check("functiongemma", "<start_function_call>call:get_time{tz:<escape>UTC<escape>,offset:2,dst:true,"
                           "tags:[<escape>a<escape>,<escape>b<escape>]}",
          calls=[{"name": "get_time", "arguments": {"tz": "UTC", "offset": 2, "dst": True, "tags": ["a", "b"]}}])


def test_gemma3_tool_code_and_pythonic_list():
    check("pythonic", '```tool_code\nget_weather(city="Paris")\n```', calls=[W])
    check("pythonic", '[get_weather(city="Paris"), get_time(tz="UTC")]',
          calls=[W, {"name": "get_time", "arguments": {"tz": "UTC"}}])
    check("pythonic", "[1, 2, 3] are numbers", content="[1, 2, 3] are numbers")


def test_pythonic_never_runs_code():
    text = '[get_weather(city=__import__("os").system("true"))]'
    check("pythonic", text, content=text)


# ---- gpt-oss (harmony) --------------------------------------------------------------------------------------

def test_harmony_thinking_and_final():
    check("harmony", "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final"
                     "<|message|>Hello!", thinking="User says hi.", content="Hello!")


def test_harmony_tool_call_with_constrain():
    check("harmony", "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
                     'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>',
          thinking="Need weather.", calls=[W])


def test_harmony_recipient_in_header_and_cut_off_args():
    check("harmony", '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Par',
          calls=[{"name": "get_weather", "arguments": {"city": "Par"}}])


def test_harmony_without_markup_is_content():
    check("harmony", "Just words.", content="Just words.")


def test_a_call_cut_short_must_name_a_supplied_tool():
    """max_tokens can end a reply inside a call's name: the mended JSON names no tool, so it is not a call."""
    for family, text in (("hermes", '<tool_call>\n{"name": "get_wea'), ("llama3", '<|python_tag|>{"name": "get_'),
                         ("mistral", '[TOOL_CALLS][{"name": "get_ti')):
        d = parse_all(family, text, TOOLS)
        assert d.calls == [] and "get_" in d.content, (family, d)
    check("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
          calls=[{"name": "get_weather", "arguments": {"city": "Par"}}])


# ---- helpers ------------------------------------------------------------------------------------------------

def test_json_helpers():
    assert json_end('{"a": "}"} tail') == 10
    assert json_end('{"a": [1, 2') is None
    assert mend('{"a": [1, 2') == '{"a": [1, 2]}'
    assert mend('{"a": "x", ') == '{"a": "x"}'
    assert calls_from_text('{"name": "f", "arguments": [1]}') is None    # arguments must be an object


@pytest.mark.parametrize("family", ["hermes", "llama3", "mistral", "deepseek", "functiongemma", "pythonic",
                                    "harmony", "generic", "qwen3_coder"])
def test_every_family_passes_plain_text(family):
    text = "The weather in Paris is mild; bring a coat."
    check(family, text, content=text)


def test_qwen3_coder_xml():
    check("qwen3_coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                         "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
          calls=[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}])


def test_command_r_action_thinking_and_response_markup():
    check("command_r", '<|START_THINKING|>I need the weather.<|END_THINKING|><|START_ACTION|>[\n'
                       '{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}\n'
                       ']<|END_ACTION|>', thinking="I need the weather.", calls=[W])
    check("command_r", "<|START_RESPONSE|>It is sunny.<|END_RESPONSE|>", content="It is sunny.")


def test_llama4_python_start_section():
    check("llama3", '<|python_start|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|python_end|>',
          calls=[W])


def test_harmony_bare_json_call_from_a_forced_grammar():
    check("harmony", '{"name": "get_weather", "arguments": {"city": "Paris"}}', calls=[W])


# ---- random replies made of every family's markup -----------------------------------------------------------

FRAGMENTS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "{", "}", "[", "]", '"name"', ":", '"get_weather"',
             ",", '"arguments"', '{"city": "Paris"}', " ", "\n", "hello", "```", "json", "<|python_tag|>",
             "[TOOL_CALLS]", "[ARGS]", "<|channel|>", "analysis", "final", "<|message|>", "<|end|>", "<|start|>",
             " to=functions.get_weather", "<start_function_call>", "call:get_weather", "<escape>",
             "<end_function_call>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "[THINK]",
             "[/THINK]", "<|START_ACTION|>", "<|END_ACTION|>", "get_weather(", ")", "'", '"', "\\", "<", "|"]


@pytest.mark.parametrize("family", ["hermes", "qwen3_coder", "llama3", "mistral", "deepseek", "functiongemma",
                                    "pythonic", "harmony", "generic", "command_r"])
def test_random_markup_never_leaks_and_streaming_agrees(family):
    from app.engine.chat.formats import format_for
    rng = random.Random(family)
    for _ in range(400):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 25)))
        whole = parse_all(family, text, TOOLS)
        leaked = [m for m in format_for(family).shown if m in whole.content]
        assert not leaked, (text, whole.content)
        s_content, s_thinking, s_calls = streamed(family, text)
        assert (s_content, s_thinking, [(c.name, c.arguments) for c in s_calls]) == \
            (whole.content, whole.thinking, [(c.name, c.arguments) for c in whole.calls]), text


# ---- forms small models write (Qwen2.5-Coder-0.5B under agent frameworks) -----------------------------------

def test_react_action_label_before_a_call():
    # smolagents' ToolCallingAgent prompt teaches `Action:` + a JSON blob; the model answers that way on every dialect
    text = 'Action:\n{\n    "name": "get_weather",\n    "arguments": {"city": "Paris"}\n}\n'
    check("hermes", text, calls=[W])
    check("generic", "  Action: " + text[len("Action:\n"):], calls=[W])
    check("hermes", 'Action:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', calls=[W])


def test_react_action_label_needs_a_supplied_tool_and_a_call():
    # a name that is not a tool (the 0.5B model's `weather_interpreter`), prose after the label, the label alone
    bad = 'Action:\n{"name": "weather_interpreter", "arguments": {"location": "Paris"}}'
    check("hermes", bad, content=bad)
    check("hermes", "Action: none needed, it is sunny.", content="Action: none needed, it is sunny.")
    check("hermes", "Action:", content="Action:")
    check("hermes", "Act now.", content="Act now.")


def test_stray_character_glued_to_a_call():
    # '>{"' is one token of Qwen's vocabulary; a repeat penalty on '{"' makes it the greedy pick after a few calls
    check("hermes", '>{"name": "get_weather", "arguments": {"city": "Paris"}}\n', calls=[W])
    check("hermes", '<tool_call>>{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', calls=[W])
    check("hermes", ',{"name": "get_weather", "arguments": {"city": "Paris"}}', calls=[W])
    # not a tool, or not glued: content as written
    check("hermes", '>{"name": "Alice"}', content='>{"name": "Alice"}')
    check("hermes", '> quoted {"name": "get_weather"}', content='> quoted {"name": "get_weather"}')
    check("hermes", ">", content=">")
