"""The Anthropic dialect's parse, field by field, for what Claude Code and the `anthropic` client send: each field is
served (turned into the internal request) or ignored as Anthropic's API ignores it for a model without that
feature; a malformed value is a 400 naming the field. The recorded Claude Code requests themselves are parsed
here too (tests/support/fixtures/agents/claude-code/), and replayed on a live server in
tests/integration/service/test_agent_replay_claude.py."""
from __future__ import annotations

import json

import pytest

from app.service.dialects.anthropic.parse import parse_messages_request
from app.service.http.errors import ApiError
from repo_paths import FIXTURES

ASK = [{"role": "user", "content": "hi"}]
RECORDED = sorted((FIXTURES / "agents" / "claude-code").glob("*.json"))


def parse(**body):
    return parse_messages_request({"model": "m", "max_tokens": 64, "messages": ASK, **body})[0]


def refused(field: str, **body) -> str:
    with pytest.raises(ApiError) as e:
        parse(**body)
    assert e.value.status == 400 and field in str(e.value), (field, str(e.value))
    return str(e.value)


def test_system_turns_inside_messages_stay_at_their_place():
    req = parse(messages=[{"role": "user", "content": "a"},
                          {"role": "system", "content": "agents: Explore"},
                          {"role": "assistant", "content": "b"},
                          {"role": "system", "content": [{"type": "text", "text": "be brief",
                                                          "cache_control": {"type": "ephemeral"}}]},
                          {"role": "user", "content": "c"}],
                system="top")
    assert [(m["role"], m["content"]) for m in req.messages] == [
        ("system", "top"), ("user", "a"), ("system", "agents: Explore"), ("assistant", "b"),
        ("system", "be brief"), ("user", "c")]
    refused("messages[1].role", messages=ASK + [{"role": "robot", "content": "x"}])
    refused("messages[0].content[0]", messages=[{"role": "system", "content": [{"type": "image"}]}])


def test_system_blocks_with_cache_control_and_without_the_billing_block():
    req = parse(system=[
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197.2bb; cc_entrypoint=sdk-cli; cch=1f;"},
        {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "\nBe careful."}])
    assert req.messages[0] == {"role": "system", "content": "You are an agent.\nBe careful."}
    as_string = parse(system="x-anthropic-billing-header: cc_version=1; cch=2;\nYou are an agent.")
    assert as_string.messages[0]["content"] == "You are an agent."
    refused("system", system=[{"type": "image", "source": {}}])
    refused("system", system=7)


@pytest.mark.parametrize("thinking, think, budget", [
    (None, None, None), ({"type": "adaptive"}, True, None), ({"type": "disabled"}, False, None),
    ({"type": "enabled", "budget_tokens": 1024}, True, 1024),
    ({"type": "enabled", "budget_tokens": 2048, "display": "summarized"}, True, 2048)])
def test_thinking_forms(thinking, think, budget):
    req = parse(thinking=thinking, max_tokens=4096)
    assert (req.think, req.think_budget) == (think, budget)
    assert req.think_mode == "prefer"            # a model that cannot think answers without (chat_features)


def test_malformed_thinking_is_a_400_naming_the_field():
    refused("thinking.type", thinking={"type": "sometimes"})
    refused("thinking.type", thinking="adaptive")
    refused("budget_tokens", thinking={"type": "enabled"})
    refused("budget_tokens", thinking={"type": "enabled", "budget_tokens": 100})


@pytest.mark.parametrize("effort, think", [("low", "low"), ("medium", "medium"), ("high", "high"),
                                           ("xhigh", "high"), ("max", "high")])
def test_output_config_effort_steers_adaptive_thinking(effort, think):
    assert parse(output_config={"effort": effort}, thinking={"type": "adaptive"}).think == think
    assert parse(output_config={"effort": effort}).think is None
    assert parse(output_config={"effort": effort}, thinking={"type": "disabled"}).think is False


def test_output_config_format_is_structured_output():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert parse(output_config={"format": {"type": "json_schema", "schema": schema}}).json_schema == schema
    assert parse(output_format={"type": "json_schema", "schema": schema}).json_schema == schema
    refused("output_config.format", output_config={"format": {"type": "json_schema"}})
    refused("output_config.effort", output_config={"effort": "extreme"})
    refused("output_config", output_config="high")


def test_fields_for_anthropics_servers_are_ignored_but_checked():
    req = parse(metadata={"user_id": "{\"device_id\": \"d\"}"},
                context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                service_tier="auto", container=None)
    assert req.messages == [{"role": "user", "content": "hi"}]
    refused("metadata", metadata="me")
    refused("metadata.user_id", metadata={"user_id": 5})
    refused("context_management.edits", context_management={"edits": "all"})
    refused("service_tier", service_tier="fastest")


def test_tools_with_cache_control_and_tool_choice_forms():
    tools = [{"name": "Write", "description": "write a file", "cache_control": {"type": "ephemeral"},
              "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
             {"type": "custom", "name": "Read", "input_schema": {"type": "object"}, "strict": True}]
    assert [t["function"]["name"] for t in parse(tools=tools).tools] == ["Write", "Read"]
    for choice, internal, parallel in (({"type": "auto"}, "auto", True), ({"type": "any"}, "required", True),
                                       ({"type": "tool", "name": "Read"}, "Read", True),
                                       ({"type": "none"}, "none", True),
                                       ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False)):
        req = parse(tools=tools, tool_choice=choice)
        assert (req.tool_choice, req.parallel_tool_calls) == (internal, parallel), choice
    refused("tool_choice", tools=tools, tool_choice={"type": "tool", "name": "Bash"})
    refused("tool_choice", tools=tools, tool_choice="auto")
    refused("tools[0].type", tools=[{"type": "function", "name": "f", "input_schema": {"type": "object"}}])


def test_anthropic_defined_tools_are_left_out_and_named():
    """Server tools (web search, code execution...) and tools whose schema is built into Claude (bash, the text
    editor) cannot be offered to a local model: left out, named in X-Strata-Dropped-Tools, never a 400."""
    write = {"name": "Write", "input_schema": {"type": "object"}}
    req = parse(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
                       {"type": "bash_20250124", "name": "bash"}, write,
                       {"type": "code_execution_20250825", "name": "code_execution"}])
    assert [t["function"]["name"] for t in req.tools] == ["Write"]
    assert req.dropped_tools == ["web_search", "bash", "code_execution"]
    only = parse(tools=[{"type": "web_search_20250305", "name": "web_search"}],
                 tool_choice={"type": "tool", "name": "web_search"})
    assert only.tools is None and only.tool_choice is None and only.dropped_tools == ["web_search"]
    named = parse(tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}, write],
                  tool_choice={"type": "tool", "name": "web_fetch"})
    assert named.tool_choice == "auto"


def test_stream_max_tokens_and_count_tokens_body():
    req = parse(stream=True, max_tokens=32000, stop_sequences=["\n\nHuman:"])
    assert req.stream and req.options["num_predict"] == 32000 and req.options["stop"] == ["\n\nHuman:"]
    refused("max_tokens", max_tokens=None)
    refused("stream", stream="yes")
    counted, _ = parse_messages_request({"model": "m", "messages": ASK, "thinking": {"type": "adaptive"},
                                         "output_config": {"effort": "high"}, "stream": True}, count_only=True)
    assert counted.messages == [{"role": "user", "content": "hi"}]


def test_text_documents_are_read_and_others_refused():
    req = parse(messages=[{"role": "user", "content": [
        {"type": "document", "title": "notes.txt", "source": {"type": "text", "media_type": "text/plain",
                                                              "data": "alpha"}},
        {"type": "text", "text": "summarise"}]}])
    assert req.messages == [{"role": "user", "content": "notes.txt\n\nalphasummarise"}]
    refused("messages[0].content[0]", messages=[{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA=="}}]}])


def test_tool_results_and_reminders_in_one_user_turn():
    req = parse(messages=[
        {"role": "user", "content": "make hello.txt"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "toolu_1",
                                                                           "name": "Write", "input": {"a": 1}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "done"}],
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "<system-reminder>x</system-reminder>"}]}],
        tools=[{"name": "Write", "input_schema": {"type": "object"}}])
    assert [m["role"] for m in req.messages] == ["user", "assistant", "tool", "user"]
    assert req.messages[2]["content"] == "done" and req.messages[2]["tool_call_id"] == "toolu_1"


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
def test_every_recorded_claude_code_request_parses(path):
    rec = json.loads(path.read_text(encoding="utf-8"))["request"]
    body = rec["body"]["json"]
    req, _ = parse_messages_request(body, count_only=rec["path"].endswith("/count_tokens"))
    assert req.messages and req.messages[-1]["role"] in ("user", "system", "tool", "assistant")
    assert not any(m["role"] == "system" and m["content"].startswith("x-anthropic-billing-header")
                   for m in req.messages)
