"""A reply ends at the first call it repeats (service/generation/call_repeats.py), on Qwen2.5-Coder-0.5B at
temperature 0 and no repeat penalty (Ollama's defaults), with a request recorded from a real client:
ollama-ai-provider-v2's README generateText, its second step (getWeather's result back), where the model writes
getWeather calls one after another until the reply's limit.

The reply must now end with a finite list of calls, none of them twice, ended as a tool-call reply (`tool_calls`;
Ollama's `done_reason` "stop"), having written far fewer tokens than its limit; its calls are the ones the model
writes with the rule off, up to the first repeat (the same greedy reply, cut there). Streamed and not, on both
dialects. The model file comes from `make test-models`; without it these tests skip, and in CI they fail."""
from __future__ import annotations

import json

import httpx
import pytest

from repo_paths import FIXTURES

pytestmark = pytest.mark.timeout(1200)

MODEL = "coder:0.5b"
LIMIT = 400                     # the reply's limit where the rule is off: room for many repeats


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    svc = live_service(num_ctx=8192, num_parallel=1, keep_alive="10m", max_body=1024 * 1024)
    with httpx.Client(base_url=svc.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": MODEL, "from": str(qwen_coder_path),
                                        "parameters": {"temperature": 0}, "stream": False})
        assert r.status_code == 200, r.text
        for name in ("qwen2.5-coder:0.5b",):           # the name the framework's requests carry
            c.post("/api/copy", json={"source": MODEL, "destination": name}).raise_for_status()
    return svc


def openai_stream(c: httpx.Client, body: dict) -> tuple[list[tuple[str, dict]], str | None, dict]:
    parts: dict[int, dict] = {}
    finish, usage = None, {}
    with c.stream("POST", "/v1/chat/completions", json={**body, "stream": True,
                                                        "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for ch in chunk["choices"]:
                finish = ch.get("finish_reason") or finish
                for t in ch["delta"].get("tool_calls") or ():
                    p = parts.setdefault(t["index"], {"name": "", "arguments": ""})
                    p["name"] += t.get("function", {}).get("name") or ""
                    p["arguments"] += t.get("function", {}).get("arguments") or ""
    return [(p["name"], json.loads(p["arguments"])) for _, p in sorted(parts.items())], finish, usage


def openai_whole(c: httpx.Client, body: dict) -> tuple[list[tuple[str, dict]], str | None, dict]:
    r = c.post("/v1/chat/completions", json={**body, "stream": False})
    assert r.status_code == 200, r.text
    d = r.json()
    ch = d["choices"][0]
    calls = [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in ch["message"].get("tool_calls")
             or ()]
    return calls, ch["finish_reason"], d["usage"]


def up_to_first_repeat(calls):
    out = []
    for call in calls:
        if call in out:
            return out
        out.append(call)
    return None                     # no repeat: the case would not test the rule


def test_a_runaway_of_two_calls_by_turns_ends_streamed_or_not_on_both_dialects(server):
    body = json.loads((FIXTURES / "frameworks" / "ai-sdk-ollama-generate.json").read_text())[1]["body"]
    with httpx.Client(base_url=server.url, timeout=1200) as c:
        r = c.post("/api/chat", json={**body, "stream": False, "options": {"stop_repeated_calls": False,
                                                                            "num_predict": LIMIT}})
        off = [(t["function"]["name"], t["function"]["arguments"]) for t in r.json()["message"]["tool_calls"]]
        want = up_to_first_repeat(off)
        assert want and r.json()["done_reason"] == "length", off
        assert len(want) > 1 or want[0][1] != body["messages"][-2]["tool_calls"][0]["function"]["arguments"]

        r = c.post("/api/chat", json={**body, "stream": False})
        d = r.json()
        assert [(t["function"]["name"], t["function"]["arguments"]) for t in d["message"]["tool_calls"]] == want
        assert d["done_reason"] == "stop" and d["eval_count"] < LIMIT, d
        streamed, last = [], None
        with c.stream("POST", "/api/chat", json={**body, "stream": True}) as r:
            for line in r.iter_lines():
                if line:
                    last = json.loads(line)
                    streamed += [(t["function"]["name"], t["function"]["arguments"])
                                 for t in last["message"].get("tool_calls") or ()]
        assert streamed == want and last["done"] and last["done_reason"] == "stop"

        oa = json.loads(json.dumps(body))
        for m in oa["messages"]:
            for t in m.get("tool_calls") or ():
                t["function"]["arguments"] = json.dumps(t["function"]["arguments"])
        oa.pop("think", None)
        for ask in (openai_whole, openai_stream):
            calls, finish, usage = ask(c, oa)
            assert calls == want and finish == "tool_calls" and usage["completion_tokens"] < LIMIT, (ask, calls)
