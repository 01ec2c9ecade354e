"""The service's per-request chat plan (engine/chat/plan.py): tools in use and the grammar decided once, and the
grammar's trigger and the reply parser taken from the same family record."""
from __future__ import annotations

import json

import pytest

from app.engine.chat.formats import FORMATS, format_for
from app.engine.chat.plan import EITHER, FORCED, LAZY, plan_chat
from app.engine.gguf.chat_facts import chat_facts
from app.service.generation import chat_features
from app.service.generation.request import GenerationRequest
from app.service.generation.result import TextDelta, ToolCallEvent
from app.service.generation.toolcalls import parse_all

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QWEN_TEMPLATE = "{% for tool in tools %}{{ tool }}{% endfor %}<tool_call>{{ messages }}</tool_call>"


@pytest.mark.parametrize("family", [f for f, rec in FORMATS.items() if rec.grammar and rec.grammar.opener])
def test_the_grammar_trigger_opens_a_section_the_parser_reads(family):
    plan = plan_chat(family, [WEATHER], "auto")
    assert (plan.grammar, plan.parser) == (LAZY, family)
    shape, record = format_for(plan.family).grammar, format_for(plan.parser)
    assert plan.trigger == shape.opener and plan.trigger in [s.start for s in record.sections]
    call = json.dumps({"name": "get_weather", shape.args_key: {"city": "Paris"}})
    text = f"{plan.trigger}{'[' + call + ']' if shape.listed else call}{shape.closer}"
    d = parse_all(plan.parser, text, ["get_weather"])
    assert [(c.name, c.arguments) for c in d.calls] == [("get_weather", {"city": "Paris"})], text
    assert d.content == ""


def test_the_service_plans_from_the_gguf_family_and_its_reader_parses_with_it():
    facts = chat_facts("qwen2", QWEN_TEMPLATE, set())
    assert facts.family == "hermes"
    req = GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER],
                            tool_choice="auto")
    plan = chat_features.plan(req, facts, raw=False)
    assert (plan.family, plan.grammar, plan.trigger) == ("hermes", LAZY, "<tool_call>")
    fields = chat_features.runner_fields(req, facts, plan, req.messages)
    assert fields["plan"] is plan and fields["tools"] == [WEATHER]
    reader = chat_features.ReplyReader(req, plan)
    events = reader.feed(TextDelta('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'))
    events += reader.finish()
    assert [(e.name, e.arguments) for e in events if isinstance(e, ToolCallEvent)] == [("get_weather",
                                                                                         {"city": "Oslo"})]


@pytest.mark.parametrize("choice,kw,expect", [
    (None, {}, (True, "auto", LAZY, None, True)),
    ("none", {}, (False, None, None, None, True)),
    ("required", {}, (True, "required", FORCED, None, True)),
    ("required", {"parallel": False}, (True, "required", FORCED, None, False)),
    ("get_weather", {}, (True, "get_weather", FORCED, "get_weather", False)),
    ("auto", {"has_format": True}, (True, "auto", EITHER, None, True)),
    ("auto", {"raw": True}, (True, "auto", None, None, True)),
    ("required", {"raw": True}, (True, "required", None, None, True)),
])
def test_one_decision_per_request(choice, kw, expect):
    parallel = kw.pop("parallel", True)
    p = plan_chat("hermes", [WEATHER], choice, parallel, **kw)
    assert (p.tools, p.tool_choice, p.grammar, p.only, p.parallel) == expect


def test_families_the_grammar_does_not_model_are_parsed_only():
    for family in ("harmony", "qwen3_coder", "deepseek"):
        p = plan_chat(family, [WEATHER], "auto")
        assert p.tools and p.grammar is None and p.parser == family
    assert plan_chat("no-such-family", [WEATHER], "auto").family == "generic"
    assert plan_chat("hermes", None, "required") == plan_chat("hermes", [], "auto")
