"""Tools, tool calls and tool results rendered into real GGUF chat templates (tests/support/fixtures/templates, copied
from the models' tokenizer configs) in the shapes Hugging Face templates expect; family and thinking switches."""
from __future__ import annotations


import pytest

from app.engine.chat.formats import format_for
from app.engine.gguf.chat_facts import chat_facts
from app.engine.runner.prompt.chat_template import render_chat
from app.service.generation.tools import call_message
from repo_paths import TEMPLATES

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [call_message("get_weather", {"city": "Paris"}, "call_1")]},
    {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call_1", "name": "get_weather"},
]

# template file -> (family, capabilities)
EXPECTED = {
    "Qwen-Qwen3-0.6B.jinja": ("hermes", ("completion", "tools", "thinking")),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3", ("completion", "tools")),
    "meta-llama-Llama-4-Scout-17B-16E-Instruct.jinja": ("llama3", ("completion", "tools")),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek", ("completion", "tools", "thinking")),
    "openai-gpt-oss-120b.jinja": ("harmony", ("completion", "tools", "thinking")),
    "ibm-granite-granite-4.0.jinja": ("hermes", ("completion", "tools")),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": ("command_r", ("completion", "tools", "thinking")),
    "google-gemma-3-it.jinja": ("generic", ("completion",)),
}


def template(name: str) -> str:
    return (TEMPLATES / name).read_text()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_family_and_capabilities_of_real_templates(name):
    f = chat_facts("x", template(name), set())
    assert (f.family, f.capabilities) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(n for n, (_, caps) in EXPECTED.items() if "tools" in caps))
def test_tools_calls_and_results_render(name):
    tpl = template(name)
    text = render_chat(tpl, CONVERSATION, bos_token="<s>", eos_token="</s>",
                       tools=TOOLS if chat_facts("x", tpl, set()).renders_tools else None)
    assert "get_weather" in text
    assert "Paris" in text and "sunny, 21C" in text
    # the call's arguments went in as an object: templates print them as JSON, never as a quoted string
    assert '\\"city\\"' not in text and "{'city'" not in text


def test_qwen3_thinking_switch():
    tpl = template("Qwen-Qwen3-0.6B.jinja")
    msgs = [{"role": "user", "content": "hi"}]
    off = render_chat(tpl, msgs, template_kwargs={"enable_thinking": False})
    on = render_chat(tpl, msgs, template_kwargs={"enable_thinking": True})
    assert off.endswith("<think>\n\n</think>\n\n") and not on.endswith("</think>\n\n")


def test_gpt_oss_reasoning_effort():
    tpl = template("openai-gpt-oss-120b.jinja")
    text = render_chat(tpl, [{"role": "user", "content": "hi"}], template_kwargs={"reasoning_effort": "high"})
    assert "Reasoning: high" in text and text.endswith("<|start|>assistant")


def test_unknown_template_kwargs_are_not_passed():
    assert render_chat("{{ messages | length }}{{ bos_token }}", [{"role": "user", "content": "x"}],
                       bos_token="B", template_kwargs={"bos_token": "evil", "enable_thinking": True}) == "1B"


def test_mistral_ids():
    msgs = format_for("mistral").prepare_messages(CONVERSATION)
    assert len(msgs[2]["tool_calls"][0]["id"]) == 9 and msgs[3]["tool_call_id"] == msgs[2]["tool_calls"][0]["id"]
