"""What a model is asked, on a live loopback server through the official clients: thinking budgets in every
dialect (OpenAI `reasoning_effort`, Responses `reasoning.effort`, Ollama `think` levels and the Modelfile's
PARAMETER think_budget, Anthropic `output_config.effort`) and the publisher's sampling defaults (general.sampling.*).

Models: synthetic GGUFs (random weights, SmolLM2's vocabulary) of four chat families whose templates leave a
thinking block open at the start of the reply, each closed by its own text: DeepSeek V3.1's real template
(`</think>`), a DeepSeek-R1-style ChatML one (generic, `</think>`), a Magistral-style one (`[/THINK]`) and a Command-R-style
one (`<|END_THINKING|>`). A random model never writes that close text itself: without a budget the whole reply is
thinking. With one, the runner writes the family's close text when it is spent, so the reply parser, which only
reads that family's markers, sees the thinking end and the answer follow. The budget is the effort level's share
of the reply's room (runner/sampling/think_budget.effort_budget): with max_tokens 200, minimal is 64 tokens and
low/medium/high are 149 (three quarters of the room, less one: the answer keeps the rest)."""
from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest

from gguf_variants import write_llama
from gguf_writer import template_text

ASK = [{"role": "user", "content": "Why is the sky blue?"}]
TINY = {"temperature": 0, "seed": 1}
MAX = 200
MINIMAL, CAPPED = 64, 149                      # effort_budget("minimal", 200), effort_budget("low"..."high", 200)

# ChatML that opens a <think> block at the start of the reply (DeepSeek-R1, QwQ): the generic family, <think>
R1 = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif -%}")
# Magistral-style: [THINK] ... [/THINK] (family mistral)
MAGISTRAL = ("{%- for m in messages %}[INST]{{ m.content }}[/INST]{% endfor -%}"
             "{%- if add_generation_prompt %}[THINK]{% endif -%}")
# Command-R-style: <|START_THINKING|> ... <|END_THINKING|> (family command_r; its action markers name the family)
CMDR = ("{%- for m in messages %}<|START_OF_TURN_TOKEN|>{{ m.role }}: {{ m.content }}<|END_OF_TURN_TOKEN|>"
        "{% endfor -%}{%- if false %}<|START_ACTION|><|END_ACTION|>{% endif -%}"
        "{%- if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|>{% endif -%}")
PUBLISHED = {"temp": 0.25, "top_k": 7, "top_p": 0.8, "penalty_repeat": 1.2}


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory):
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m")
    d = tmp_path_factory.mktemp("think-models")
    with httpx.Client(base_url=svc.url, timeout=120) as c:
        for name, body in (
                ("dsv31:test", {"from": str(write_llama(d / "dsv31.gguf", n_layer=2,
                                                        template=template_text("deepseek-ai-DeepSeek-V3.1.jinja")))}),
                ("r1:test", {"from": str(write_llama(d / "r1.gguf", n_layer=2, template=R1))}),
                ("r1-short:test", {"from": "r1:test", "parameters": {"num_ctx": 256}}),
                ("magistral:test", {"from": str(write_llama(d / "magistral.gguf", n_layer=2, template=MAGISTRAL))}),
                ("magistral-budget:test", {"from": "magistral:test", "parameters": {"think_budget": 24}}),
                ("cmdr:test", {"from": str(write_llama(d / "cmdr.gguf", n_layer=2, template=CMDR))}),
                ("published:test", {"from": str(write_llama(d / "pub.gguf", n_layer=2, sampling=PUBLISHED))})):
            r = c.post("/api/create", json={"model": name, "stream": False, **body})
            assert r.status_code == 200, r.text
    yield svc


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.url)


@pytest.fixture(scope="module")
def ac(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def test_families_think_in_their_own_markup(oc, http):
    for name, family in (("dsv31:test", "deepseek"), ("r1:test", "generic"), ("magistral:test", "mistral"),
                         ("cmdr:test", "command_r")):
        assert "thinking" in oc.show(name).capabilities, name
        assert http.post("/api/show", json={"model": name}).json()["strata"]["chat"]["family"] == family, name


# ---- OpenAI chat: reasoning_effort -------------------------------------------------------------------------------

def test_openai_reasoning_effort_ends_thinking_at_its_budget(ai):
    for effort, budget in (("minimal", MINIMAL), ("high", CAPPED)):
        raw = ai.chat.completions.with_raw_response.create(
            model="dsv31:test", messages=ASK, reasoning_effort=effort, max_tokens=MAX, extra_body=TINY)
        r = raw.parse()
        assert raw.headers["x-strata-think-budget"] == str(budget), effort
        msg = r.choices[0].message
        thinking = msg.model_extra.get("reasoning_content") or ""
        assert thinking and msg.content, effort                    # thinking ended, the answer followed
        assert "</think>" not in msg.content and "</think>" not in thinking
        assert r.usage.completion_tokens_details.reasoning_tokens == budget, effort
        assert r.usage.completion_tokens == MAX and r.choices[0].finish_reason == "length"
    # streamed: the same budget, the same split
    chunks = list(ai.chat.completions.create(model="dsv31:test", messages=ASK, reasoning_effort="minimal",
                                             max_tokens=MAX, extra_body=TINY, stream=True,
                                             stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    assert "".join(d.content or "" for d in deltas)
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == MINIMAL


def test_openai_effort_values_and_refusals(ai):
    for effort in ("none", "low", "medium", "xhigh"):         # every value OpenAI takes is served
        r = ai.chat.completions.create(model="dsv31:test", messages=ASK, reasoning_effort=effort, max_tokens=4,
                                       extra_body=TINY)
        assert r.choices[0].finish_reason == "length", effort
    with pytest.raises(openai.BadRequestError) as e:
        ai.chat.completions.create(model="dsv31:test", messages=ASK, max_tokens=4,
                                   extra_body={"reasoning_effort": "extreme"})
    assert e.value.body["param"] == "reasoning_effort" and "reasoning_effort" in e.value.body["message"]


def test_without_max_tokens_the_room_is_what_the_context_leaves(ai):
    """No max_tokens: the budget is the level's share of what the context leaves after the prompt."""
    from app.engine.runner.sampling.think_budget import effort_budget

    raw = ai.chat.completions.with_raw_response.create(model="r1-short:test", messages=ASK, reasoning_effort="low",
                                                       extra_body=TINY)
    r = raw.parse()
    budget = effort_budget("low", 256 - r.usage.prompt_tokens)
    assert raw.headers["x-strata-think-budget"] == str(budget) and 100 < budget < 200
    assert r.usage.completion_tokens_details.reasoning_tokens == budget and r.choices[0].message.content
    assert r.usage.prompt_tokens + r.usage.completion_tokens == 256 and r.choices[0].finish_reason == "length"


# ---- OpenAI Responses: reasoning.effort --------------------------------------------------------------------------

def test_responses_reasoning_effort_ends_thinking_at_its_budget(ai):
    raw = ai.responses.with_raw_response.create(model="r1:test", input="Why is the sky blue?",
                                                reasoning={"effort": "low"}, max_output_tokens=MAX, temperature=0)
    r = raw.parse()
    assert raw.headers["x-strata-think-budget"] == str(CAPPED)
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.output_text
    assert "</think>" not in r.output_text
    assert r.usage.output_tokens_details.reasoning_tokens == CAPPED
    with pytest.raises(openai.BadRequestError) as e:
        ai.responses.create(model="r1:test", input="hi", max_output_tokens=4,
                            extra_body={"reasoning": {"effort": "extreme"}})
    assert e.value.body["param"] == "reasoning.effort"


# ---- Ollama: think levels, PARAMETER think_budget, the think_budget option -----------------------------------

def _thinking_tokens(http, body):
    r = http.post("/api/chat", json={"messages": ASK, "stream": False, **body})
    assert r.status_code == 200, r.text
    return r.json(), r.headers


def test_ollama_think_level_ends_thinking_at_its_budget(oc, http):
    r = oc.chat("magistral:test", messages=ASK, think="low", options={"num_predict": MAX, **TINY})
    assert r.message.thinking and r.message.content
    assert "[/THINK]" not in r.message.content and "[/THINK]" not in r.message.thinking
    body, headers = _thinking_tokens(http, {"model": "magistral:test", "think": "low",
                                           "options": {"num_predict": MAX, **TINY}})
    assert headers["X-Strata-Think-Budget"] == str(CAPPED)
    assert body["strata"]["thinking_tokens"] == CAPPED and body["message"]["content"] == r.message.content
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat("magistral:test", messages=ASK, think="extreme", options={"num_predict": 4})
    assert e.value.status_code == 400 and "think" in e.value.error


def test_the_modelfiles_think_budget_is_the_default_and_a_request_overrides_it(oc, http):
    assert "think_budget" in oc.show("magistral-budget:test").parameters
    r = oc.chat("magistral-budget:test", messages=ASK, think=True, options={"num_predict": 60, **TINY})
    assert r.message.thinking and r.message.content
    body, headers = _thinking_tokens(http, {"model": "magistral-budget:test", "think": True,
                                           "options": {"num_predict": 60, **TINY}})
    assert headers["X-Strata-Think-Budget"] == "24" and body["strata"]["thinking_tokens"] == 24
    # a level is more specific than the Modelfile's number; the request's own number more still
    _, headers = _thinking_tokens(http, {"model": "magistral-budget:test", "think": "medium",
                                         "options": {"num_predict": MAX, **TINY}})
    assert headers["X-Strata-Think-Budget"] == str(CAPPED)
    body, headers = _thinking_tokens(http, {"model": "magistral-budget:test", "think": True,
                                           "options": {"num_predict": 40, "think_budget": -1, **TINY}})
    assert "X-Strata-Think-Budget" not in headers and not body["message"]["content"]    # no cap: all thinking
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat("magistral:test", messages=ASK, think=True, options={"num_predict": 4, "think_budget": -5})
    assert e.value.status_code == 400 and "think_budget" in e.value.error


# ---- Anthropic: output_config.effort under adaptive thinking ------------------------------------------------------

def test_anthropic_effort_ends_thinking_at_its_budget(ac):
    raw = ac.messages.with_raw_response.create(
        model="cmdr:test", max_tokens=MAX, messages=ASK, thinking={"type": "adaptive"},
        extra_body={"output_config": {"effort": "medium"}, **TINY})
    m = raw.parse()
    assert raw.headers["x-strata-think-budget"] == str(CAPPED)
    kinds = [b.type for b in m.content if b.type != "text" or b.text]
    assert kinds == ["thinking", "text"], kinds
    text = "".join(b.text for b in m.content if b.type == "text")
    assert "<|END_THINKING|>" not in text and "<|START_RESPONSE|>" not in text
    for effort in ("low", "high", "xhigh", "max"):           # every level Anthropic takes is served
        m = ac.messages.create(model="cmdr:test", max_tokens=4, messages=ASK, thinking={"type": "adaptive"},
                               extra_body={"output_config": {"effort": effort}})
        assert m.stop_reason == "max_tokens", effort
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model="cmdr:test", max_tokens=4, messages=ASK, thinking={"type": "adaptive"},
                           extra_body={"output_config": {"effort": "minimal"}})
    assert "output_config.effort" in e.value.body["error"]["message"]


# ---- the publisher's sampling defaults ---------------------------------------------------------------------------

def _sampling(headers) -> dict[str, tuple[str, str]]:
    """X-Strata-Sampling: "temperature=0.25 (gguf), top_k=7 (gguf)" -> {"temperature": ("0.25", "gguf"), ...}"""
    out = {}
    for item in headers.get("X-Strata-Sampling", "").split(", "):
        if item:
            name, _, rest = item.partition("=")
            value, _, source = rest.partition(" ")
            out[name] = (value, source.strip("()"))
    return out


def test_the_publishers_sampling_applies_unless_the_request_sets_it(http, ai):
    r = http.post("/api/chat", json={"model": "published:test", "messages": ASK, "stream": False,
                                     "options": {"num_predict": 2}})
    assert r.status_code == 200, r.text
    assert _sampling(r.headers) == {"temperature": ("0.25", "gguf"), "top_k": ("7", "gguf"), "top_p": ("0.8", "gguf"),
                                    "repeat_penalty": ("1.2", "gguf")}
    # the request's own values win, the rest stay the publisher's (OpenAI's temperature / top_p are options too)
    raw = ai.chat.completions.with_raw_response.create(model="published:test", messages=ASK, max_tokens=2,
                                                       temperature=0.9, top_p=0.5)
    s = _sampling(raw.headers)
    assert s["temperature"] == ("0.9", "request") and s["top_p"] == ("0.5", "request")
    assert s["top_k"] == ("7", "gguf") and s["repeat_penalty"] == ("1.2", "gguf")
    shown = http.post("/api/show", json={"model": "published:test"}).json()["strata"]["sampling"]
    assert shown["temperature"] == {"value": 0.25, "source": "gguf"} and shown["top_k"] == {"value": 7, "source": "gguf"}
    assert shown["min_p"]["source"] == "default"
