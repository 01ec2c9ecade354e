"""OpenCode's own requests, replayed: what `opencode run "create hello.txt containing hi"` (npm opencode-ai 1.18.33,
an OpenAI-compatible provider) sent to `strata serve`, recorded with bench/agent_proxy.py and kept under
tests/support/fixtures/agents/opencode/ (its title request, then turns of its build agent: a 10 KB system
prompt, 10 tools with 19 KB of schemas, `tool_choice: auto`, `max_tokens: 4096`, streamed with usage; the later
turns carry the `write` calls the model made and OpenCode's results).

Each is sent as recorded to a live server with Qwen2.5-Coder-0.5B under the name OpenCode asked for, with greedy
sampling added (`temperature: 0`, `seed`) so the reply does not depend on the draw; each must answer 200 with a
well-formed SSE stream: chunks of one id, one finish reason, the usage chunk, `[DONE]`, and tool-call deltas
that assemble into calls of offered tools with JSON arguments. Then the issue that stopped OpenCode: another
client loads the model with a small `num_ctx`, and OpenCode's request (asking for no num_ctx, a prompt longer
than that context and max_tokens 4096) is served, the context grown, not refused.
The model file comes from `make test-models` (tests/support/model_cache.py): without it these tests skip, and in CI
(STRATA_REQUIRE_TEST_MODELS=1) they fail."""
from __future__ import annotations

import json

import httpx
import pytest

from agent_replay import serve_model, sse_blocks
from repo_paths import FIXTURES

# its first build request is a 7,500-token prompt: a minute on two quiet cores, over ten on a machine shared 8 ways
pytestmark = pytest.mark.timeout(2400)

RECORDED = sorted((FIXTURES / "agents" / "opencode").glob("*.json"))
MODEL = "coder:0.5b"                 # the name OpenCode's configuration gave the model
GREEDY = {"temperature": 0, "seed": 7}


def recorded(path) -> dict:
    fx = json.loads(path.read_text())
    assert fx["body"]["model"] == MODEL
    return fx


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path):
    svc = serve_model(live_service, qwen_coder_path, MODEL, num_parallel=1, keep_alive="10m",
                      max_body=4 * 1024 * 1024)
    # loaded before the replays: a stream that waits for its model's load opens (and sends its headers) before
    # the context is known, and each replay checks its usage against X-Strata-Num-Ctx
    httpx.post(svc.url + "/api/generate", json={"model": MODEL}, timeout=300).raise_for_status()
    return svc


def sse_events(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, one per event (an event's data lines joined)."""
    events = []
    for lines in sse_blocks(text, comments=False):
        assert all(field in ("data", "event", "id") for field, _ in lines), lines
        data = [value.lstrip() for field, value in lines if field == "data"]
        if data:
            events.append("\n".join(data))
    return events


def check_stream(fx: dict, text: str) -> dict:
    """A well-formed OpenAI chat stream for this request; returns what it said (finish reason, calls, usage)."""
    body = fx["body"]
    events = sse_events(text)
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and {c["model"] for c in chunks} == {MODEL}
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length", "tool_calls"), finishes
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert len(usage) == 1 and chunks[-1]["usage"] and chunks[-1]["choices"] == []      # include_usage: last
    assert usage[0]["prompt_tokens"] > 0 and usage[0]["completion_tokens"] >= 0
    assert usage[0]["total_tokens"] == usage[0]["prompt_tokens"] + usage[0]["completion_tokens"]
    calls: dict[int, dict] = {}
    for c in chunks:
        for ch in c["choices"]:
            assert ch["index"] == 0
            for d in ch["delta"].get("tool_calls") or []:
                call = calls.setdefault(d["index"], {"id": None, "name": "", "arguments": ""})
                if d.get("id"):
                    assert call["id"] in (None, d["id"])
                    call["id"] = d["id"]
                fn = d.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    for call in calls.values():
        assert call["id"] and call["name"] in offered, call
        if finishes[0] == "tool_calls":
            assert isinstance(json.loads(call["arguments"]), dict), call
    if finishes[0] == "tool_calls":
        assert calls
    return {"finish": finishes[0], "calls": calls, "usage": usage[0]}


def replay(url: str, fx: dict, **extra) -> tuple[httpx.Response, str]:
    body = {**fx["body"], **extra}
    headers = {k: v for k, v in fx["headers"].items() if k in ("user-agent", "content-type")}
    with httpx.Client(base_url=url, timeout=1800) as c:
        r = c.request(fx["method"], fx["path"], json=body, headers=headers)
    return r, r.text


@pytest.mark.skipif(not RECORDED, reason="no recorded OpenCode requests")
def test_every_recorded_request_is_served_with_a_well_formed_stream(server):
    for path in RECORDED:
        fx = recorded(path)
        r, text = replay(server.url, fx, **GREEDY)
        assert r.status_code == 200, (path.name, text[:500])
        assert r.headers["content-type"].startswith("text/event-stream")
        said = check_stream(fx, text)
        assert said["usage"]["prompt_tokens"] < int(r.headers["X-Strata-Num-Ctx"])


@pytest.mark.skipif(not RECORDED, reason="no recorded OpenCode requests")
def test_a_model_loaded_small_by_another_client_grows_for_opencode(server):
    """The refusal OpenCode met: after another client loaded the model with a smaller num_ctx, its next request
    (no num_ctx, max_tokens 4096, a prompt longer than that context) was a 400. It is served now: the model is
    reloaded with a context that holds it. (Its title request, the shortest it sends, against a 256-token load.)"""
    title = recorded(RECORDED[0])
    r = httpx.post(server.url + "/api/generate", timeout=600, json={
        "model": MODEL, "prompt": "hi", "stream": False, "options": {"num_ctx": 256, "num_predict": 1}})
    assert r.status_code == 200, r.text
    ps = {m["name"]: m for m in httpx.get(server.url + "/api/ps", timeout=60).json()["models"]}
    assert ps[MODEL]["context_length"] == 256
    r, text = replay(server.url, title, **GREEDY)
    assert r.status_code == 200, text[:500]
    said = check_stream(title, text)
    assert said["usage"]["prompt_tokens"] > 256 and title["body"]["max_tokens"] == 4096
    ps = {m["name"]: m for m in httpx.get(server.url + "/api/ps", timeout=60).json()["models"]}
    assert ps[MODEL]["context_length"] > said["usage"]["prompt_tokens"]
    assert "grown from 256" in ps[MODEL]["strata"]["context"]["reason"]
