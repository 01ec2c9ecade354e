"""Tools in requests: shapes normalised for chat templates, and bad input refused with a 400 naming the field."""
from __future__ import annotations

import pytest

from app.engine.chat.formats import format_for
from app.service.http.errors import ApiError
from app.service.generation.tools import check_tool_results, parse_tool_calls, parse_tool_choice, parse_tools

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "d",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def refused(fn, *args, match, param):
    with pytest.raises(ApiError) as e:
        fn(*args)
    assert e.value.status == 400 and e.value.param == param
    assert match in e.value.message, e.value.message


def test_tools_shapes():
    assert parse_tools([WEATHER]) == [WEATHER]
    flat = parse_tools([{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    assert flat == [{"type": "function", "function": {"name": "f", "description": "", "parameters": {"type": "object"}}}]
    assert parse_tools(None) is None and parse_tools([]) is None


def test_tool_without_name_or_with_bad_parameters():
    refused(parse_tools, [{"type": "function", "function": {"description": "x"}}],
            match="tools[0].function.name is required", param="tools")
    refused(parse_tools, [{"type": "function", "function": {"name": "f", "parameters": "x"}}],
            match="parameters must be a JSON schema object", param="tools")
    refused(parse_tools, [{"type": "retrieval"}], match="not supported", param="tools")
    refused(parse_tools, [WEATHER, WEATHER], match="two tools are named", param="tools")


def test_tool_choice():
    tools = [WEATHER]
    assert parse_tool_choice(None, tools) is None
    assert parse_tool_choice("required", tools) == "required"
    assert parse_tool_choice({"type": "function", "function": {"name": "get_weather"}}, tools) == "get_weather"
    refused(parse_tool_choice, "sometimes", tools, match="must be one of none, auto, required", param="tool_choice")
    refused(parse_tool_choice, {"type": "function", "function": {"name": "nope"}}, tools,
            match="not among the tools", param="tool_choice")
    refused(parse_tool_choice, "required", None, match="no tools were given", param="tool_choice")


def test_tool_calls_arguments_become_objects():
    calls = parse_tool_calls([{"id": "call_1", "type": "function",
                               "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}],
                             "messages[1]", "messages")
    assert calls == [{"id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    ollama_shape = parse_tool_calls([{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
                                    "messages[1]", "messages")
    assert ollama_shape[0]["id"].startswith("call_")
    refused(parse_tool_calls, [{"function": {"name": "f", "arguments": [1, 2]}}], "messages[1]", "messages",
            match="messages[1].tool_calls[0].function.arguments must be an object", param="messages")
    refused(parse_tool_calls, [{"function": {"name": "f", "arguments": "not json"}}], "messages[1]", "messages",
            match="arguments must be a JSON object", param="messages")


def test_tool_results_must_answer_a_call():
    call = parse_tool_calls([{"id": "call_1", "function": {"name": "get_weather", "arguments": {}}}], "m", "messages")
    msgs = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "", "tool_calls": call},
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}]
    check_tool_results(msgs)
    assert msgs[2]["name"] == "get_weather"
    by_name = [msgs[0], msgs[1], {"role": "tool", "content": "sunny", "name": "get_weather"}]
    check_tool_results(by_name)
    assert by_name[2]["tool_call_id"] == "call_1"
    refused(check_tool_results, [msgs[0], msgs[1], {"role": "tool", "content": "x", "tool_call_id": "call_9"}],
            match="tool_call_id 'call_9'", param="messages")
    refused(check_tool_results, [msgs[0], {"role": "tool", "content": "x"}],
            match="no earlier assistant message made a tool call", param="messages")
    refused(check_tool_results, [msgs[0], msgs[1], {"role": "tool", "content": "x", "name": "other"}],
            match="tool 'other'", param="messages")


def test_mistral_ids_are_nine_alnum_and_consistent():
    call = parse_tool_calls([{"id": "call_abcdef0123", "function": {"name": "f", "arguments": {}}}], "m", "messages")
    out = format_for("mistral").prepare_messages([{"role": "assistant", "content": "", "tool_calls": call},
                                                  {"role": "tool", "content": "r", "tool_call_id": "call_abcdef0123"}])
    cid = out[0]["tool_calls"][0]["id"]
    assert len(cid) == 9 and cid.isalnum() and out[1]["tool_call_id"] == cid
