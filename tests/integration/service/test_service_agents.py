"""Tools, thinking, fill-in-the-middle, Anthropic Messages and OpenAI Responses on a live loopback server, driven
by the official, unmodified `ollama`, `openai` and `anthropic` clients.

Models: SmolLM2 (its template knows no tools: `tool_choice` required works through the grammar alone), and
synthetic GGUFs (random weights, SmolLM2's vocabulary) whose chat template opens a <think> block and renders
tools, has fill-in-the-middle token ids, or has no template at all. Random weights write noise, so tests on
them check structure (where text goes), never wording."""
from __future__ import annotations

import json

import anthropic
import httpx
import ollama
import openai
import pytest

from gguf_variants import write_llama

MODEL = "smollm2:135m"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# ChatML that renders tools and opens a <think> block at the start of the reply (as DeepSeek-R1, QwQ and Qwen3
# with thinking forced do), with Qwen3's enable_thinking switch
THINK_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif -%}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif -%}"
    "{%- endif %}")
TINY = {"temperature": 0, "seed": 1}


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory, smollm2_path):
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=2, keep_alive="10m", max_body=256 * 1024)
    models = tmp_path_factory.mktemp("agent-models")
    with httpx.Client(base_url=svc.url, timeout=120) as c:
        for name, path in (
                ("thinker:test", write_llama(models / "thinker.gguf", template=THINK_TEMPLATE, n_layer=2)),
                ("fim:test", write_llama(models / "fim.gguf", fim=True, n_layer=2)),
                ("notemplate:test", write_llama(models / "notpl.gguf", template=None, n_layer=2))):
            r = c.post("/api/create", json={"model": name, "from": str(path), "stream": False})
            assert r.status_code == 200, r.text
    yield svc


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.url)


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def ac(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


# ---- capabilities -------------------------------------------------------------------------------------------

def test_show_lists_capabilities_and_template_choice(oc, http):
    assert oc.show(MODEL).capabilities == ["completion"]
    assert oc.show("thinker:test").capabilities == ["completion", "tools", "thinking"]
    assert "insert" in oc.show("fim:test").capabilities
    chat = http.post("/api/show", json={"model": "notemplate:test"}).json()["strata"]["chat"]
    assert chat["template_source"] == "builtin:chatml" and "no chat template" in chat["template_reason"]


def test_missing_capabilities_are_400s_naming_them(oc):
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat(MODEL, messages=ASK, tools=[WEATHER])
    assert e.value.status_code == 400 and "does not support tools" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat(MODEL, messages=ASK, think=True)
    assert e.value.status_code == 400 and "does not support thinking" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        oc.generate(MODEL, prompt="def f():", suffix="return 1")
    assert e.value.status_code == 400 and "does not support insert" in e.value.error


# ---- OpenAI chat: tool_choice required on SmolLM2 -----------------------------------------------------------

def test_openai_tool_choice_required(ai):
    r = ai.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required",
                                   max_tokens=60, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function" and call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    assert choice.message.content is None


def test_openai_tool_call_streamed_and_answered(ai, http):
    stream = ai.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER],
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                        max_tokens=60, temperature=0, stream=True)
    calls, finish, pieces = {}, None, []
    for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or ():
            pieces.append(tc)
            c = calls.setdefault(tc.index, {"id": tc.id, "name": "", "args": ""})
            c["name"] += tc.function.name or ""
            c["args"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and calls[0]["name"] == "get_weather"
    assert pieces[0].id and pieces[0].function.name and pieces[0].function.arguments == ""   # head first
    assert pieces[1].id is None and pieces[1].function.arguments                             # then arguments
    args = json.loads(calls[0]["args"])
    # the next turn sends the call and its result back; the template renders both
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny, 21C"}]
    r = ai.chat.completions.create(model=MODEL, messages=history, tools=[WEATHER], tool_choice="none", max_tokens=8,
                                   temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length") and not r.choices[0].message.tool_calls
    # the tool's result reached the prompt the model read (llama-server's /apply-template shows it), and the
    # answered turn read exactly that prompt
    rendered = http.post("/apply-template", json={"model": MODEL, "messages": history, "tools": [WEATHER],
                                                  "tool_choice": "none"}).json()
    assert "sunny, 21C" in rendered.get("prompt", ""), rendered
    assert r.usage.prompt_tokens == rendered["n_tokens"]


def _longer_result_longer_prompt(prompt_tokens) -> None:
    """A tool result reached the prompt when a longer result makes the prompt longer by as much (a template that
    dropped it would count the same tokens for both)."""
    short, long = prompt_tokens("sunny"), prompt_tokens("sunny, 21 degrees, light wind from the west, no rain today")
    assert long - short >= 8, (short, long)


def test_openai_bad_tool_input_is_400_naming_the_field(ai):
    cases = [
        (dict(tools=[{"type": "function", "function": {"description": "no name"}}]), "tools"),
        (dict(tools=[WEATHER], tool_choice="sometimes"), "tool_choice"),
        (dict(messages=ASK + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "[1, 2]"}}]}]),
         "messages"),
        (dict(messages=ASK + [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]), "messages"),
    ]
    for kw, param in cases:
        args = {"model": MODEL, "messages": ASK, "max_tokens": 4, **kw}
        with pytest.raises(openai.BadRequestError) as e:
            ai.chat.completions.create(**args)
        assert e.value.body["param"] == param, (kw, e.value.body)


# ---- Ollama: tools, thinking ------------------------------------------------------------------------------------

CALL_SCHEMA = {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}},
    "required": ["name", "arguments"]}


def test_ollama_tool_call_from_a_reply_without_markers(oc):
    """`format` forces a bare JSON reply naming a supplied tool: the fallback makes it a call, not content."""
    r = oc.chat("thinker:test", messages=ASK, tools=[WEATHER], format=CALL_SCHEMA, think=False,
                options={"num_predict": 60, **TINY})
    assert r.message.content == "" and r.message.tool_calls[0].function.name == "get_weather"
    assert isinstance(r.message.tool_calls[0].function.arguments["city"], str)
    chunks = list(oc.chat("thinker:test", messages=ASK, tools=[WEATHER], format=CALL_SCHEMA, think=False,
                          options={"num_predict": 60, **TINY}, stream=True))
    with_calls = [c for c in chunks if c.message.tool_calls]
    assert len(with_calls) == 1 and not with_calls[0].done            # the call in its own done:false chunk
    assert chunks[-1].done and not "".join(c.message.content for c in chunks)


def test_ollama_tool_results_round_trip(oc):
    history = ASK + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"}]
    r = oc.chat("thinker:test", messages=history, tools=[WEATHER], think=False, options={"num_predict": 4, **TINY})
    assert r.done

    def prompt_tokens(result):
        turn = history[:-1] + [{"role": "tool", "tool_name": "get_weather", "content": result}]
        return oc.chat("thinker:test", messages=turn, tools=[WEATHER], think=False,
                       options={"num_predict": 1, **TINY}).prompt_eval_count
    _longer_result_longer_prompt(prompt_tokens)
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat("thinker:test", messages=ASK + [{"role": "tool", "tool_name": "get_time", "content": "x"}],
                options={"num_predict": 2})
    assert e.value.status_code == 400 and "get_time" in e.value.error


def test_ollama_thinking_separate_from_content(oc):
    r = oc.chat("thinker:test", messages=ASK, think=True, options={"num_predict": 12, **TINY})
    assert r.message.thinking and "<think>" not in r.message.thinking and r.message.content == ""
    chunks = list(oc.chat("thinker:test", messages=ASK, think=True, options={"num_predict": 12, **TINY}, stream=True))
    assert "".join(c.message.thinking or "" for c in chunks) == r.message.thinking
    g = oc.generate("thinker:test", prompt="Why?", think=True, options={"num_predict": 6, **TINY})
    assert g.thinking and g.response == ""
    off = oc.chat("thinker:test", messages=ASK, think=False, options={"num_predict": 6, **TINY})
    assert not off.message.thinking                     # the template closed the think block in the prompt


def test_openai_reasoning_content(ai):
    r = ai.chat.completions.create(model="thinker:test", messages=ASK, reasoning_effort="low", max_tokens=8,
                                   temperature=0)
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] and not msg.content
    stream = ai.chat.completions.create(model="thinker:test", messages=ASK, reasoning_effort="low", max_tokens=8,
                                        temperature=0, stream=True)     # the same effort: the same thinking budget
    pieces = [c.choices[0].delta.model_extra.get("reasoning_content") for c in stream if c.choices]
    assert "".join(p for p in pieces if p) == msg.model_extra["reasoning_content"]


def test_thinking_preference_on_a_model_that_cannot_think_is_ignored(ai):
    """OpenAI's reasoning_effort and Responses' reasoning ask for thinking as a preference: a model without it
    answers plainly (as llama-server serves them), where Ollama's `think: true` is a 400."""
    r = ai.chat.completions.create(model=MODEL, messages=ASK, reasoning_effort="high", max_tokens=4, temperature=0)
    assert r.choices[0].message.content and not r.choices[0].message.model_extra.get("reasoning_content")
    resp = ai.responses.create(model=MODEL, input="Why?", reasoning={"effort": "medium", "summary": "auto"},
                               max_output_tokens=4, temperature=0)
    assert [item.type for item in resp.output] == ["message"] and resp.output_text
    assert resp.reasoning.effort == "medium"                     # echoed as asked, as OpenAI echoes it


# ---- fill in the middle -------------------------------------------------------------------------------------

def test_suffix_in_generate_and_completions(oc, ai):
    r = oc.generate("fim:test", prompt="def add(a, b):\n    return ", suffix="\n", options={"num_predict": 3, **TINY})
    assert r.done and r.eval_count == 3 and r.prompt_eval_count > 3
    c = ai.completions.create(model="fim:test", prompt="x = ", suffix="\n", max_tokens=3, temperature=0)
    assert c.usage.completion_tokens == 3
    with pytest.raises(openai.BadRequestError) as e:
        ai.completions.create(model=MODEL, prompt="x = ", suffix="\n", max_tokens=3)
    assert e.value.body["param"] == "suffix"


# ---- Anthropic Messages -------------------------------------------------------------------------------------

def test_anthropic_text_and_stream(ac):
    m = ac.messages.create(model=MODEL, max_tokens=6, messages=[{"role": "user", "content": "Say hi"}],
                           system="Be brief.", stop_sequences=["\n\n\n"])
    assert m.type == "message" and m.role == "assistant" and m.content[0].type == "text"
    assert m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens > 0
    with ac.messages.stream(model=MODEL, max_tokens=6, messages=[{"role": "user", "content": "Say hi"}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].text == text and final.stop_reason in ("end_turn", "max_tokens")


def test_anthropic_tool_use_and_result(ac):
    tools = [{"name": "get_weather", "description": "weather", "input_schema": WEATHER["function"]["parameters"]}]
    # greedy: Anthropic's default temperature 1.0 let SmolLM2 pad the forced call with the whitespace JSON allows
    # (the grammar admits newlines and indentation as llama.cpp's does) past max_tokens now and then
    m = ac.messages.create(model=MODEL, max_tokens=60, messages=ASK, tools=tools, tool_choice={"type": "any"},
                           extra_body={"temperature": 0})
    assert m.stop_reason == "tool_use"
    use = next(b for b in m.content if b.type == "tool_use")
    assert use.name == "get_weather" and isinstance(use.input["city"], str) and use.id.startswith("toolu_")
    with ac.messages.stream(model=MODEL, max_tokens=60, messages=ASK, tools=tools, extra_body={"temperature": 0},
                            tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].name == "get_weather"
    assert isinstance(final.content[-1].input["city"], str)
    follow = ac.messages.create(model=MODEL, max_tokens=4, tools=tools, messages=ASK + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}],
        tool_choice={"type": "none"})
    assert follow.stop_reason in ("end_turn", "max_tokens")

    def prompt_tokens(result):
        return ac.messages.count_tokens(model=MODEL, tools=tools, tool_choice={"type": "none"}, messages=ASK + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": result}]}],
        ).input_tokens
    _longer_result_longer_prompt(prompt_tokens)
    # the whole prompt: what was processed now plus what came from the prompt cache (the shared earlier turns)
    assert follow.usage.input_tokens + follow.usage.cache_read_input_tokens == prompt_tokens("sunny")


def test_anthropic_thinking_count_tokens_and_errors(ac):
    m = ac.messages.create(model="thinker:test", max_tokens=10, messages=ASK, thinking={"type": "adaptive"})
    assert m.content[0].type == "thinking" and m.content[0].thinking
    n = ac.messages.count_tokens(model=MODEL, messages=ASK)
    assert n.input_tokens > 5
    with_tools = ac.messages.count_tokens(model="thinker:test", messages=ASK, tools=[
        {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}])
    assert with_tools.input_tokens > ac.messages.count_tokens(model="thinker:test", messages=ASK).input_tokens
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "robot", "content": "x"}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "role" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        ac.messages.create(model="no-such-model", max_tokens=5, messages=ASK)
    with pytest.raises(anthropic.BadRequestError) as e:
        ac.messages.create(model=MODEL, max_tokens=5, messages=ASK + [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": "Paris"}]}])
    assert "input must be an object" in e.value.body["error"]["message"]


def test_anthropic_thinking_budget_ends_thinking(ac):
    """budget_tokens caps thinking. The random model never closes its <think> block by itself: without a budget
    every token is thinking; with one the runner ends the block when the budget is spent and the rest is the
    answer. Anthropic's own limits are 400s naming the field."""
    free = ac.messages.create(model="thinker:test", max_tokens=1100, messages=ASK, thinking={"type": "adaptive"},
                              extra_body=TINY)
    def texts(m):
        return [b.type for b in m.content if b.type != "text" or b.text], "".join(
            b.text if b.type == "text" else b.thinking for b in m.content)

    assert texts(free)[0] == ["thinking"] and free.stop_reason == "max_tokens"
    capped = ac.messages.create(model="thinker:test", max_tokens=1100, messages=ASK, extra_body=TINY,
                                thinking={"type": "enabled", "budget_tokens": 1024})
    assert texts(capped)[0] == ["thinking", "text"] and "</think>" not in texts(capped)[1]
    for thinking, max_tokens in (({"type": "enabled"}, 2000), ({"type": "enabled", "budget_tokens": 1000}, 2000),
                                 ({"type": "enabled", "budget_tokens": 1024}, 1024)):
        with pytest.raises(anthropic.BadRequestError) as e:
            ac.messages.create(model="thinker:test", max_tokens=max_tokens, messages=ASK, thinking=thinking)
        assert "budget_tokens" in e.value.body["error"]["message"], thinking


# ---- OpenAI Responses ---------------------------------------------------------------------------------------

def test_responses_text_stream_and_tools(ai):
    r = ai.responses.create(model=MODEL, input="Say hi", instructions="Be brief.", max_output_tokens=6,
                            temperature=0)
    assert r.object == "response" and r.output[0].type == "message" and r.output_text
    events = list(ai.responses.create(model=MODEL, input="Say hi", instructions="Be brief.", max_output_tokens=6,
                                      temperature=0, stream=True))
    kinds = [e.type for e in events]
    # a reply cut by max_output_tokens ends with response.incomplete, as OpenAI's does
    assert kinds[0] == "response.created"
    assert kinds[-1] == ("response.incomplete" if r.status == "incomplete" else "response.completed")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    r = ai.responses.create(model=MODEL, input="Weather in Paris?", tools=[tool], tool_choice="required",
                            max_output_tokens=60, temperature=0)
    call = next(o for o in r.output if o.type == "function_call")
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)
    nxt = ai.responses.create(model=MODEL, tools=[tool], max_output_tokens=4, temperature=0, tool_choice="none",
                              input=[{"role": "user", "content": "Weather in Paris?"},
                                     {"type": "function_call", "call_id": call.call_id, "name": call.name,
                                      "arguments": call.arguments},
                                     {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert nxt.status in ("completed", "incomplete")

    def prompt_tokens(result):
        return ai.responses.create(model=MODEL, tools=[tool], max_output_tokens=1, temperature=0, tool_choice="none",
                                   input=[{"role": "user", "content": "Weather in Paris?"},
                                          {"type": "function_call", "call_id": call.call_id, "name": call.name,
                                           "arguments": call.arguments},
                                          {"type": "function_call_output", "call_id": call.call_id,
                                           "output": result}]).usage.input_tokens
    _longer_result_longer_prompt(prompt_tokens)


def test_responses_reasoning_and_bad_input(ai):
    r = ai.responses.create(model="thinker:test", input="Why?", reasoning={"effort": "low"}, max_output_tokens=8,
                            temperature=0)
    assert r.output[0].type == "reasoning" and r.output[0].content[0].text
    with pytest.raises(openai.BadRequestError) as e:
        ai.responses.create(model=MODEL, input="x", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        ai.responses.create(model=MODEL, input=[{"type": "function_call_output", "call_id": "c9", "output": "x"}])
    assert e.value.body["param"] == "input"


def test_template_less_model_answers_without_foreign_markup(oc):
    r = oc.chat("notemplate:test", messages=ASK, options={"num_predict": 10, **TINY})
    assert "<|im_start|>" not in r.message.content and "<|im_end|>" not in r.message.content


def test_ollama_bad_tool_input_is_400_naming_the_field(http):
    cases = [
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools[0].function.name is required"),
        ({"messages": ASK + [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": "Paris"}}]}]}, "arguments must be a JSON object"),
        ({"messages": ASK + [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": [1]}}]}]}, "arguments must be an object"),
        ({"messages": ASK + [{"role": "tool", "content": "x"}]}, "no earlier assistant message made a tool call"),
        ({"think": "very"}, "'think' must be true, false, or one of low, medium, high"),
    ]
    for extra, message in cases:
        body = {"model": "thinker:test", "messages": ASK, "stream": False, "options": {"num_predict": 1}, **extra}
        r = http.post("/api/chat", json=body)
        assert r.status_code == 400 and message in r.json()["error"], (extra, r.text)


def test_anthropic_stream_events_in_order(http):
    body = {"model": MODEL, "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with http.stream("POST", "/v1/messages", json=body) as r:
        names = [line.split(": ", 1)[1] for line in r.iter_lines() if line.startswith("event: ")]
    # more pings (the keepalive) come while the model loads when no test before this one loaded it
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    rest = [n for n in names[2:] if n != "ping"]
    assert rest[0] == "content_block_start" and "content_block_delta" in rest and "content_block_stop" in rest
    r = http.post("/v1/messages", json={"model": MODEL, "messages": ASK})
    assert r.status_code == 400 and r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "'max_tokens' is required"}}


def test_responses_streamed_function_call(ai):
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER["function"]["parameters"]}
    events = list(ai.responses.create(model=MODEL, input="Weather in Paris?", tools=[tool], tool_choice="required",
                                      max_output_tokens=60, temperature=0, stream=True))
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(done) >= 1 and isinstance(json.loads(done[0].arguments)["city"], str)
    final = events[-1].response
    assert final.output[0].type == "function_call" and final.output[0].arguments == done[0].arguments


def test_generation_on_an_embedding_model_is_a_400(http, embed_gguf):
    r = http.post("/api/create", json={"model": "embedder:test", "from": str(embed_gguf), "stream": False})
    assert r.status_code == 200
    assert http.post("/api/show", json={"model": "embedder:test"}).json()["capabilities"] == ["embedding"]
    r = http.post("/api/chat", json={"model": "embedder:test", "messages": ASK, "stream": False})
    assert r.status_code == 400 and "does not support completion" in r.json()["error"]


def test_anthropic_stop_sequence_is_reported(ac):
    m = ac.messages.create(model=MODEL, max_tokens=30, stop_sequences=[" "],
                           messages=[{"role": "user", "content": "Say hello to the world."}])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == " " and " " not in m.content[0].text
