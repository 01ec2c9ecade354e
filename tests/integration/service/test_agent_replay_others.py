"""The first requests of the other coding agents `strata launch` starts (Pi, Qwen Code, GitHub Copilot CLI,
mini-swe-agent, ...), replayed on a live server: each ran once through `strata launch AGENT --model coder:0.5b`
against `strata serve` with Qwen2.5-Coder-0.5B behind bench/agents_e2e.py's logging proxy (some twice), and its
first generation request, with one that carries tool results where the run got that far, are kept under
tests/support/fixtures/agents/<agent>/NN-request.json (the body as sent, the run's temp paths replaced;
`recorded_with` names the agent's version). docs/agents.md has each one's field table.

Each request goes back as recorded, with its own user agent, to the fixture's tokenizer twin
(agent_replay.write_tokenizer_twin: Qwen2.5-Coder's tokenizer and chat template on two random layers, so the prompt
renders and tokenizes exactly as on Qwen and costs a thousandth of it) under the model name the agent asked for;
only the reply's size is lowered (the reply of random weights is noise: what is checked is the shape of the
answer, never its words). Every field the agent sent must be accepted (a 200: a field the reference API accepts
is never a 400), and the answer must be well formed for its wire: an OpenAI chat stream (chunks of one id, one
finish reason, the usage chunk when asked, `[DONE]`; tool-call deltas that assemble into calls of offered tools),
or a non-streamed chat completion. Nothing depends on timing or on what the model says."""
from __future__ import annotations

import json

import httpx
import pytest

from agent_replay import serve_model, sse_blocks, write_tokenizer_twin
from repo_paths import FIXTURES

pytestmark = pytest.mark.timeout(1200)

OWN_TESTS = {"claude-code", "codex", "opencode"}      # replayed by their own test files
RECORDED = sorted(p for d in sorted((FIXTURES / "agents").iterdir()) if d.is_dir() and d.name not in OWN_TESTS
                  for p in d.glob("*-request.json"))
MODEL = "coder:0.5b"                                  # the name `strata launch --model` gave every agent
REPLY = 48


@pytest.fixture(scope="module")
def server(live_service, qwen_coder_path, tmp_path_factory):
    twin = write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf")
    return serve_model(live_service, twin, MODEL, num_ctx=32768, num_parallel=1, keep_alive="10m",
                       max_body=8 * 1024 * 1024)


def recorded(path) -> dict:
    fx = json.loads(path.read_text(encoding="utf-8"))
    assert fx["body"]["model"] == MODEL and fx["agent"] == path.parent.name and fx["recorded_with"]
    return fx


def shortened(body: dict) -> dict:
    """The body with the reply's size lowered (whichever field the agent used), nothing else changed."""
    body = dict(body)
    for key in ("max_tokens", "max_completion_tokens"):
        if key in body:
            body[key] = min(int(body[key]), REPLY)
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = REPLY
    return body


def check_chat_stream(body: dict, text: str) -> None:
    events = []
    for lines in sse_blocks(text, comments=False):
        data = [v.lstrip() for f, v in lines if f == "data"]
        if data:
            events.append("\n".join(data))
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and {c["model"] for c in chunks} == {MODEL}
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length", "tool_calls"), finishes
    if (body.get("stream_options") or {}).get("include_usage"):
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0
    offered = {t["function"]["name"] for t in body.get("tools") or [] if t.get("type") == "function"}
    calls: dict[int, dict] = {}
    for c in chunks:
        for ch in c["choices"]:
            for d in ch["delta"].get("tool_calls") or []:
                call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
                fn = d.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
    for call in calls.values():
        assert call["name"] in offered, call
        if finishes[0] == "tool_calls":
            assert isinstance(json.loads(call["arguments"]), dict), call


def check_chat_completion(body: dict, answer: dict) -> None:
    assert answer["object"] == "chat.completion" and answer["model"] == MODEL
    (choice,) = answer["choices"]
    assert choice["finish_reason"] in ("stop", "length", "tool_calls")
    assert choice["message"]["role"] == "assistant"
    assert answer["usage"]["prompt_tokens"] > 0


@pytest.mark.skipif(not RECORDED, reason="no recorded requests")
@pytest.mark.parametrize("path", RECORDED, ids=[f"{p.parent.name}/{p.name}" for p in RECORDED])
def test_a_recorded_request_is_served_and_well_formed(server, path):
    fx = recorded(path)
    body = shortened(fx["body"])
    assert fx["path"].startswith("/v1/chat/completions"), fx["path"]      # every agent here speaks this wire
    with httpx.Client(base_url=server.url, timeout=900) as c:
        r = c.request(fx["method"], fx["path"], json=body, headers=fx["headers"])
    assert r.status_code == 200, r.text[:800]
    if body.get("stream"):
        assert r.headers["content-type"].startswith("text/event-stream")
        check_chat_stream(body, r.text)
    else:
        check_chat_completion(body, r.json())
