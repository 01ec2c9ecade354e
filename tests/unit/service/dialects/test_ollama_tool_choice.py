"""`tool_choice` on Ollama's /api/chat: Ollama's API has no such field and ignores it, but the AI SDK's
ollama-ai-provider-v2 sends the AI SDK's choices there ("required" from `prepareStep`, "none", "auto", a named
tool as {"type": "function", "name"}), and OpenAI-minded clients send OpenAI's shape. Strata honours them as on
/v1 (a forced call through the grammar); what it cannot honour is ignored, as Ollama ignores it: never a 400."""
from __future__ import annotations

import pytest

from app.engine.chat.plan import plan_chat
from app.service.dialects.ollama.parse import parse_chat

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]
MSG = [{"role": "user", "content": "What is the weather in San Francisco?"}]


def chat(**body):
    return parse_chat({"model": "m", "messages": MSG, **body})


@pytest.mark.parametrize("raw, want", [
    ("required", "required"), ("auto", "auto"), ("none", "none"),
    ({"type": "function", "name": "weather"}, "weather"),                   # ollama-ai-provider-v2's named tool
    ({"type": "function", "function": {"name": "weather"}}, "weather"),     # OpenAI's
])
def test_choices_clients_send_are_honoured(raw, want):
    req = chat(tools=TOOLS, tool_choice=raw)
    assert req.tool_choice == want
    plan = plan_chat("hermes", req.tools, req.tool_choice)
    assert plan.forced == (want not in ("auto", "none")) and plan.tools == (want != "none")


@pytest.mark.parametrize("raw", [
    {"type": "web_search_preview"}, "any", 3, {"type": "function", "name": "not_a_tool"}, [], None])
def test_what_cannot_be_honoured_is_ignored_like_ollama(raw):
    req = chat(tools=TOOLS, tool_choice=raw)
    assert req.tool_choice is None
    assert plan_chat("hermes", req.tools, req.tool_choice).tool_choice == "auto"


def test_required_without_tools_is_ignored():
    assert chat(tool_choice="required").tool_choice is None
