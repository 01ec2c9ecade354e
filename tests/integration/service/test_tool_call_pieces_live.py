"""Tool calls streamed in pieces as the model writes them, on a real tools model: Qwen2.5-Coder-0.5B-Instruct
(Hermes template) on a live loopback service, read by the official `openai` and `anthropic` clients.

Each streamed reply is compared with the same request not streamed (greedy: the same tokens): the client
reassembles the same calls, with the same arguments string. And the call comes in pieces: the call's head (or
block start, or output item) arrives before more than one arguments piece, all before the call's end. Only the
ORDER of events is asserted: the runner sends every token as it comes (STRATA_STREAM_INTERVAL_MS 0), so the
pieces follow the model's tokens. Ollama's stream keeps whole calls.

The model file comes from `make test-models` (tests/support/model_cache.py); without it these tests skip, and in CI
(STRATA_REQUIRE_TEST_MODELS=1) they fail.
"""
from __future__ import annotations

import json

import anthropic
import httpx
import ollama
import openai
import pytest

from app.engine.runner_settings import RunnerSettings

MODEL = "qwen-coder:pieces"
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                  "required": ["city"]}
TIME_PARAMS = {"type": "object", "properties": {"timezone": {"type": "string", "description": "An IANA time zone"}},
               "required": ["timezone"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                            "parameters": WEATHER_PARAMS}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Get the current time in a time zone",
                                         "parameters": TIME_PARAMS}}
ASK = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]
ASK_TWO = [{"role": "user", "content": "What is the weather in Paris and what is the weather in Tokyo? "
                                       "Call the tool once for each city."}]
GREEDY = {"temperature": 0, "seed": 7}
N_CALL = 80


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    svc = live_service(num_ctx=4096, num_parallel=1, keep_alive="10m", max_body=1024 * 1024,
                       runner=RunnerSettings(stream_interval_ms=0.0))
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": MODEL, "from": str(qwen_coder_path), "stream": False})
        assert r.status_code == 200, r.text
    yield svc


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def ac(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def assert_pieces(events, n_calls):
    """`events`: ("head", index) / ("args", index, text) / ("end", index) in the order received. Each call: its head,
    then at least two arguments pieces, then its end, and nothing of another call in between."""
    calls = [e for e in events if e[0] != "other"]
    pos = 0
    for index in range(n_calls):
        assert calls[pos] == ("head", index), calls
        pos += 1
        n_args = 0
        while calls[pos][0] == "args":
            assert calls[pos][1] == index, calls
            n_args, pos = n_args + 1, pos + 1
        assert n_args >= 2, f"call {index} came in one piece: {calls}"
        assert calls[pos] == ("end", index), calls
        pos += 1
    assert pos == len(calls), calls


# ---- OpenAI chat completions --------------------------------------------------------------------------------------

@pytest.mark.parametrize("choice,messages", [("required", ASK), ("auto", ASK)],
                         ids=["required", "auto"])
def test_openai_stream_reassembles_the_whole_replys_calls_piece_by_piece(ai, choice, messages):
    kw = dict(model=MODEL, messages=messages, tools=[WEATHER, TIME], tool_choice=choice, max_tokens=2 * N_CALL,
              **GREEDY)
    whole = ai.chat.completions.create(**kw).choices[0]
    want = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or ()]
    assert want and whole.finish_reason == "tool_calls", whole.message

    events, calls, finish = [], {}, []
    for chunk in ai.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        for tc in ch.delta.tool_calls or ():
            if tc.id is not None:                       # a call's head: id, type, name, arguments ""
                assert tc.index not in calls and tc.function.name and tc.function.arguments == ""
                if calls:
                    events.append(("end", tc.index - 1))
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "args": ""}
                events.append(("head", tc.index))
            else:
                assert tc.function.name is None and tc.function.arguments
                calls[tc.index]["args"] += tc.function.arguments
                events.append(("args", tc.index, tc.function.arguments))
        if ch.finish_reason:
            finish.append(ch.finish_reason)
            events.append(("end", len(calls) - 1))
    got = [(c["name"], c["args"]) for _, c in sorted(calls.items())]
    assert got == want and finish == ["tool_calls"]
    assert len({c["id"] for c in calls.values()}) == len(calls)
    assert_pieces(events, len(want))


# ---- Anthropic messages -------------------------------------------------------------------------------------------

A_TOOLS = [{"name": "get_weather", "description": "Get the current weather in a city", "input_schema": WEATHER_PARAMS},
           {"name": "get_time", "description": "Get the current time in a time zone", "input_schema": TIME_PARAMS}]


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "auto"}], ids=["any", "auto"])
def test_anthropic_stream_gives_tool_use_input_in_pieces(ac, choice):
    kw = dict(model=MODEL, max_tokens=N_CALL, messages=ASK, tools=A_TOOLS, tool_choice=choice,
              extra_body={"temperature": 0})
    whole = ac.messages.create(**kw)
    want = [(b.name, b.input) for b in whole.content if b.type == "tool_use"]
    assert want and whole.stop_reason == "tool_use"

    events, blocks, partial = [], {}, {}
    n_calls = 0
    for ev in ac.messages.create(stream=True, **kw):
        if ev.type == "content_block_start" and ev.content_block.type == "tool_use":
            assert ev.content_block.input == {}
            blocks[ev.index], partial[ev.index] = (n_calls, ev.content_block.name), ""
            events.append(("head", n_calls))
            n_calls += 1
        elif ev.type == "content_block_delta" and ev.index in blocks:
            assert ev.delta.type == "input_json_delta"
            partial[ev.index] += ev.delta.partial_json
            events.append(("args", blocks[ev.index][0], ev.delta.partial_json))
        elif ev.type == "content_block_stop" and ev.index in blocks:
            events.append(("end", blocks[ev.index][0]))
        else:
            events.append(("other",))
    got = [(blocks[i][1], json.loads(partial[i])) for i in sorted(blocks)]
    assert got == want
    assert_pieces(events, len(want))
    with ac.messages.stream(**kw) as s:                 # the SDK's own accumulation of the pieces
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == want


# ---- OpenAI Responses ---------------------------------------------------------------------------------------------

R_TOOLS = [{"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": WEATHER_PARAMS},
           {"type": "function", "name": "get_time", "description": "Get the current time in a time zone",
            "parameters": TIME_PARAMS}]


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_responses_stream_gives_function_call_arguments_in_pieces(ai, choice):
    kw = dict(model=MODEL, input=ASK[0]["content"], tools=R_TOOLS, tool_choice=choice, max_output_tokens=N_CALL,
              temperature=0)
    whole = ai.responses.create(**kw)
    want = [(o.name, o.arguments) for o in whole.output if o.type == "function_call"]
    assert want

    events, items, deltas, done = [], {}, {}, {}
    for ev in ai.responses.create(stream=True, **kw):
        if ev.type == "response.output_item.added" and ev.item.type == "function_call":
            assert ev.item.arguments == "" and ev.item.status == "in_progress"
            items[ev.item.id], deltas[ev.item.id] = (len(items), ev.item.name), ""
            events.append(("head", items[ev.item.id][0]))
        elif ev.type == "response.function_call_arguments.delta":
            deltas[ev.item_id] += ev.delta
            events.append(("args", items[ev.item_id][0], ev.delta))
        elif ev.type == "response.function_call_arguments.done":
            assert ev.arguments == deltas[ev.item_id]
            done[ev.item_id] = ev.arguments
        elif ev.type == "response.output_item.done" and ev.item.type == "function_call":
            assert ev.item.arguments == done[ev.item.id] and ev.item.status == "completed"
            events.append(("end", items[ev.item.id][0]))
        else:
            events.append(("other",))
    got = [(items[i][1], deltas[i]) for i in sorted(items, key=lambda i: items[i][0])]
    assert got == want
    assert_pieces(events, len(want))


# ---- Ollama: whole calls, as Ollama streams them -------------------------------------------------------------------

def test_ollama_stream_keeps_whole_calls(server):
    oc = ollama.Client(host=server.url, timeout=300)
    kw = dict(messages=ASK, tools=[WEATHER, TIME], options={"num_predict": N_CALL, **GREEDY})
    whole = oc.chat(MODEL, **kw)
    want = [(c.function.name, dict(c.function.arguments)) for c in whole.message.tool_calls or ()]
    assert want
    chunks = list(oc.chat(MODEL, stream=True, **kw))
    with_calls = [ch for ch in chunks if ch.message.tool_calls]
    got = [(c.function.name, dict(c.function.arguments)) for ch in with_calls for c in ch.message.tool_calls]
    assert got == want and all(len(ch.message.tool_calls) == 1 for ch in with_calls)


# ---- a client that hangs up while a call is being streamed ---------------------------------------------------------

WRITE_PARAMS = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"]}
WRITE = {"type": "function", "function": {"name": "write_file", "description": "Write a text file",
                                          "parameters": WRITE_PARAMS}}
ASK_WRITE = [{"role": "user", "content": "Write fib.py: a Python function that returns the n-th Fibonacci number, "
                                         "with a docstring and three tests. Use the tool."}]


def _slots_busy(url: str) -> int:
    models = httpx.get(url + "/api/ps", timeout=30).json()["models"]
    return sum(m["strata"].get("slots_busy", 0) for m in models if m["name"] == MODEL)


def test_a_client_that_hangs_up_mid_call_gives_its_slot_back(server, ai):
    """Hung up after the call's head and two arguments pieces, before the call ends: the service's slot and the
    runner's go idle, and the same request streamed again gives the whole reply's call."""
    from app.service import appkeys
    from service_util import wait_for

    kw = dict(model=MODEL, messages=ASK_WRITE, tools=[WRITE], tool_choice="required", max_tokens=300, **GREEDY)
    seen: list[str] = []
    with httpx.Client(timeout=300) as c, c.stream("POST", server.url + "/v1/chat/completions",
                                                   json={**kw, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            ch = json.loads(line[6:])["choices"][0]
            assert ch["finish_reason"] is None, "the call ended before the client hung up"
            seen += ["head" if tc.get("id") else "args" for tc in ch["delta"].get("tool_calls") or ()]
            if seen.count("args") == 2:
                break                                   # leaving the block closes the connection mid-call
    assert seen == ["head", "args", "args"]
    wait_for(lambda: _slots_busy(server.url) == 0, 120, "the service's slot freed")
    model = server.app[appkeys.SCHEDULER].models[MODEL]
    wait_for(lambda: server.call(model.client.stats(), timeout=30).slots_busy == 0, 120, "the runner's slot idle")

    whole = ai.chat.completions.create(**kw).choices[0].message.tool_calls
    args = ""
    for chunk in ai.chat.completions.create(stream=True, **kw):
        for tc in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
            args += tc.function.arguments or ""
    assert whole and args == whole[0].function.arguments
    assert json.loads(args)["content"]
