"""Tool calls on a real tools model, end to end: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (Hermes `<tool_call>` template)
on a live loopback service, through the official `ollama`, `openai` and `anthropic` clients.

The model writes its own calls (no synthetic replies): tool_choice auto / required / named / none, streamed and
not, two tools offered, parallel calls, results fed back (OpenAI tool messages, Anthropic tool_use -> tool_result,
Responses function_call -> function_call_output), an agent loop and two clients at once. Every call a reply
carries must name an offered tool and its arguments must validate against that tool's JSON schema (jsonschema).

Greedy sampling and short replies keep it fast (0.5B on 2 shared cores). Nothing here depends on the words the
model writes, only on structure: where text goes, which calls, whether their arguments validate. Whether a tool
result reached the next turn is checked on the prompt: the same turn with a longer result costs at least as many
more prompt tokens as that text has words.

The model file comes from `make test-models` (tests/support/model_cache.py); without it these tests skip, and in CI
(STRATA_REQUIRE_TEST_MODELS=1) they fail.
"""
from __future__ import annotations

import json
import threading

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest


MODEL = "qwen-coder:test"
WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "description": "The city name"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
TIME_PARAMS = {"type": "object", "properties": {
    "timezone": {"type": "string", "description": "An IANA time zone such as Europe/Paris"}},
    "required": ["timezone"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                            "parameters": WEATHER_PARAMS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the current time in a time zone",
                                         "parameters": TIME_PARAMS}}
SCHEMAS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}
ASK = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]
ASK_TWO = [{"role": "user", "content": "What is the weather in Paris and what is the weather in Tokyo? "
                                       "Call the tool once for each city."}]
GREEDY = {"temperature": 0, "seed": 7}
N_CALL = 80           # tokens enough for one call to close
# a tool result long enough that its tokens show in the prompt count (a word is at least one token)
LONG_RESULT = ("Paris: 23 degrees celsius, clear sky, wind 12 km/h from the north west, humidity 41 percent, "
               "visibility 10 km, pressure 1017 hPa, sunrise 06:41, sunset 21:12, station LFPG, report W-4471.")


def valid(name: str, arguments) -> dict:
    """The call names an offered tool and its arguments (an object, or OpenAI's JSON string) validate."""
    assert name in SCHEMAS, name
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, SCHEMAS[name])
    return args


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    svc = live_service(num_ctx=4096, num_parallel=2, keep_alive="10m", max_body=1024 * 1024)
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": MODEL, "from": str(qwen_coder_path), "stream": False})
        assert r.status_code == 200, r.text
    yield svc


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.url, timeout=300)


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def ac(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def openai_stream(stream) -> tuple[str, dict, str | None]:
    """Gather a streamed chat completion: (content, {index: {id, name, args}}, finish_reason)."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or ():
            c = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            c["id"] = c["id"] or tc.id
            c["name"] += tc.function.name or ""
            c["args"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, calls, finish


# ---- Ollama /api/chat: auto (Ollama has no tool_choice) ------------------------------------------------------------

def test_ollama_auto_calls_the_tool(oc):
    r = oc.chat(MODEL, messages=ASK, tools=[WEATHER], options={"num_predict": N_CALL, **GREEDY})
    assert r.done and r.message.tool_calls, r.message.content
    for c in r.message.tool_calls:
        valid(c.function.name, c.function.arguments)
    assert "<tool_call>" not in (r.message.content or "")


def test_ollama_auto_streamed(oc):
    chunks = list(oc.chat(MODEL, messages=ASK, tools=[WEATHER, TIME], stream=True,
                          options={"num_predict": N_CALL, **GREEDY}))
    calls = [c for ch in chunks for c in (ch.message.tool_calls or ())]
    assert chunks[-1].done and calls
    for c in calls:
        valid(c.function.name, c.function.arguments)
    assert "<tool_call>" not in "".join(ch.message.content or "" for ch in chunks)


def test_ollama_tool_result_answered(oc):
    """The call and its result go back: the result's text is in the next turn's prompt, and that turn's reply is
    content or calls that validate (the model may well call again); without tools it answers in content."""
    def turn(result: str, tools=(WEATHER,)):
        history = ASK + [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_name": "get_weather", "content": result}]
        return oc.chat(MODEL, messages=history, tools=list(tools) or None, options={"num_predict": 24, **GREEDY})

    long, short = turn(LONG_RESULT), turn("ok")
    assert long.done and (long.message.content or long.message.tool_calls)
    for c in long.message.tool_calls or ():
        valid(c.function.name, c.function.arguments)
    assert long.prompt_eval_count - short.prompt_eval_count >= len(LONG_RESULT.split())
    answer = turn(LONG_RESULT, tools=())
    assert answer.message.content and not answer.message.tool_calls


# ---- OpenAI chat completions: every tool_choice, streamed and not ------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_openai_tool_choice(ai, choice, stream):
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    kw = dict(model=MODEL, messages=ASK, tools=[WEATHER, TIME], tool_choice=tool_choice, max_tokens=N_CALL, **GREEDY)
    if stream:
        content, calls, finish = openai_stream(ai.chat.completions.create(stream=True, **kw))
        calls = [(c["id"], c["name"], c["args"]) for _, c in sorted(calls.items())]
    else:
        choice0 = ai.chat.completions.create(**kw).choices[0]
        content, finish = choice0.message.content, choice0.finish_reason
        calls = [(c.id, c.function.name, c.function.arguments) for c in choice0.message.tool_calls or ()]
    assert calls and finish == "tool_calls", (content, finish)
    assert not content or "<tool_call>" not in content
    assert len({i for i, _, _ in calls}) == len(calls) and all(i for i, _, _ in calls)
    for _, name, args in calls:
        valid(name, args)
    if choice == "named":
        assert {n for _, n, _ in calls} == {"get_weather"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_tool_choice_none_answers_in_content(ai, stream):
    kw = dict(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=16, **GREEDY)
    if stream:
        content, calls, finish = openai_stream(ai.chat.completions.create(stream=True, **kw))
    else:
        c = ai.chat.completions.create(**kw).choices[0]
        content, calls, finish = c.message.content, c.message.tool_calls, c.finish_reason
    assert content and not calls and finish in ("stop", "length")


def test_openai_parallel_calls(ai):
    """Two cities asked for, two tools offered, parallel calls allowed: every call the reply makes validates."""
    r = ai.chat.completions.create(model=MODEL, messages=ASK_TWO, tools=[WEATHER, TIME], tool_choice="required",
                                   parallel_tool_calls=True, max_tokens=2 * N_CALL, **GREEDY)
    calls = r.choices[0].message.tool_calls
    assert calls and r.choices[0].finish_reason == "tool_calls"
    assert len({c.id for c in calls}) == len(calls)
    for c in calls:
        valid(c.function.name, c.function.arguments)


@pytest.mark.parametrize("choice", ["auto", "required"])
def test_openai_parallel_tool_calls_false_gives_one_call(ai, choice):
    """parallel_tool_calls false: at most one call, whatever the model would have written (OpenAI's contract)."""
    r = ai.chat.completions.create(model=MODEL, messages=ASK_TWO, tools=[WEATHER, TIME], tool_choice=choice,
                                   parallel_tool_calls=False, max_tokens=2 * N_CALL, **GREEDY)
    calls = r.choices[0].message.tool_calls or []
    assert len(calls) <= 1
    if choice == "required":
        assert len(calls) == 1
    for c in calls:
        valid(c.function.name, c.function.arguments)


ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}, "confident": {"type": "boolean"}},
          "required": ["answer"]}


@pytest.mark.parametrize("question", [ASK[0]["content"], "What is 2 + 2? Answer in JSON."], ids=["tool", "plain"])
def test_format_beside_tools_on_auto(ai, oc, question):
    """response_format / format with tools on auto: the reply is calls, or content in that format (OpenAI's rule);
    the format no longer silently switches the tools off."""
    msgs = [{"role": "user", "content": question}]
    r = ai.chat.completions.create(model=MODEL, messages=msgs, tools=[WEATHER], tool_choice="auto", max_tokens=N_CALL,
                                   response_format={"type": "json_schema",
                                                    "json_schema": {"name": "answer", "schema": ANSWER}}, **GREEDY)
    o = oc.chat(MODEL, messages=msgs, tools=[WEATHER], format=ANSWER, options={"num_predict": N_CALL, **GREEDY})
    for calls, content, cut in (
            ([(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or ()],
             r.choices[0].message.content, r.choices[0].finish_reason == "length"),
            ([(c.function.name, c.function.arguments) for c in o.message.tool_calls or ()], o.message.content,
             o.done_reason == "length")):
        for name, args in calls:
            valid(name, args)
        if not calls and not cut:
            jsonschema.validate(json.loads(content), ANSWER)
        assert calls or content


def test_openai_tool_result_round_trip(ai, server):
    """A call made, its result sent back as a tool message: the call and the result are in the prompt the next
    turn reads (llama-server's /apply-template shows it), and that turn answers in content."""
    first = ai.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required",
                                       max_tokens=N_CALL, **GREEDY).choices[0].message
    call = first.tool_calls[0]
    args = valid(call.function.name, call.function.arguments)
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function",
         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": LONG_RESULT}]
    body = {"model": MODEL, "messages": history, "tools": [WEATHER], "tool_choice": "none"}
    r = ai.chat.completions.create(max_tokens=24, **body, **GREEDY)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls
    rendered = httpx.post(server.url + "/apply-template", json=body, timeout=60).json()
    assert LONG_RESULT in rendered["prompt"] and "<tool_response>" in rendered["prompt"]
    made = rendered["prompt"].rsplit("<tool_call>\n", 1)[1].split("\n</tool_call>")[0]
    assert json.loads(made) == {"name": call.function.name, "arguments": args}
    assert r.usage.prompt_tokens == rendered["n_tokens"]


# ---- Anthropic Messages: tool_use -> tool_result -------------------------------------------------------------

A_TOOLS = [{"name": "get_weather", "description": "Get the current weather in a city", "input_schema": WEATHER_PARAMS},
           {"name": "get_time", "description": "Get the current time in a time zone", "input_schema": TIME_PARAMS}]
A_GREEDY = {"temperature": 0}      # the anthropic SDK in use has no sampling arguments of its own


@pytest.mark.parametrize("choice", [{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"}],
                         ids=["auto", "any", "named"])
def test_anthropic_tool_use(ac, choice):
    m = ac.messages.create(model=MODEL, max_tokens=N_CALL, messages=ASK, tools=A_TOOLS, tool_choice=choice,
                           extra_body=A_GREEDY)
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and m.stop_reason == "tool_use", m.content
    for u in uses:
        valid(u.name, u.input)
        assert u.id.startswith("toolu_")
    if choice["type"] == "tool":
        assert {u.name for u in uses} == {"get_weather"}


def test_anthropic_tool_use_streamed_then_tool_result(ac):
    with ac.messages.stream(model=MODEL, max_tokens=N_CALL, messages=ASK, tools=A_TOOLS,
                            tool_choice={"type": "auto"}, extra_body=A_GREEDY) as s:
        m = s.get_final_message()
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and m.stop_reason == "tool_use"
    for u in uses:
        valid(u.name, u.input)

    def follow_up(result: str):
        return ASK + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u.id, "content": result}
                                                   for u in uses]}]

    answer = ac.messages.create(model=MODEL, max_tokens=24, messages=follow_up(LONG_RESULT), tools=A_TOOLS,
                                tool_choice={"type": "none"}, extra_body=A_GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text
    n_long = ac.messages.count_tokens(model=MODEL, messages=follow_up(LONG_RESULT), tools=A_TOOLS).input_tokens
    n_short = ac.messages.count_tokens(model=MODEL, messages=follow_up("ok"), tools=A_TOOLS).input_tokens
    assert n_long - n_short >= len(uses) * len(LONG_RESULT.split())


# ---- OpenAI Responses: function calls ------------------------------------------------------------------------

R_TOOLS = [{"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": WEATHER_PARAMS},
           {"type": "function", "name": "get_time", "description": "Get the current time in a time zone",
            "parameters": TIME_PARAMS}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_function_call_and_output(ai, stream):
    kw = dict(model=MODEL, input=ASK[0]["content"], tools=R_TOOLS, tool_choice="auto", max_output_tokens=N_CALL,
              temperature=0)
    if stream:
        with ai.responses.stream(**kw) as s:
            r = s.get_final_response()
    else:
        r = ai.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls, r.output
    for c in calls:
        valid(c.name, c.arguments)
    follow = ([{"role": "user", "content": ASK[0]["content"]}]
              + [{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
                 for c in calls]
              + [{"type": "function_call_output", "call_id": c.call_id, "output": LONG_RESULT} for c in calls])
    answer = ai.responses.create(model=MODEL, input=follow, tools=R_TOOLS, tool_choice="none", max_output_tokens=24,
                                 temperature=0)
    assert answer.output_text and not [o for o in answer.output if o.type == "function_call"]


# ---- whole workloads -----------------------------------------------------------------------------------------

def fake_tool(name: str, args: dict) -> str:
    if name == "get_weather":
        return json.dumps({"city": args["city"], "temperature": 23, "unit": args.get("unit", "celsius")})
    return json.dumps({"timezone": args["timezone"], "time": "14:05"})


def openai_agent(ai, question: str, max_turns: int = 3) -> tuple[list[dict], str, list[int]]:
    """An agent loop as frameworks write one: call tools until the model answers in content; at the step limit
    the last turn is asked with tool_choice none (an answer, whatever the model would rather do).
    -> (the messages, the answer, each turn's prompt tokens and then the question's alone)."""
    messages, prompt_tokens = [{"role": "user", "content": question}], []
    for turn in range(max_turns):
        last = turn == max_turns - 1
        r = ai.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER, TIME], max_tokens=N_CALL,
                                       tool_choice="none" if last else "auto", **GREEDY)
        msg = r.choices[0].message
        prompt_tokens.append(r.usage.prompt_tokens)
        if not msg.tool_calls:
            # the question alone, asked as this turn was: what the calls and results added shows
            prompt_tokens.append(ai.chat.completions.create(
                model=MODEL, messages=messages[:1], tools=[WEATHER, TIME], tool_choice="none" if last else "auto",
                max_tokens=1, **GREEDY).usage.prompt_tokens)
            assert msg.content
            return messages, msg.content, prompt_tokens
        messages.append({"role": "assistant", "content": msg.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in msg.tool_calls]})
        for c in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": c.id,
                             "content": fake_tool(c.function.name, valid(c.function.name, c.function.arguments))})
    raise AssertionError(f"no answer in {max_turns} turns: {messages}")


def ollama_agent(oc, question: str, max_turns: int = 3) -> tuple[list[dict], str, list[int]]:
    """The same loop on Ollama's API, which has no tool_choice: the last turn is sent without tools."""
    messages, prompt_tokens = [{"role": "user", "content": question}], []
    for turn in range(max_turns):
        last = turn == max_turns - 1
        r = oc.chat(MODEL, messages=messages, tools=None if last else [WEATHER, TIME],
                    options={"num_predict": N_CALL, **GREEDY})
        msg = r.message
        prompt_tokens.append(r.prompt_eval_count)
        if not msg.tool_calls:
            prompt_tokens.append(oc.chat(MODEL, messages=messages[:1], tools=None if last else [WEATHER, TIME],
                                         options={"num_predict": 1, **GREEDY}).prompt_eval_count)
            assert msg.content
            return messages, msg.content, prompt_tokens
        messages.append({"role": "assistant", "content": msg.content or "", "tool_calls": [
            {"function": {"name": c.function.name, "arguments": dict(c.function.arguments)}} for c in msg.tool_calls]})
        for c in msg.tool_calls:
            messages.append({"role": "tool", "tool_name": c.function.name,
                             "content": fake_tool(c.function.name, valid(c.function.name, c.function.arguments))})
    raise AssertionError(f"no answer in {max_turns} turns: {messages}")


def check_agent_run(messages: list[dict], answer: str, prompt_tokens: list[int]) -> None:
    """`prompt_tokens`: each turn's, then the question's alone asked as the last turn was."""
    assert any(m["role"] == "tool" for m in messages)        # it used a tool before answering
    assert answer and "<tool_call>" not in answer
    # every turn's prompt held the turns before it (calls and results went back in); the last (perhaps asked
    # without tools, so without their description) held more than the question alone asked the same way
    *tool_turns, last, alone = prompt_tokens
    assert all(b > a for a, b in zip(tool_turns, tool_turns[1:])) and last > alone, prompt_tokens


def test_two_agent_loops_at_once(ai, oc):
    """An OpenAI agent and an Ollama agent run their loops (tools until an answer) at the same time on the one
    model (two slots): both reach an answer with valid calls."""
    results, errors = {}, []

    def run(name, fn):
        try:
            results[name] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread below
            errors.append((name, e))

    threads = [threading.Thread(target=run, args=("openai", lambda: openai_agent(ai, ASK[0]["content"]))),
               threading.Thread(target=run, args=("ollama", lambda: ollama_agent(oc, ASK_TWO[0]["content"])))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert set(results) == {"openai", "ollama"}
    for run in results.values():
        check_agent_run(*run)
