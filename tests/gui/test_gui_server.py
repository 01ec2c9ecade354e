"""The Server window (pytest-qt, offscreen) against the real service and SmolLM2, fed by requests from the official
`ollama`, `openai` and `anthropic` clients: each request appears with the figures its client was answered with,
an error with its message, a selected request's timeline adds up to its time and is drawn to scale, credentials
are never shown, the plots move, and a closed window leaves the service's feed with no listener. A cache miss
is explained on its request (the divergence highlighted, the prompt's anatomy), a request copies as curl and
replays, and after a restart the window lists the earlier requests (the log on disk), searchable."""
from __future__ import annotations

import json
import math
import os
import time

import anthropic
import ollama
import openai
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from app.gui.server.server_data import COLUMNS, client_name
from app.gui.server.server_window import IdRole
from app.service import appkeys

WAIT = 180_000
SECRET_OPENAI = "sk-openai-SECRET-0123456789"
SECRET_ANTHROPIC = "sk-ant-SECRET-9876543210"
SECRET_OLLAMA = "Bearer ollama-SECRET-55555"


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return live_service(n_threads=2, num_parallel=2, num_ctx=2048)


@pytest.fixture
def desk(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=1000)
    qtbot.addWidget(d.chat)
    yield d
    d.shutdown()


@pytest.fixture
def win(qtbot, desk):
    w = desk.open_server()
    qtbot.waitUntil(lambda: w.connected, timeout=WAIT)
    return w


def record(qtbot, win, pred, what: str) -> dict:
    """The finished record the window holds that matches `pred`."""
    found: list[dict] = []

    def done():
        found[:] = [r for r in win.feed.records.values() if r.get("state") == "done" and pred(r)]
        return bool(found)
    qtbot.waitUntil(done, timeout=WAIT)
    return found[0]


def row_cells(win, rid: int) -> dict[str, str]:
    win.refresh_table()
    row = win.model.row_of(rid)
    assert row >= 0, f"request {rid} is not listed"
    return {c: win.model.data(win.model.index(row, i)) for i, c in enumerate(COLUMNS)}


def test_requests_of_the_official_clients_appear_with_their_figures(qtbot, desk, win, service):
    # the plots are deltas between samples: one sample before the requests, one after them (below)
    qtbot.waitUntil(lambda: len(win.feed.samples) >= 1, timeout=WAIT)
    oc = ollama.Client(host=service.url, headers={"Authorization": SECRET_OLLAMA})
    r1 = oc.chat(model=MODEL, messages=[{"role": "user", "content": "Say hi."}],
                 options={"num_predict": 8, "seed": 1})
    rec = record(qtbot, win, lambda r: r["path"] == "/api/chat" and r["client"].startswith("ollama-python"),
                 "ollama chat")
    assert rec["status"] == 200 and rec["model"] == MODEL and rec["dialect"] == "ollama"
    assert rec["prompt_tokens"] == r1.prompt_eval_count and rec["completion_tokens"] == r1.eval_count
    cells = row_cells(win, rec["id"])
    assert cells["Client"].startswith("ollama-python/") and cells["API"] == "ollama POST /api/chat"
    assert cells["Prompt"] == str(r1.prompt_eval_count) and cells["Reply"] == str(r1.eval_count)
    assert cells["Status"] == "200" and cells["Model"] == MODEL and cells["TTFT"].endswith(("ms", "s"))

    ai = openai.OpenAI(base_url=service.url + "/v1", api_key=SECRET_OPENAI, max_retries=0)
    usage = []
    for _ in range(2):              # the same prompt twice: the second one is served from the prompt cache
        stream = ai.chat.completions.create(
            model=MODEL, messages=[{"role": "system", "content": "You are terse. " * 30},
                                   {"role": "user", "content": "Count to three."}],
            max_tokens=8, seed=3, stream=True, stream_options={"include_usage": True})
        usage.append([c.usage for c in stream if c.usage][-1])
    recs = []
    for u in usage:
        recs.append(record(qtbot, win, lambda r, u=u: r["path"] == "/v1/chat/completions" and r not in recs
                           and r["prompt_tokens"] == u.prompt_tokens, "openai chat"))
    for r, u in zip(recs, usage):
        assert r["client"].startswith("OpenAI/Python") and r["dialect"] == "openai"
        assert r["completion_tokens"] == u.completion_tokens
        assert r["cached_tokens"] == u.prompt_tokens_details.cached_tokens
        assert r["ttft"] is not None and 0 < r["ttft"] <= r["duration"]
    assert max(r["cached_tokens"] for r in recs) > 0
    assert client_name(recs[0]["client"]).startswith("OpenAI/Python ")

    ac = anthropic.Anthropic(base_url=service.url, api_key=SECRET_ANTHROPIC, max_retries=0)
    m = ac.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hello"}])
    rec = record(qtbot, win, lambda r: r["path"] == "/v1/messages", "anthropic message")
    assert rec["client"].startswith("Anthropic/Python") and rec["dialect"] == "anthropic"
    assert rec["prompt_tokens"] == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    assert rec["completion_tokens"] == m.usage.output_tokens

    # the plots moved: tokens were generated, a slot was busy, the cache was hit, the model's memory is there
    requests_done = time.time()
    qtbot.waitUntil(lambda: win.feed.samples and float(win.feed.samples[-1]["time"]) > requests_done + 0.1,
                    timeout=WAIT)
    series = win.feed.series()
    assert max(series["generation tok/s"][1]) > 0
    assert max(series["prompt tok/s"][1]) > 0
    assert max(series["slots"][1]) == 2
    assert any(not math.isnan(v) and v > 0 for v in series["cache hit %"][1])
    assert max(series["memory weights"][1]) > 0 and max(series["memory kv"][1]) > 0
    assert win.curves["generation tok/s"].yData is not None and len(win.curves["generation tok/s"].yData)
    assert "weights" in win.memory_kinds()


def test_an_error_shows_its_message(qtbot, desk, win, service):
    ai = openai.OpenAI(base_url=service.url + "/v1", api_key=SECRET_OPENAI, max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        ai.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    rec = record(qtbot, win, lambda r: r["status"] == 404 and r["path"] == "/v1/chat/completions", "404")
    assert rec["model"] == "no-such-model" and "no-such-model" in rec["error"]
    assert rec["error"] in str(e.value)
    cells = row_cells(win, rec["id"])
    assert cells["Status"].startswith("404 ") and "no-such-model" in cells["Status"]
    row = win.model.row_of(rec["id"])
    assert win.model.data(win.model.index(row, COLUMNS.index("Status")), Qt.ForegroundRole) is not None

    oc = ollama.Client(host=service.url)
    with pytest.raises(ollama.ResponseError) as e2:
        oc.chat(model=MODEL, messages=[{"role": "user", "content": "x"}], options={"temperature": "hot"})
    rec = record(qtbot, win, lambda r: r["status"] == 400 and r["path"] == "/api/chat", "400")
    assert "temperature" in rec["error"] and rec["error"] in str(e2.value)
    win.select_request(rec["id"])
    qtbot.waitUntil(lambda: win.detail is not None and win.detail.get("id") == rec["id"], timeout=WAIT)
    assert "temperature" in win.reply_text.toPlainText()


def test_a_selected_request_shows_its_timeline_to_scale_and_no_credentials(qtbot, desk, win, service):
    ai = openai.OpenAI(base_url=service.url + "/v1", api_key=SECRET_OPENAI, max_retries=0)
    out = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}],
                                     max_tokens=12, seed=5)
    ac = anthropic.Anthropic(base_url=service.url, api_key=SECRET_ANTHROPIC, max_retries=0)
    ac.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    rec = record(qtbot, win, lambda r: r["path"] == "/v1/chat/completions" and r["status"] == 200
                 and r.get("completion_tokens") == out.usage.completion_tokens, "openai chat")
    win.refresh_table()
    row = win.model.row_of(rec["id"])
    rect = win.table.visualRect(win.model.index(row, 0))
    qtbot.mouseClick(win.table.viewport(), Qt.LeftButton, pos=rect.center())      # as a person selects it
    qtbot.waitUntil(lambda: win.detail is not None and win.detail.get("id") == rec["id"], timeout=WAIT)
    assert win.selected_id == win.model.data(win.model.index(row, 0), IdRole) == rec["id"]
    parts = win.timeline.parts()
    assert [n for n, _, _ in parts] == ["prepare", "load", "queued", "prefill", "decode", "finish"]
    assert abs(sum(s for _, _, s in parts) - rec["duration"]) < 1e-6
    assert all(s >= 0 for _, _, s in parts)
    # drawn to scale: each part's width is its share of the bar, and the parts follow each other
    rects = win.timeline.segment_rects()
    bar = sum(r.width() for _, r in rects)
    for (name, r), (_, _, secs) in zip(rects, parts):
        assert abs(r.width() / bar - secs / rec["duration"]) < 1e-6, name
    for (_, a), (_, b) in zip(rects, rects[1:]):
        assert abs(a.right() - b.left()) < 1e-6
    # the first token comes after prefill, at the time to first token the record says
    prefill_end = sum(s for n, _, s in parts if n in ("prepare", "load", "queued", "prefill"))
    assert abs(prefill_end - rec["ttft"]) < 1e-6
    assert win.timeline.grab().width() > 0
    request_text = win.request_text.toPlainText()
    assert "Authorization: •••" in request_text and SECRET_OPENAI not in request_text
    assert '"Name a colour."' in request_text
    reply = json.loads(win.reply_text.toPlainText())           # the answer as sent, indented
    assert reply["choices"][0]["message"]["content"] == out.choices[0].message.content
    # nothing the window shows holds a secret (the anthropic client's x-api-key included)
    win.refresh_table()
    for r in list(win.model.rows):
        win.select_request(r["id"])
        qtbot.waitUntil(lambda r=r: win.detail is not None and win.detail.get("id") == r["id"], timeout=WAIT)
        shown = win.request_text.toPlainText() + win.reply_text.toPlainText() + win.summary.text()
        for secret in (SECRET_OPENAI, SECRET_ANTHROPIC, SECRET_OLLAMA.split()[1]):
            assert secret not in shown
    assert SECRET_ANTHROPIC not in json.dumps([desk.bridge.loop_thread.submit(
        desk.bridge.client.request_detail(r["id"])).result(30) for r in win.feed.ordered()])


def test_a_request_that_waited_for_a_slot_says_so(qtbot, desk, win, service):
    """A reply asked for while both slots are taken waits, and its row and timeline say how long. The test holds the
    two slots itself (as two running replies would) until the request is seen waiting in the queue: how long the
    wait is does not depend on how fast anything runs."""
    import threading

    from app.service.http.request_log import QUEUED_AFTER
    from service_util import HeldSlots

    oc = ollama.Client(host=service.url)
    slots = HeldSlots(service, MODEL, 2)
    waiting = threading.Thread(target=oc.generate, kwargs=dict(model=MODEL, prompt="Write a story about a cat.",
                                                               options={"num_predict": 8, "seed": 1}))
    try:
        waiting.start()
        scheduler = service.app[appkeys.SCHEDULER]
        qtbot.waitUntil(lambda: MODEL in scheduler.models and scheduler.models[MODEL].queued == 1, timeout=WAIT)
        time.sleep(2 * QUEUED_AFTER)          # at least the wait that counts as "queued" (a floor, not a bound)
    finally:
        slots.release()
    qtbot.waitUntil(lambda: not waiting.is_alive(), timeout=WAIT)
    rec = record(qtbot, win, lambda r: r["path"] == "/api/generate" and r["queued"], "a queued request")
    queued = dict((n, s) for n, s in rec["phases"])["queued"]
    assert queued == pytest.approx(rec["queue_wait"]) and queued >= QUEUED_AFTER
    assert row_cells(win, rec["id"])["Queued"].startswith("yes, ")


def test_the_window_listens_only_while_open_and_exports_on_request(qtbot, desk, win, service, tmp_path):
    bus = service.app[appkeys.EVENTS]
    assert bus.wants("request")
    ollama.Client(host=service.url).list()
    qtbot.waitUntil(lambda: any(r["path"] == "/api/tags" and r["client"].startswith("ollama-python")
                                for r in win.feed.records.values()), timeout=WAIT)
    # the app's own polling is listed only on request
    assert not any(r["client"].startswith("strata-desktop") and r["method"] == "GET" for r in win.model.rows)
    win.hide_own.setChecked(False)
    qtbot.waitUntil(lambda: any(r["client"].startswith("strata-desktop") for r in win.model.rows), timeout=WAIT)
    path = win.export(str(tmp_path / "requests.json"))
    assert len(json.load(open(path))["requests"]) == len(win.model.rows)
    desk.follow_system_theme(dark=True)                 # the plots follow the colour scheme
    qtbot.waitUntil(lambda: win.plots.backgroundBrush().color().lightness() < 128, timeout=WAIT)
    desk.follow_system_theme(dark=False)
    qtbot.waitUntil(lambda: win.plots.backgroundBrush().color().lightness() > 128, timeout=WAIT)
    win.close()
    qtbot.waitUntil(lambda: not bus.wants("request"), timeout=WAIT)
    assert not win.listening
    desk.open_server()                                  # opened again: it listens again, the log still there
    qtbot.waitUntil(lambda: win.connected and bus.wants("request"), timeout=WAIT)
    qtbot.waitUntil(lambda: any(r["path"] == "/api/tags" for r in win.feed.records.values()), timeout=WAIT)


def test_a_cache_miss_is_explained_on_the_request_which_copies_as_curl_and_replays(qtbot, desk, win, service):
    """One early byte of the system prompt changed between two requests (the day): the second request's Reuse
    cell is marked, its Cache tab shows the divergence with the old and the new text highlighted, the anatomy
    bar adds up to the prompt, the parts sort by their tokens; "Copy as curl" leaves the credential out and
    "Replay" sends it again, listed as a replay of it."""
    assert QGuiApplication.platformName() == os.environ.get("QT_QPA_PLATFORM", "offscreen")   # (xcb: test_gui_xvfb)
    ai = openai.OpenAI(base_url=service.url + "/v1", api_key=SECRET_OPENAI, max_retries=0)
    rule = "Answer briefly and plainly, in one sentence, without lists, headings or code. " * 5
    for day in ("Monday", "Tuesday"):
        ai.chat.completions.create(model=MODEL, max_tokens=2, temperature=0, messages=[
            {"role": "system", "content": f"Today is {day}. {rule}"}, {"role": "user", "content": "Say hi."}])
    rec = record(qtbot, win, lambda r: (r.get("cache") or {}).get("verdict") == "changed"
                 and "Today is Tuesday" in r["cache"]["divergence"]["part"]["label"], "the changed request")
    cells = row_cells(win, rec["id"])
    assert cells["Reuse"] == "⚠ changed at system #0", cells
    row = win.model.row_of(rec["id"])
    assert win.model.data(win.model.index(row, COLUMNS.index("Reuse")), Qt.ForegroundRole) is not None
    win.select_request(rec["id"])
    qtbot.waitUntil(lambda: win.detail is not None and win.detail.get("id") == rec["id"], timeout=WAIT)
    div = win.detail["cache"]["divergence"]
    assert div["before"].endswith("Today is ") and (div["old"], div["new"]) == ("Mon", "Tues"), div
    html = win.cache_text.toHtml()
    assert "Mon</span>" in html and "Tues</span>" in html and "system #0" in win.cache_text.toPlainText()
    segments = win.anatomy.segments
    assert sum(s["tokens"] for s in segments) == rec["prompt_tokens"]
    assert {s["kind"] for s in segments} >= {"system", "message"}
    assert sum(s["tokens"] for s in segments if s["computed"]) == rec["prompt_tokens"] - rec["cached_tokens"]
    table = win.parts_table
    assert table.rowCount() == len(win.detail["cache"]["anatomy"])
    table.sortItems(1, Qt.DescendingOrder)                          # by tokens
    tokens = [int(table.item(i, 1).text().replace(",", "")) for i in range(table.rowCount())]
    assert tokens == sorted(tokens, reverse=True)
    curl = win.copy_as_curl()
    assert curl.startswith("curl ") and "/v1/chat/completions" in curl and "--data-binary" in curl
    assert SECRET_OPENAI not in curl and "$STRATA_API_KEY" in curl and "Tuesday" in curl
    assert QApplication.clipboard().text() == curl
    qtbot.waitUntil(win.replay_button.isEnabled, timeout=WAIT)
    qtbot.mouseClick(win.replay_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: win.replayed is not None, timeout=WAIT)
    assert win.replayed["status"] == 200 and win.replayed["replayed"] == rec["id"]
    again = record(qtbot, win, lambda r: r.get("replay_of") == rec["id"], "the replay")
    assert again["prompt_tokens"] == rec["prompt_tokens"] and again["model"] == MODEL
    # the search: errors only, then everything again
    win.filter_status.setCurrentText("error")
    qtbot.waitUntil(lambda: all((r.get("status") or 0) >= 400 for r in win.model.rows), timeout=WAIT)
    win.filter_status.setCurrentText("any status")
    qtbot.waitUntil(lambda: win.model.row_of(again["id"]) >= 0, timeout=WAIT)


def test_after_a_restart_the_window_lists_the_earlier_requests(qtbot, live_service):
    """`strata serve` stopped and started again on the same data dir: the Server window of the new one lists the
    requests the old one answered (the request log on disk), and the search finds them by client and status."""
    from app.gui.desktop import Desktop

    with live_service.running(n_threads=1, num_parallel=1, num_ctx=512) as old:
        home = old.home
        oc = ollama.Client(host=old.url)
        with pytest.raises(ollama.ResponseError):
            oc.show("no-such-model")
        oc.show(MODEL)
    with live_service.running(home=home, n_threads=1, num_parallel=1, num_ctx=512) as new:
        d = Desktop(new.url, use_tray=False, poll_ms=1000)
        qtbot.addWidget(d.chat)
        try:
            w = d.open_server()
            qtbot.waitUntil(lambda: w.connected, timeout=WAIT)
            earlier = record(qtbot, w, lambda r: r["path"] == "/api/show" and r["status"] == 404, "earlier 404")
            assert earlier["client"].startswith("ollama-python") and "no-such-model" in earlier["error"]
            record(qtbot, w, lambda r: r["path"] == "/api/show" and r["status"] == 200, "earlier show")
            w.filter_client.setText("ollama-python")
            w.filter_status.setCurrentText("4xx")
            qtbot.waitUntil(lambda: [r["id"] for r in w.model.rows] == [earlier["id"]], timeout=WAIT)
        finally:
            d.shutdown()
