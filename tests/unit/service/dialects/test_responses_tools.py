"""The Responses dialect as Codex drives it, parse and render in-process, one field at a time: namespace groups
flattened and their calls given back with `namespace`, custom (freeform) tools served as a function of one
string and their calls given back as `custom_tool_call`, hosted tools left out and named, every other field
Codex sends accepted (docs/agents.md has the field table)."""
from __future__ import annotations

import json

import pytest

from app.service.dialects.responses import parse as rp
from app.service.dialects.responses.render import ResponsesRenderer, custom_input
from app.service.generation.result import Finished, GenerationResult, ToolCallEvent
from app.service.http.errors import ApiError

MODEL = "coder:0.5b"
EXEC = {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
AGENTS = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents", "tools": [
    {"type": "function", "name": "spawn_agent", "description": "Start one", "strict": False,
     "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}},
    {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}]}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files",
         "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end_patch"}}
FREE = {"type": "custom", "name": "note", "description": "Free text"}
SEARCH = {"type": "web_search", "external_web_access": False}


def parse(**body):
    return rp.parse_responses({"model": MODEL, "input": "create hello.txt", **body})


def refused(match: str, param: str, **body) -> None:
    with pytest.raises(ApiError) as e:
        parse(**body)
    assert e.value.status == 400 and e.value.param == param and match in e.value.message, e.value.message


def names(req) -> list[str]:
    return [t["function"]["name"] for t in req.tools or ()]


# ---- tools ----------------------------------------------------------------------------------------------------

def test_namespace_members_are_flattened_with_their_namespace():
    req, wire = parse(tools=[EXEC, AGENTS])
    assert names(req) == ["exec_command", "multi_agent_v1.spawn_agent", "multi_agent_v1.close_agent"]
    assert req.tools[1]["function"]["parameters"]["properties"] == {"task": {"type": "string"}}
    assert wire.wire_tool("multi_agent_v1.spawn_agent") == rp.WireTool("spawn_agent", "multi_agent_v1")
    assert wire.wire_tool("exec_command") == rp.WireTool("exec_command")


def test_custom_tools_are_one_string_with_their_grammar_described():
    req, wire = parse(tools=[PATCH, FREE])
    patch, free = req.tools
    assert patch["function"]["name"] == "apply_patch" and patch["function"]["description"] == "Edit files"
    schema = patch["function"]["parameters"]
    assert schema["required"] == ["input"] and schema["properties"]["input"]["type"] == "string"
    assert "lark" in schema["properties"]["input"]["description"]
    assert "begin_patch hunk+" in schema["properties"]["input"]["description"]
    assert free["function"]["parameters"]["properties"]["input"]["description"] == "The tool's input, as plain text."
    assert wire.wire_tool("apply_patch") == rp.WireTool("apply_patch", None, custom=True)


def test_hosted_tools_are_dropped_and_named_never_a_400():
    req, _ = parse(tools=[EXEC, SEARCH, {"type": "web_search_preview_2025_03_11"}, {"type": "file_search"},
                          {"type": "image_generation"}, {"type": "code_interpreter", "container": {}}, SEARCH])
    assert names(req) == ["exec_command"]
    assert req.dropped_tools == ["web_search", "web_search_preview_2025_03_11", "file_search", "image_generation",
                                 "code_interpreter"]
    only_hosted, _ = parse(tools=[SEARCH], tool_choice="auto")
    assert only_hosted.tools is None and only_hosted.tool_choice is None and only_hosted.dropped_tools == ["web_search"]


def test_bad_tools_are_400s_naming_the_field():
    refused("not supported", "tools", tools=[{"type": "retrieval"}])
    refused("tools[0].tools must be an array", "tools", tools=[{"type": "namespace", "name": "ns"}])
    refused("tools[0].name is required", "tools", tools=[{"type": "namespace", "tools": []}])
    refused("tools[0].format must be", "tools", tools=[{**PATCH, "format": "lark"}])
    refused("two tools are named 'exec_command'", "tools", tools=[EXEC, EXEC])
    refused("tools[1].tools[0].name is required", "tools",
            tools=[EXEC, {"type": "namespace", "name": "ns", "tools": [{"type": "function"}]}])


def test_tool_choice_names_functions_custom_tools_and_namespace_members():
    tools = [EXEC, AGENTS, PATCH, SEARCH]
    assert parse(tools=tools, tool_choice="auto")[0].tool_choice == "auto"
    assert parse(tools=tools, tool_choice={"type": "custom", "name": "apply_patch"})[0].tool_choice == "apply_patch"
    named = parse(tools=tools, tool_choice={"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"})
    assert named[0].tool_choice == "multi_agent_v1.spawn_agent"
    assert parse(tools=tools, tool_choice={"type": "web_search"})[0].tool_choice is None
    allowed, _ = parse(tools=tools, tool_choice={"type": "allowed_tools", "mode": "required",
                                                 "tools": [{"type": "function", "name": "exec_command"}]})
    assert allowed.tool_choice == "required" and names(allowed) == ["exec_command"]
    refused("not among the tools", "tool_choice", tools=tools, tool_choice={"type": "function", "name": "nope"})


# ---- input items ----------------------------------------------------------------------------------------------

def test_input_items_codex_sends_back():
    req, _ = parse(tools=[EXEC, AGENTS, PATCH], instructions="Be brief.", input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "create hello.txt"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": None},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\": \"ls\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "README.md"},
        {"type": "function_call", "call_id": "c2", "name": "spawn_agent", "namespace": "multi_agent_v1",
         "arguments": ""},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "agent 7"}]},
        {"type": "custom_tool_call", "call_id": "c3", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": "Done"},
        {"type": "function_call_output", "name": "goal_objective", "namespace": "agent", "output": "Make hello.txt"},
        {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "x"}},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Created."}]}])
    m = req.messages
    assert [x["role"] for x in m] == ["system", "system", "user", "assistant", "tool", "assistant", "tool",
                                      "assistant", "tool", "user", "assistant"]
    assert m[0]["content"] == "Be brief." and m[1]["content"] == "You are Codex."
    assert m[3]["tool_calls"][0]["function"] == {"name": "exec_command", "arguments": {"cmd": "ls"}}
    assert m[5]["tool_calls"][0]["function"] == {"name": "multi_agent_v1.spawn_agent", "arguments": {}}
    assert m[6] == {"role": "tool", "content": "agent 7", "tool_call_id": "c2", "name": "multi_agent_v1.spawn_agent"}
    assert m[7]["tool_calls"][0]["function"] == {"name": "apply_patch", "arguments": {"input": "*** Begin Patch"}}
    assert m[8]["content"] == "Done" and m[8]["name"] == "apply_patch"
    assert m[9] == {"role": "user", "content": "[agent.goal_objective]\nMake hello.txt"}    # answers no call


def test_bad_input_items_are_400s_naming_input():
    refused("input[0].call_id is required", "input", input=[{"type": "custom_tool_call", "name": "p", "input": ""}])
    refused("input[0].input must be a string", "input",
            input=[{"type": "custom_tool_call", "call_id": "c", "name": "p", "input": {"a": 1}}])
    refused("no earlier assistant message made that call", "input",
            input=[{"type": "custom_tool_call_output", "call_id": "c9", "output": "x"}])
    refused("is not supported", "input", input=[{"type": "teleport"}])


# ---- other fields ---------------------------------------------------------------------------------------------

def test_the_fields_codex_sends_are_accepted():
    req, wire = parse(stream=True, tool_choice="auto", parallel_tool_calls=True, tools=[EXEC],
                      reasoning={"summary": "auto"}, store=False, include=["reasoning.encrypted_content"],
                      prompt_cache_key="01a21c75", client_metadata={"turn_id": "t"}, text={"verbosity": "low"},
                      service_tier="auto", truncation="auto", user="u", safety_identifier="s", metadata={"k": "v"},
                      stream_options={"include_obfuscation": False}, max_tool_calls=4, top_logprobs=0)
    assert req.stream and req.think is True and req.think_mode == "prefer"
    assert wire.summary == "auto" and wire.verbosity == "low" and wire.metadata == {"k": "v"}
    effort, _ = parse(reasoning={"effort": "xhigh", "summary": "detailed"})
    assert effort.think == "high"
    off, _ = parse(reasoning={"effort": "none"})
    assert off.think is False


def test_what_needs_stored_state_is_a_400_naming_it():
    refused("stateless", "previous_response_id", previous_response_id="resp_1")
    refused("stateless", "conversation", conversation="conv_1")
    refused("stateless", "background", background=True)
    refused("stored prompts", "prompt", prompt={"id": "pmpt_1"})
    refused("'reasoning.summary' must be one of", "reasoning", reasoning={"summary": "long"})
    refused("'text.verbosity' must be one of", "text", text={"verbosity": "loud"})


# ---- render ---------------------------------------------------------------------------------------------------

def result_of(*events) -> GenerationResult:
    res = GenerationResult(model=MODEL)
    for ev in events:
        res.add(ev)
    return res


CALLS = (ToolCallEvent(0, "call_1", "multi_agent_v1.spawn_agent", {"task": "look"}),
         ToolCallEvent(1, "call_2", "apply_patch", {"input": "*** Begin Patch\n*** End Patch"}),
         ToolCallEvent(2, "call_3", "exec_command", {"cmd": "echo hi > hello.txt"}),
         Finished(reason="tool_calls", prompt_tokens=10, completion_tokens=5, prompt_seconds=0.1,
                  generation_seconds=0.2))


def test_calls_come_back_in_their_wire_shapes():
    _, wire = parse(tools=[EXEC, AGENTS, PATCH])
    out = ResponsesRenderer(MODEL, wire).complete(result_of(*CALLS))["output"]
    assert [o["type"] for o in out] == ["function_call", "custom_tool_call", "function_call"]
    assert out[0]["name"] == "spawn_agent" and out[0]["namespace"] == "multi_agent_v1"
    assert json.loads(out[0]["arguments"]) == {"task": "look"} and out[0]["call_id"] == "call_1"
    assert out[1] == {"type": "custom_tool_call", "id": out[1]["id"], "call_id": "call_2", "name": "apply_patch",
                      "input": "*** Begin Patch\n*** End Patch", "status": "completed"}
    assert "namespace" not in out[2] and out[2]["name"] == "exec_command"


def test_streamed_calls_open_and_close_their_items():
    _, wire = parse(tools=[EXEC, AGENTS, PATCH], stream=True)
    r = ResponsesRenderer(MODEL, wire)
    frames = list(r.opening())
    for ev in CALLS[:3]:
        frames += r.tool_call(ev)
    frames += r.closing(result_of(*CALLS))
    kinds = [f.data["type"] for f in frames]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3
    custom = [f.data for f in frames if f.data["type"].startswith("response.custom_tool_call_input")]
    assert [c["type"] for c in custom] == ["response.custom_tool_call_input.delta",
                                           "response.custom_tool_call_input.done"]
    assert custom[1]["input"] == "*** Begin Patch\n*** End Patch"
    done = [f.data["item"] for f in frames if f.data["type"] == "response.output_item.done"]
    assert [d["call_id"] for d in done] == ["call_1", "call_2", "call_3"]
    assert done[0]["namespace"] == "multi_agent_v1" and done[1]["type"] == "custom_tool_call"
    assert [f.data["sequence_number"] for f in frames] == list(range(len(frames)))
    final = frames[-1].data["response"]
    assert [o["type"] for o in final["output"]] == ["function_call", "custom_tool_call", "function_call"]
    assert final["reasoning"] == {"effort": None, "summary": None} and final["store"] is False


def test_custom_input_from_what_a_model_wrote():
    assert custom_input({"input": "x"}) == "x"
    assert custom_input({"patch": "y"}) == "y"                     # one string under another name
    assert custom_input({"a": 1, "b": "z"}) == '{"a": 1, "b": "z"}'


def test_an_empty_reply_is_an_empty_message_streamed_or_not():
    _, wire = parse(stream=True)
    end = Finished(reason="stop", prompt_tokens=10, completion_tokens=1, prompt_seconds=0.1, generation_seconds=0.1)
    r = ResponsesRenderer(MODEL, wire)
    frames = list(r.opening()) + list(r.closing(result_of(end)))
    final = frames[-1].data["response"]
    whole = ResponsesRenderer(MODEL, wire).complete(result_of(end))
    assert [o["type"] for o in final["output"]] == [o["type"] for o in whole["output"]] == ["message"]
    assert final["output"][0]["content"][0]["text"] == "" and final["output"][0]["status"] == "completed"
