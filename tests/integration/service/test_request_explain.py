"""The cache-miss explainer and the prompt anatomy on recorded agent sessions, end to end: a live server, the
recorded requests of Claude Code and Codex (tests/support/fixtures/agents/) sent as they were, and what
`GET /api/requests` says about each (runner/cache/explain.py, http/request_log.cache_summary).

- A recorded Claude Code session that only appends: every request after the first "reused all but the new tail"
  (verdict `tail`, nothing computed beyond it), from the slot.
- The same session where one early byte changed (the date in the first message's reminder: what a proxy or a new
  day does): the request shows the divergence at that message (role user, its index), with the characters either
  side in both versions ("...date is 2026-11-2" | "7" -> "8"), and is flagged as having recomputed more than its
  new tail; a changed byte in the system prompt names the system message.
- The anatomy of a Claude Code and a Codex first request: its parts' tokens add up to the prompt's, each offered
  tool is a part of its own.
On the Qwen2.5-Coder fixture's tokenizer twin (agent_replay.write_tokenizer_twin: its tokens, random weights, so
a 20k-token prompt costs seconds); nothing depends on timing or on what the model says."""
from __future__ import annotations

import json

import httpx
import pytest

from agent_replay import serve_model, write_tokenizer_twin
from repo_paths import FIXTURES

pytestmark = pytest.mark.timeout(900)

TWIN = "coder-twin:random"
CLAUDE = FIXTURES / "agents" / "claude-code"
CODEX = FIXTURES / "agents" / "codex" / "custom-provider" / "001-post-v1_responses.json"


@pytest.fixture(scope="module")
def http(live_service, qwen_coder_path, tmp_path_factory):
    gguf = write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf")
    svc = serve_model(live_service, gguf, TWIN, num_ctx=32768, num_parallel=1, keep_alive="10m",
                      max_body=8 * 1024 * 1024)
    with httpx.Client(base_url=svc.url, timeout=None) as c:
        yield c


def session() -> list[dict]:
    bodies = [json.loads(line) for line in (CLAUDE / "session-8-requests.jsonl").read_text("utf-8").splitlines()]
    return [dict({k: v for k, v in b.items() if k != "thinking"}, model=TWIN, max_tokens=1, stream=False,
                 temperature=0) for b in bodies]


def send(http, body: dict, path: str = "/v1/messages") -> dict:
    """Send one request; -> its record in the log (with the anatomy: the detail view)."""
    r = http.post(path, json=body)
    assert r.status_code == 200, r.text
    newest = http.get("/api/requests").json()["requests"][0]
    assert newest["path"] == path and newest["state"] == "done", newest
    return http.get(f"/api/requests/{newest['id']}").json()


def with_date(body: dict, date: str) -> dict:
    msgs = [dict(m) for m in body["messages"]]
    msgs[0]["content"] = [dict(c, text=c["text"].replace("Today's date is 2026-11-27", f"Today's date is {date}"))
                          for c in msgs[0]["content"]]
    assert msgs != body["messages"]
    return dict(body, messages=msgs)


def test_a_recorded_session_reuses_all_but_each_new_tail_and_a_changed_date_is_shown(http):
    bodies = session()[:4]
    first = send(http, bodies[0])["cache"]
    assert first["verdict"] in ("new", "tail", "branched"), first     # (an earlier test's prompts may be kept)
    records = [send(http, b) for b in bodies[1:3]]
    for rec, body in zip(records, bodies[1:3]):
        c = rec["cache"]
        assert c["verdict"] == "tail" and c["source"] == "slot" and not c["flagged"], c
        assert c["recomputed_beyond_tail"] == 0 and c["new_tail"] == rec["prompt_tokens"] - rec["cached_tokens"]
        assert c["previous"]["shared"] == c["previous"]["tokens"] and c["previous"]["record"] == rec["id"] - 1
        # the tools the session called so far, and what the others' schemas cost
        tools = {p["label"]: p["tokens"] for p in c["anatomy"] if p["kind"] == "tool"}
        called = set(c["tools_called"])
        assert called and called <= set(tools) and c["tools_unused"] == {
            "names": [n for n in tools if n not in called], "tokens": sum(t for n, t in tools.items() if n not in called)}
    # the next request, with the date in the first message's reminder changed (one byte)
    rec = send(http, with_date(bodies[3], "2026-11-28"))
    c = rec["cache"]
    div = c["divergence"]
    assert c["verdict"] == "changed" and c["flagged"], c
    # what followed the date up to the previous prompt's end was the same: computed again, beyond the new tail
    assert c["recomputed_beyond_tail"] == div["repeated_after"] > 100, c
    assert div["part"]["kind"] == "message" and div["part"]["role"] == "user" and div["part"]["index"] == 1, div
    assert div["before"].endswith("Today's date is 2026-11-2"), div
    assert (div["old"], div["new"]) == ("7", "8"), div
    assert div["after_new"].startswith(".") and div["after_new"] == div["after_old"], div
    assert rec["cached_tokens"] <= div["token"] < rec["prompt_tokens"]
    assert c["previous"]["record"] == rec["id"] - 1


def test_a_changed_byte_in_the_system_prompt_names_the_system_message(http):
    body = session()[0]
    send(http, body)
    system = [dict(b) for b in body["system"]]
    i = next(i for i, b in enumerate(system) if "interactive agent" in b["text"])
    system[i]["text"] = system[i]["text"].replace("interactive agent", "interactive agent!", 1)
    c = send(http, dict(body, system=system))["cache"]
    div = c["divergence"]
    assert div["part"]["kind"] == "system" and div["part"]["index"] == 0, div
    assert div["before"].endswith("interactive agent") and div["new"].startswith("!") and not div["old"].startswith(
        "!"), div
    assert c["flagged"], c


def anatomy_sums(rec: dict, tools: list[str]) -> list[dict]:
    """The record's anatomy: its parts' tokens add up to the prompt's, in order from 0, and `tools` (in their
    order) are parts of their own (a Codex namespace's tools, which the dialect offers as "namespace.name", too)."""
    parts = rec["cache"]["anatomy"]
    assert sum(p["tokens"] for p in parts) == rec["prompt_tokens"], parts
    assert [p["token"] for p in parts] == sorted(p["token"] for p in parts) and parts[0]["token"] == 0
    assert [p["label"] for p in parts if p["kind"] == "tool" and "." not in p["label"]] == tools
    assert all(p["tokens"] > 0 for p in parts)
    return parts


def test_the_anatomy_of_a_claude_code_first_request_sums_to_its_prompt(http):
    body = json.loads((CLAUDE / "full-01-first-request.json").read_text("utf-8"))["request"]["body"]["json"]
    body = dict({k: v for k, v in body.items() if k != "thinking"}, model=TWIN, max_tokens=1, stream=False)
    rec = send(http, body)
    parts = anatomy_sums(rec, [t["name"] for t in body["tools"] if "name" in t and "input_schema" in t])
    kinds = {p["kind"] for p in parts}
    assert {"system", "tool", "message"} <= kinds
    tools = sum(p["tokens"] for p in parts if p["kind"] == "tool")
    assert tools > rec["prompt_tokens"] / 2           # Claude Code's prompt is mostly its tools' schemas
    assert rec["cache"]["prefill_rate"] is None or all(p["seconds"] is not None for p in parts)


def test_the_anatomy_of_a_codex_first_request_sums_to_its_prompt(http):
    body = json.loads(CODEX.read_text("utf-8"))["request"]["body"]["json"]
    body = dict(body, model=TWIN, max_output_tokens=16, stream=False)
    rec = send(http, body, "/v1/responses")
    names = [t.get("name") or t.get("function", {}).get("name") for t in body.get("tools") or ()
             if t.get("type") == "function"]
    parts = anatomy_sums(rec, names)
    assert any(p["kind"] == "system" for p in parts)
    assert any(p["kind"] == "tool" and p["label"].startswith("multi_agent_v1.") for p in parts)
