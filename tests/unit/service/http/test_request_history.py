"""The request log on disk (http/request_history.py) under the request log (http/request_log.py): finished work
requests outlive the log object (a restart of the service), ids go on from the last one, GET/HEAD polling is not
kept, the search filters by client, model and status, the bounds by count and bytes hold, bodies can be turned
off, and the cache report reaches the list with each anatomy part's cost at the measured prefill rate."""
from __future__ import annotations

from types import SimpleNamespace

from app.service.generation.result import Finished, GenerationResult
from app.service.http import request_history, request_log
from app.service.http.request_history import RequestHistory
from app.service.http.request_log import RequestLog


def req(method="POST", path="/v1/messages", agent="claude-cli/2.1.197 (external, cli)"):
    return SimpleNamespace(method=method, path=path, headers={"User-Agent": agent, "x-api-key": "sk-secret"})


def finish(log, rec, *, model="coder:0.5b", status=200, prompt=1000, cached=0, seconds=2.0, report=None):
    rec.model, rec.status = model, status
    result = GenerationResult(model=model)
    result.finished = Finished("stop", prompt, 4, seconds, 0.5, cached_tokens=cached, report=report)
    rec.result = result
    log.end(rec)


def test_finished_requests_outlive_the_log_and_ids_go_on(tmp_path):
    path = tmp_path / request_history.FILE_NAME
    log = RequestLog(history=RequestHistory(path))
    for _ in range(3):
        rec = log.begin(req())
        rec.headers = request_log.safe_headers(req().headers)       # (what the middleware does)
        token = request_log._current.set(rec)
        request_log.note_body(b'{"model": "coder:0.5b", "api_key": "sk-secret", "messages": []}')
        request_log._current.reset(token)
        finish(log, rec)
    log.end(log.begin(req("GET", "/api/tags")))             # polling is not kept on disk
    log.history.close()
    again = RequestLog(history=RequestHistory(path))
    rows = again.listing()
    assert [r["id"] for r in rows] == [3, 2, 1] and all(r["path"] == "/v1/messages" for r in rows)
    assert rows[0]["prompt_tokens"] == 1000 and rows[0]["status"] == 200 and rows[0]["state"] == "done"
    d = again.detail(2)
    assert '"messages": []' in d["request_body"] and "sk-secret" not in d["request_body"]
    assert d["headers"]["x-api-key"] == request_log.MASK
    assert again.begin(req()).id == 4                       # ids do not start again at 1
    again.history.close()


def test_the_search_filters_by_client_model_and_status(tmp_path):
    log = RequestLog(history=RequestHistory(tmp_path / "r.db"))
    finish(log, log.begin(req(agent="claude-cli/2.1")), model="coder:0.5b")
    finish(log, log.begin(req(agent="codex_exec/0.171")), model="coder:0.5b", status=404)
    finish(log, log.begin(req(agent="opencode/1.18")), model="qwen3:8b", status=500)
    log.history.flush()
    log._work.clear()                                       # as after a restart: only the disk has them
    assert [r["id"] for r in log.listing(client="CODEX")] == [2]
    assert [r["id"] for r in log.listing(model="coder")] == [2, 1]
    assert [r["id"] for r in log.listing(status="error")] == [3, 2]
    assert [r["id"] for r in log.listing(status="4xx")] == [2]
    assert [r["id"] for r in log.listing(status="ok")] == [1]
    assert [r["id"] for r in log.listing(status="500", model="qwen")] == [3]
    assert [r["id"] for r in log.listing(before=3, limit=1)] == [2]
    log.history.close()


def test_the_history_is_bounded_by_count_and_bytes(tmp_path):
    h = RequestHistory(tmp_path / "r.db", max_records=10, max_bytes=1 << 30)
    for i in range(1, 31):
        h.add({"id": i, "time": float(i), "method": "POST", "path": "/api/chat", "request_body": "x" * 1000})
    h.flush()
    h.prune()
    assert h.count()[0] == 10 and [r["id"] for r in h.search()] == list(range(30, 20, -1))
    h.max_bytes = 5 * 1100
    h.prune()
    n, size = h.count()
    assert size <= h.max_bytes and n >= 3 and h.search()[0]["id"] == 30
    h.close()


def test_bodies_can_be_left_out(tmp_path):
    log = RequestLog(history=RequestHistory(tmp_path / "r.db"), bodies=False)
    rec = log.begin(req())
    token = request_log._current.set(rec)
    request_log.note_body(b'{"messages": [{"role": "user", "content": "private"}]}')
    request_log._current.reset(token)
    finish(log, rec)
    log.history.flush()
    d = log.history.get(rec.id)
    assert d["request_body"] == "" and d["reply_body"] == "" and d["request_bytes"] > 0
    assert "private" not in str(log.detail(rec.id))
    log.history.close()


def test_the_cache_report_reaches_the_list_with_each_parts_cost():
    log = RequestLog()
    report = {"request": "r1", "prompt_tokens": 1000, "verdict": "changed", "cached": 100, "moved": 0,
              "source": "slot", "new_tail": 20, "recomputed_beyond_tail": 880, "candidates": {"slot": 100},
              "previous": {"request": "r0", "tokens": 990, "shared": 100},
              "divergence": {"token": 100, "part": {"kind": "message", "role": "user", "index": 1}},
              "anatomy": [{"kind": "system", "label": "system", "token": 0, "tokens": 400},
                          {"kind": "tool", "label": "Bash", "token": 400, "tokens": 600}]}
    rec = log.begin(req())
    finish(log, rec, prompt=1000, cached=100, seconds=2.0, report=report)     # 900 computed in 2 s: 450 tok/s
    listed = rec.to_dict()["cache"]
    assert listed["flagged"] and listed["verdict"] == "changed" and "anatomy" not in listed
    assert listed["prefill_rate"] == 450.0
    detail = rec.to_dict(detail=True)["cache"]
    assert [p["seconds"] for p in detail["anatomy"]] == [400 / 450, 600 / 450]
    assert "tools_unused" not in detail                     # (the report named no calls: no tools offered)
    report["tools_called"] = []
    rec = log.begin(req())
    finish(log, rec, prompt=1000, cached=100, seconds=2.0, report=report)
    assert rec.to_dict(detail=True)["cache"]["tools_unused"] == {"names": ["Bash"], "tokens": 600}
    # a prompt sent without its tools names the calls made, and no unused tools (it offered none)
    bare = dict(report, tools_called=["Bash"], anatomy=report["anatomy"][:1])
    rec = log.begin(req())
    finish(log, rec, prompt=1000, cached=100, seconds=2.0, report=bare)
    detail = rec.to_dict(detail=True)["cache"]
    assert detail["tools_called"] == ["Bash"] and "tools_unused" not in detail


def test_on_disk_the_anatomy_stays_with_the_detail(tmp_path):
    log = RequestLog(history=RequestHistory(tmp_path / "r.db"))
    report = {"request": "r1", "prompt_tokens": 10, "verdict": "new", "cached": 0, "new_tail": 10,
              "recomputed_beyond_tail": 0, "anatomy": [{"kind": "system", "label": "system", "token": 0,
                                                        "tokens": 10}]}
    rec = log.begin(req())
    finish(log, rec, prompt=10, report=report)
    log.history.flush()
    log._work.clear()
    listed = log.listing()[0]["cache"]
    assert listed["verdict"] == "new" and "anatomy" not in listed
    assert log.detail(rec.id)["cache"]["anatomy"][0]["tokens"] == 10
    log.history.close()
