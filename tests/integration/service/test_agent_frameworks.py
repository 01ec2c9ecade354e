"""Agent frameworks on a live server, Qwen2.5-Coder-0.5B at temperature 0 and repeat penalty 1.1 (the imported
model's Modelfile parameters, so no example is changed to ask for them), each through its documented path for a
local server:

- smolagents 1.26.0 + litellm 1.110.2 (test extras of pyproject.toml), live: the ToolCallingAgent of smolagents'
  examples/agent_from_any_llm.py with LiteLLMModel("ollama_chat/..."), which talks Ollama's /api/chat and drops
  `tool_choice` there. Its prompt teaches `Action:` + a JSON blob, and the model wrote that with a made-up tool name
  (`weather_interpreter`) on every step until max_steps; the lazy tool grammar now starts after the label, so the
  name is one of the tools: get_weather runs, then final_answer ends the run.
- the Vercel AI SDK (npm ai 7.0.173, @ai-sdk/openai-compatible 3.0.92, ollama-ai-provider-v2 4.0.1), whose requests
  are replayed: Node and those packages are not installed by this suite. bench/frameworks_e2e.py runs the examples
  themselves (bench/frameworks/); what they sent, recorded with tests/support/recording_proxy.py, is kept under
  tests/support/fixtures/frameworks/ (bodies as sent). Each is sent again, non-streamed as the SDK sends it and
  streamed, and every reply must carry only calls of offered tools with schema-valid arguments, never a call's
  JSON as text (the ToolLoopAgent's last step answered `>{"name": "convertFahrenheitToCelsius", ...}` as its final
  text: '>{"' is one Qwen token, picked under the repeat penalty), and the same calls streamed or not.
  ollama-ai-provider-v2 sends the AI SDK's toolChoice as `tool_choice` on /api/chat (Ollama ignores it): "required"
  is honoured, so a step where the model would have ended with an empty reply makes a call. Its README's
  generateText asked for the same getWeather call again after its result on every step (no answer when stopWhen
  ended the run): a reply that only repeats the last round's calls is asked for again as an answer.

The model file comes from `make test-models`; without it these tests skip, and in CI they fail.
"""
from __future__ import annotations

import json
import os

import httpx
import jsonschema
import pytest

from repo_paths import FIXTURES

pytestmark = pytest.mark.timeout(1200)

MODEL = "qwen2.5-coder:0.5b"               # the name the recorded requests carry
RECORDED = FIXTURES / "frameworks"
# temperature 0 and a repeat penalty as a per-model parameter (why: bench/frameworks_e2e.PARAMETERS)
PARAMETERS = {"temperature": 0, "repeat_penalty": 1.1}


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    svc = live_service(num_ctx=8192, num_parallel=1, keep_alive="10m", max_body=1024 * 1024)
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": MODEL, "from": str(qwen_coder_path), "parameters": PARAMETERS,
                                        "stream": False})
        assert r.status_code == 200, r.text
        c.post("/api/generate", json={"model": MODEL}).raise_for_status()
    return svc


def recorded(name: str) -> list[dict]:
    """A recorded run: [{"path", "body"}] in the order the framework sent them."""
    return json.loads((RECORDED / name).read_text())


def schemas(body: dict) -> dict:
    return {t["function"]["name"]: t["function"].get("parameters") or {} for t in body.get("tools") or ()}


def check_calls(body: dict, calls: list[tuple[str, dict]], content: str) -> None:
    offered = schemas(body)
    for name, args in calls:
        assert name in offered, (name, list(offered))
        jsonschema.validate(args, offered[name])
    assert "<tool_call>" not in content and not any(f'"name": "{n}"' in content for n in offered), content


def ask(c: httpx.Client, path: str, body: dict) -> tuple[list[tuple[str, dict]], str]:
    """The request as recorded (non-streamed) -> (calls, content)."""
    r = c.post(path, json={**body, "stream": False})
    assert r.status_code == 200, r.text
    d = r.json()
    if path == "/api/chat":
        msg = d["message"]
        return [(t["function"]["name"], t["function"]["arguments"]) for t in msg.get("tool_calls") or ()], \
            msg["content"]
    msg = d["choices"][0]["message"]
    return [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in msg.get("tool_calls") or ()], \
        msg["content"] or ""


def ask_streamed(c: httpx.Client, path: str, body: dict) -> tuple[list[tuple[str, dict]], str]:
    calls, content = [], ""
    if path == "/api/chat":
        with c.stream("POST", path, json={**body, "stream": True}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line:
                    msg = json.loads(line)["message"]
                    content += msg["content"]
                    calls += [(t["function"]["name"], t["function"]["arguments"]) for t in msg.get("tool_calls") or ()]
        return calls, content
    parts: dict[int, dict] = {}
    with c.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for ch in json.loads(line[6:])["choices"]:
                delta = ch["delta"]
                content += delta.get("content") or ""
                for t in delta.get("tool_calls") or ():
                    p = parts.setdefault(t["index"], {"name": "", "arguments": ""})
                    p["name"] += t.get("function", {}).get("name") or ""
                    p["arguments"] += t.get("function", {}).get("arguments") or ""
    return [(p["name"], json.loads(p["arguments"])) for _, p in sorted(parts.items())], content


# ---- smolagents, live ----------------------------------------------------------------------------------------

def test_smolagents_tool_calling_agent_on_ollama_chat(server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")      # litellm's bundled model list: nothing fetched
    from smolagents import LiteLLMModel, ToolCallingAgent, tool

    model = LiteLLMModel(model_id="ollama_chat/" + MODEL, api_base=server.url, api_key="your-api-key", num_ctx=8192)

    ran = []

    @tool
    def get_weather(location: str, celsius: bool | None = False) -> str:
        """
        Get weather in the next days at given location.
        Secretly this tool does not care about the location, it hates the weather everywhere.

        Args:
            location: the location
            celsius: the temperature
        """
        ran.append(location)
        return "The weather is UNGODLY with torrential rains and temperatures below -10°C"

    # the example's agent; a step bound below the default 20 so that a regression fails in minutes, not an hour
    agent = ToolCallingAgent(tools=[get_weather], model=model, verbosity_level=0, max_steps=4)
    answer = agent.run("What's the weather like in Paris?")
    steps = [s for s in agent.memory.steps if getattr(s, "tool_calls", None)]
    names = [c.name for s in steps for c in s.tool_calls]
    errors = [str(s.error) for s in agent.memory.steps if getattr(s, "error", None)]
    assert ran and isinstance(ran[0], str), (names, errors)                # the tool ran, with a location
    assert names[-1] == "final_answer" and not errors, (names, errors)     # and the model ended the run itself
    assert isinstance(answer, str) and answer.strip()


# ---- the Vercel AI SDK, replayed -----------------------------------------------------------------------------

@pytest.mark.parametrize("run", ["ai-sdk-openai-compatible-loop.json", "ai-sdk-ollama-required.json",
                                 "ai-sdk-ollama-generate.json"])
def test_ai_sdk_loop_requests_get_calls_never_call_text(server, run):
    """Each recorded step of a ToolLoopAgent run, sent again: calls of offered tools with valid arguments, no call
    JSON left as text, and the same calls streamed."""
    with httpx.Client(base_url=server.url, timeout=600) as c:
        for i, step in enumerate(recorded(run)):
            path, body = step["path"], step["body"]
            assert body["model"] == MODEL
            calls, content = ask(c, path, body)
            check_calls(body, calls, content)
            if body.get("tool_choice") == "required":
                assert calls, f"step {i}: tool_choice required but no call: {content!r}"
            if step.get("streamed_too"):
                s_calls, s_content = ask_streamed(c, path, body)
                check_calls(body, s_calls, s_content)
                assert s_calls == calls, (i, s_calls, calls)


def test_ai_sdk_ollama_required_is_honoured_where_the_model_would_stop(server):
    """ollama-ai-provider-v2's `tool_choice: "required"` (prepareStep's toolChoice) on a step where the model, left
    to itself, ended the loop with an empty reply (the recorded last step): now a call of an offered tool."""
    last = recorded("ai-sdk-ollama-required.json")[-1]
    body = {**last["body"], "tool_choice": "required"}
    with httpx.Client(base_url=server.url, timeout=600) as c:
        calls, content = ask(c, "/api/chat", body)
        check_calls(body, calls, content)
        assert calls and not content
        # the provider's named choice, {"type": "function", "name"}, calls that tool
        calls, _ = ask(c, "/api/chat", {**body, "tool_choice": {"type": "function", "name": "convertFahrenheitToCelsius"}})
        assert [n for n, _ in calls] == ["convertFahrenheitToCelsius"]


def as_openai(body: dict) -> dict:
    """An /api/chat body as /v1/chat/completions takes it (the same conversation: call arguments as JSON text)."""
    b = json.loads(json.dumps(body))
    for m in b["messages"]:
        for t in m.get("tool_calls") or ():
            t["function"]["arguments"] = json.dumps(t["function"]["arguments"])
    b.pop("think", None)
    return b


def test_ai_sdk_a_reply_that_repeats_the_last_round_is_asked_again_as_an_answer(server):
    """ollama-ai-provider-v2's README generateText, its second step (getWeather's result back): the model asked for
    the same getWeather call again (with the result in front of it), on every step until stopWhen ended the run
    without an answer. That reply is now asked for once more as an answer (service/generation/repeat_guard.py):
    the model's own text, on both dialects, streamed (the call held back while it could still be the repeat) or
    not. With `answer_after_tools` off, the repeat comes back as before."""
    body = recorded("ai-sdk-ollama-generate.json")[1]["body"]
    repeat = ("getWeather", {"location": "San Francisco", "unit": "celsius"})
    with httpx.Client(base_url=server.url, timeout=600) as c:
        off, _ = ask(c, "/api/chat", {**body, "options": {"answer_after_tools": False}})
        assert off == [repeat], off
        calls, content = ask(c, "/api/chat", body)
        check_calls(body, calls, content)
        assert not calls and content.strip(), (calls, content)
        s_calls, s_content = ask_streamed(c, "/api/chat", body)
        assert not s_calls and s_content.strip(), (s_calls, s_content)
        o_calls, o_content = ask_streamed(c, "/v1/chat/completions", as_openai(body))
        check_calls(body, o_calls, o_content)
        assert not o_calls and o_content.strip(), (o_calls, o_content)
