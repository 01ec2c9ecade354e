"""The request log's pure parts (http/request_log.py): credentials never kept, error messages of every dialect's
error body, a timeline whose parts add up to the request's time, the rings' bounds, and the event bus sending
`request` events only to a subscriber that asked (so a service nobody watches builds none). The log fed by real
requests from the official clients: tests/gui/test_gui_server.py."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from app.service.generation.result import Finished, GenerationResult, TextDelta
from app.service.http.events import EventBus
from app.service.http.request_log import (
    BODY_LIMIT, MASK, RequestLog, RequestRecord, dialect_of, error_message, safe_headers, safe_text,
)


def test_credentials_in_headers_and_json_bodies_are_masked():
    h = safe_headers({"Authorization": "Bearer sk-secret-1", "x-api-key": "sk-ant-2", "Cookie": "s=3",
                      "X-Goog-Api-Key": "g4", "User-Agent": "claude-cli/2.1", "Content-Type": "application/json"})
    assert h == {"Authorization": MASK, "x-api-key": MASK, "Cookie": MASK, "X-Goog-Api-Key": MASK,
                 "User-Agent": "claude-cli/2.1", "Content-Type": "application/json"}
    text = safe_text(b'{"model": "m", "api_key": "sk-5", "options": {"password": "p\\"w"}, "max_tokens": 3}')
    assert "sk-5" not in text and 'p\\"w' not in text and '"max_tokens": 3' in text and '"model": "m"' in text


def test_bodies_are_kept_up_to_the_bound():
    assert len(safe_text(b"x" * (BODY_LIMIT * 3))) == BODY_LIMIT
    assert safe_text("é" * 10) == "é" * 10


def test_the_error_message_of_each_dialects_body():
    assert error_message(b'{"error": "model \'nope\' not found"}') == "model 'nope' not found"
    assert error_message(b'{"error": {"message": "bad temperature", "type": "invalid_request_error"}}') == \
        "bad temperature"
    assert error_message(b'{"type": "error", "error": {"type": "not_found_error", "message": "no model"}}') == \
        "no model"
    assert error_message(b"Bad Gateway") == "Bad Gateway"


def test_dialect_of_a_path():
    assert [dialect_of(p) for p in ("/api/chat", "/api/tags", "/v1/chat/completions", "/v1/messages",
                                    "/v1/messages/count_tokens", "/v1/responses", "/api/rerank", "/api/layout",
                                    "/metrics")] == \
        ["ollama", "ollama", "openai", "anthropic", "anthropic", "openai responses", "rerank", "strata", "strata"]


def test_a_generations_timeline_adds_up_to_its_time():
    rec = RequestRecord(1, "POST", "/api/chat", "ollama-python/0.4")
    rec.t0 = 100.0
    result = GenerationResult(model="m")
    rec.t_slot, rec.load_wait, rec.queue_wait = 103.0, 2.0, 0.5
    result.first_output, result.finished_at = 104.25, 107.0
    result.finished = Finished("stop", 20, 8, 1.0, 2.75, cached_tokens=12, draft_tokens=6, draft_accepted=4)
    rec.result, rec.t_end = result, 107.5
    phases = dict(rec.phases())
    assert phases == {"prepare": 0.5, "load": 2.0, "queued": 0.5, "prefill": 1.25, "decode": 2.75, "finish": 0.5}
    d = rec.to_dict()
    assert sum(s for _, s in d["phases"]) == d["duration"] == 7.5
    assert d["ttft"] == 4.25 and d["queued"] and d["cached_tokens"] == 12 and d["completion_tokens"] == 8
    assert d["drafted"] == 6 and d["accepted"] == 4 and abs(d["tokens_per_second"] - 8 / 2.75) < 1e-9
    # a request refused before any output: what it passed, then the rest as one part
    rec2 = RequestRecord(2, "POST", "/api/chat", "")
    rec2.t0, rec2.t_end = 10.0, 10.25
    assert rec2.phases() == [("answer", 0.25)]


def test_the_result_marks_its_first_output_and_counts_streamed_tokens():
    r = GenerationResult(model="m")
    r.add(TextDelta("a", n_tokens=2))
    first = r.first_output
    r.add(TextDelta("b"))
    r.add(Finished("stop", 1, 3, 0.1, 0.2))
    assert first is not None and r.first_output == first and r.finished_at >= first and r.output_tokens == 3


def test_the_rings_are_bounded_and_reads_cannot_push_out_generations():
    log = RequestLog(ring=3, ring_reads=2)

    def req(method):
        return SimpleNamespace(method=method, path="/api/chat" if method == "POST" else "/api/tags", headers={})
    for _ in range(5):
        log.end(log.begin(req("POST")))
    for _ in range(50):
        log.end(log.begin(req("GET")))
    recs = log.records()
    assert [r.method for r in recs].count("POST") == 3 and [r.method for r in recs].count("GET") == 2
    assert [r.id for r in recs] == sorted((r.id for r in recs), reverse=True)
    assert log.get(1) is None and log.get(5) is not None and log.totals()["requests"] == 55


def test_request_events_go_only_to_subscribers_that_asked():
    async def run():
        bus = EventBus()
        log = RequestLog(bus)
        req = SimpleNamespace(method="POST", path="/api/chat", headers={"User-Agent": "x"})
        with bus.subscribe() as plain:
            assert not bus.wants("request")
            log.end(log.begin(req))
            assert plain.empty()
            with bus.subscribe({"request"}) as watcher:
                assert bus.wants("request")
                bus.publish("loaded", {"model": "m"})
                rec = log.begin(req)
                log.end(rec)
                got = [watcher.get_nowait() for _ in range(watcher.qsize())]
                assert [e.type for e in got] == ["loaded", "request", "request"]
                assert got[1].data["state"] == "running" and got[2].data["state"] == "done"
                assert [e.type for e in [plain.get_nowait() for _ in range(plain.qsize())]] == ["loaded"]
    asyncio.run(run())
