"""The request log survives a restart (http/request_history.py): requests answered by one service are listed,
with their bodies, by the next one started on the same data dir, searchable by client, model and status; one of
them replayed (`POST /api/requests/{id}/replay`) is answered again as it was (greedy: the same reply), and
listed as a new request that names the one it replays; the log exports as JSON lines. On SmolLM2 (the built-in
model), a few tokens a reply."""
from __future__ import annotations

import json

import httpx
import pytest

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL

pytestmark = pytest.mark.timeout(600)

FIELDS = {"n_threads": 2, "num_parallel": 1, "num_ctx": 1024}
CHAT = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "Name a colour."}],
        "options": {"num_predict": 6, "temperature": 0, "seed": 3}}


def test_yesterdays_requests_are_listed_after_a_restart_and_one_replays(live_service, smollm2_path):
    with live_service.running(**FIELDS) as first:
        home = first.home
        with httpx.Client(base_url=first.url, timeout=300,
                          headers={"User-Agent": "agent-x/1.0", "Authorization": "Bearer not-a-key"}) as c:
            r = c.post("/api/chat", json=CHAT)
            assert r.status_code == 200, r.text
            answer = r.json()["message"]["content"]
            assert c.post("/api/chat", json=dict(CHAT, model="no-such-model")).status_code == 404
            ids = [d["id"] for d in c.get("/api/requests").json()["requests"] if d["method"] == "POST"][:2]
    with live_service.running(home=home, **FIELDS) as second, httpx.Client(base_url=second.url, timeout=300) as c:
        listed = [d for d in c.get("/api/requests").json()["requests"] if d["id"] in ids]
        assert [d["id"] for d in listed] == ids and [d["status"] for d in listed] == [404, 200], listed
        chat = listed[1]
        assert chat["model"] == MODEL and chat["prompt_tokens"] > 0 and chat["completion_tokens"] > 0
        assert chat["state"] == "done" and chat["client"] == "agent-x/1.0"
        detail = c.get(f"/api/requests/{chat['id']}").json()
        assert json.loads(detail["request_body"]) == CHAT
        assert detail["headers"]["Authorization"] != "Bearer not-a-key"          # masked, on disk too
        # the search
        assert [d["id"] for d in c.get("/api/requests", params={"status": "error"}).json()["requests"]] == [ids[0]]
        assert [d["id"] for d in c.get("/api/requests", params={"client": "AGENT-X", "model": "smollm2"})
                .json()["requests"]] == [ids[1]]
        assert c.get("/api/requests", params={"client": "nobody"}).json()["requests"] == []
        # replayed: the same request again, answered the same (greedy), listed as a new request naming the old
        r = c.post(f"/api/requests/{chat['id']}/replay")
        assert r.status_code == 200, r.text
        replay = r.json()
        assert replay["status"] == 200 and replay["replayed"] == chat["id"] and replay["record"] > max(ids)
        again = c.get(f"/api/requests/{replay['record']}").json()
        assert again["replay_of"] == chat["id"] and again["path"] == "/api/chat" and again["model"] == MODEL
        assert again["prompt_tokens"] == chat["prompt_tokens"] and again["client"] == "agent-x/1.0"
        assert json.loads(again["reply_body"])["message"]["content"] == answer
        # exported as JSON lines, bodies included
        r = c.get("/api/requests", params={"format": "jsonl"})
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert r.headers["Content-Type"].startswith("application/x-ndjson")
        assert {ids[1], replay["record"]} <= {d["id"] for d in lines}
        assert all("request_body" in d for d in lines)


def test_a_request_whose_body_was_not_kept_whole_is_not_replayed(live_service):
    with live_service.running(request_bodies=False, **FIELDS) as svc, \
            httpx.Client(base_url=svc.url, timeout=300) as c:
        assert c.post("/api/show", json={"model": "no-such-model"}).status_code == 404
        rid = c.get("/api/requests").json()["requests"][0]["id"]
        detail = c.get(f"/api/requests/{rid}").json()
        assert detail["request_body"] == "" and detail["request_bytes"] > 0
        r = c.post(f"/api/requests/{rid}/replay")
        assert r.status_code == 409 and "not kept whole" in r.json()["error"]
