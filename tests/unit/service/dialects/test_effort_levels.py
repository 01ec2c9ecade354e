"""Effort levels in every dialect (OpenAI `reasoning_effort`, Responses `reasoning.effort`, Ollama `think`
levels, Anthropic `output_config.effort`) become the internal `think` value the template reads and the thinking
budget's level (GenerationRequest.think_effort: runner/sampling/think_budget.effort_budget); every value the
reference API accepts parses, any other is a 400 naming the field. The budget is enforced on a live server:
tests/integration/service/test_think_budgets.py."""
from __future__ import annotations

import pytest

from app.service.dialects.anthropic.parse import parse_messages_request
from app.service.dialects.ollama.parse import parse_chat as ollama_chat
from app.service.dialects.openai.parse import parse_chat
from app.service.dialects.responses.parse import parse_responses
from app.service.generation.chat_features import settle_budget
from app.service.generation.options import parse_ollama_options
from app.service.http.errors import ApiError

MSG = [{"role": "user", "content": "hi"}]
# (wire value, think, budget level) as every OpenAI-style API accepts them
OPENAI = [("none", False, None), ("minimal", "low", "minimal"), ("low", "low", "low"),
          ("medium", "medium", "medium"), ("high", "high", "high"), ("xhigh", "high", "high")]


@pytest.mark.parametrize("effort,think,level", OPENAI)
def test_openai_chat_and_responses(effort, think, level):
    req, _ = parse_chat({"model": "m", "messages": MSG, "reasoning_effort": effort})
    assert (req.think, req.think_effort, req.think_mode) == (think, level, "prefer")
    req, _ = parse_responses({"model": "m", "input": "hi", "reasoning": {"effort": effort}})
    assert (req.think, req.think_effort) == (think, level)


@pytest.mark.parametrize("effort,level", [("low", "low"), ("medium", "medium"), ("high", "high"),
                                          ("xhigh", "high"), ("max", "high")])
def test_anthropic_output_config_effort(effort, level):
    body = {"model": "m", "max_tokens": 2000, "messages": MSG, "output_config": {"effort": effort}}
    req, _ = parse_messages_request({**body, "thinking": {"type": "adaptive"}})
    assert req.think_effort == level and req.think_budget is None
    # budget_tokens is the request's own budget: the effort steers the template only
    req, _ = parse_messages_request({**body, "thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert (req.think_budget, req.think_effort) == (1024, None)
    req, _ = parse_messages_request(body)               # no thinking asked: the effort does not turn it on
    assert req.think is None and req.think_effort is None


@pytest.mark.parametrize("think,level", [(True, None), (False, None), ("low", "low"), ("medium", "medium"),
                                         ("high", "high")])
def test_ollama_think(think, level):
    req = ollama_chat({"model": "m", "messages": MSG, "think": think})
    assert (req.think, req.think_effort) == (think, level)


@pytest.mark.parametrize("body,field", [
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"reasoning_effort": 3}, "reasoning_effort"),
    ({"reasoning": {"effort": "max"}}, "reasoning.effort"),
])
def test_openai_bad_values_name_the_field(body, field):
    with pytest.raises(ApiError) as e:
        parse_chat({"model": "m", "messages": MSG, **body})
    assert e.value.status == 400 and e.value.param == field and field in e.value.message


def test_responses_and_anthropic_bad_values_name_the_field():
    with pytest.raises(ApiError) as e:
        parse_responses({"model": "m", "input": "hi", "reasoning": {"effort": "extreme"}})
    assert e.value.status == 400 and e.value.param == "reasoning.effort"
    with pytest.raises(ApiError) as e:
        parse_messages_request({"model": "m", "max_tokens": 10, "messages": MSG, "thinking": {"type": "adaptive"},
                                "output_config": {"effort": "minimal"}})     # not one of Anthropic's levels
    assert e.value.status == 400 and e.value.param == "output_config.effort"


def test_think_budget_option_and_parameter():
    assert parse_ollama_options({"think_budget": 0}).think_budget == 0
    assert parse_ollama_options({"think_budget": -1}).think_budget == -1
    assert parse_ollama_options({}, {"think_budget": 512}).think_budget == 512
    for bad in (-2, 1.5, "many", True):
        with pytest.raises(ApiError) as e:
            parse_ollama_options({"think_budget": bad})
        assert e.value.status == 400 and e.value.param == "think_budget"


def test_the_most_specific_budget_wins():
    """The request's own budget, else its effort level, else the Modelfile's PARAMETER think_budget."""
    def settled(options, parameters, **fields):
        req = ollama_chat({"model": "m", "messages": MSG, "options": options, **fields})
        settle_budget(req, parse_ollama_options(options, parameters))
        return req.think_budget, req.think_effort

    assert settled({}, {"think_budget": 300}) == (300, None)                     # the Modelfile's
    assert settled({}, {"think_budget": 300}, think="low") == (None, "low")      # the request's level wins
    assert settled({"think_budget": 50}, {"think_budget": 300}, think="low") == (50, "low")   # its own number
    assert settled({"think_budget": -1}, {"think_budget": 300}) == (-1, None)    # no cap, over the Modelfile
    assert settled({}, {"think_budget": 300}, think=False) == (None, None)       # no thinking: no budget
