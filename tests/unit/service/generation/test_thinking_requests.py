"""Thinking asked of a model: a preference (OpenAI, Responses, Anthropic) is dropped by a model that cannot think,
a requirement (Ollama's `think`) is refused with a 400 naming it; a thinking model keeps either."""
from __future__ import annotations

import pytest

from app.engine.gguf.chat_facts import ChatFacts
from app.engine.chat.plan import plan_chat
from app.service.generation import chat_features
from app.service.generation.request import GenerationRequest
from app.service.http.errors import ApiError

PLAIN = ChatFacts("t", "gguf", "", "hermes", ("completion", "tools"))
THINKER = ChatFacts("t", "gguf", "", "hermes", ("completion", "tools", "thinking"), think_open="<think>")


def request(think, mode: str, budget: int | None = None) -> GenerationRequest:
    req = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], think=think,
                            think_budget=budget)
    req.think_mode = mode
    return req


@pytest.mark.parametrize("think", [True, "low", "high"])
def test_a_preference_is_dropped_by_a_model_that_cannot_think(think):
    req = request(think, "prefer", 2048)
    chat_features.settle_thinking(req, PLAIN)
    assert req.think is None and req.think_budget is None
    chat_features.check(req, PLAIN, plan_chat("hermes", None, None, True), "m")     # no 400
    assert chat_features.template_kwargs(req.think, PLAIN) == {}


def test_a_thinking_model_keeps_a_preference():
    req = request("medium", "prefer", 2048)
    chat_features.settle_thinking(req, THINKER)
    assert req.think == "medium" and req.think_budget == 2048


def test_turning_thinking_off_stays_whatever_the_model():
    req = request(False, "prefer")
    chat_features.settle_thinking(req, PLAIN)
    assert req.think is False


def test_a_requirement_on_a_model_that_cannot_think_is_a_400():
    req = request(True, "require")
    chat_features.settle_thinking(req, PLAIN)
    with pytest.raises(ApiError) as e:
        chat_features.check(req, PLAIN, plan_chat("hermes", None, None, True), "m")
    assert e.value.status == 400 and e.value.param == "think" and "does not support thinking" in e.value.message


# a Mistral reasoning template: its own `thinking` switch, not Qwen3's enable_thinking
MISTRAL_THINKING = ("{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}"
                    "{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}"
                    "{% if thinking is not defined or thinking %}[THINK]{% endif %}[TOOL_CALLS]")


@pytest.mark.parametrize("think, thinks", [(False, False), (True, True), ("high", True)])
def test_the_switch_the_template_names_is_the_one_set(think, thinks):
    """The family's own switch (ChatFacts.think_toggle, read from the template) is what `think` sets, so a Mistral
    template that reads `thinking` is turned off by think: false as Qwen3's is by enable_thinking."""
    from app.engine.gguf.chat_facts import chat_facts
    from app.engine.runner.prompt.chat_template import render_chat

    facts = chat_facts("llama", MISTRAL_THINKING, {"[INST]", "[TOOL_CALLS]"})
    assert facts.family == "mistral" and facts.think_toggle == "thinking"
    kwargs = chat_features.template_kwargs(think, facts)
    rendered = render_chat(facts.template, [{"role": "user", "content": "hi"}], template_kwargs=kwargs)
    assert ("[THINK]" in rendered) is thinks
