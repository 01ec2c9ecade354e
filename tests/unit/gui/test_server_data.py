"""What the Server window shows, without Qt (app/gui/server/server_data.py): the feed's plots from stats samples,
a request's timeline and cells, a lost end event settled, clients named from their User-Agent, a long prompt's
progress."""
from __future__ import annotations

from app.gui.server.server_data import ServerFeed, cell, client_name, timeline


def test_the_feed_spreads_a_prompt_over_its_prefill_and_keeps_the_window():
    feed = ServerFeed(window_s=60)
    rec = {"id": 1, "state": "done", "time": 1000.0, "prompt_tokens": 300, "cached_tokens": 100,
           "phases": [["prepare", 0.5], ["load", 0.0], ["queued", 0.0], ["prefill", 2.0], ["decode", 1.0],
                      ["finish", 0.0]], "duration": 3.5}
    feed.upsert(rec)
    for i in range(5):
        feed.add_sample({"time": 1000.0 + i, "output_tokens": 10 * i, "prompt_tokens": 0, "cached_tokens": 0,
                         "slots_busy": 1, "slots_total": 2, "queued": 0, "memory": {"weights": 5}})
    s = feed.series(now=1004.0)
    assert abs(sum(s["prompt tok/s"][1]) - 200) < 1e-9           # only the processed tokens, spread over prefill
    assert set(s["generation tok/s"][1]) == {10.0}
    assert [n for n, _, _ in timeline(rec)] == ["prepare", "load", "queued", "prefill", "decode", "finish"]
    assert cell(rec, "Prompt") == "300" and cell(rec, "Cached") == "100"
    # a request whose end event was lost, and that the service's log no longer holds, stops counting as running
    feed.upsert({"id": 2, "state": "running", "time": 1003.0, "phases": [["answer", 0.1]], "status": None})
    assert feed.running() == 1
    feed.settle_missing({1})
    assert feed.running() == 0 and cell(feed.records[2], "Status") == "? its end was not received"
    assert client_name("claude-cli/2.1.3 (external, cli)") == "claude-cli/2.1.3"
    assert client_name("ollama-python/0.4.7 (x86_64 linux) Python/3.11.2") == "ollama-python/0.4.7"
    assert client_name("Python/3.11 aiohttp/3.9.5") == "aiohttp/3.9.5"
    assert client_name("") == "(no User-Agent)"
    # a running request whose long prompt is being read: how far, and the time left at the measured rate
    feed.upsert({"id": 3, "state": "running", "time": 1004.0, "status": None, "phases": [["prefill", 2.0]],
                 "progress": {"total": 10000, "cached": 0, "processed": 4200, "seconds": 2.0, "rate": 2100.0,
                              "eta": 5800 / 2100}})
    assert cell(feed.records[3], "Status") == "reading the prompt 42% (10,000 tokens), about 2762 ms left"
