"""Many clients at once on one model with 4 slots: all complete; beyond slots + max_queue a 503 with
Retry-After; clients that disconnect mid-stream (or while queued) give their slot back."""
from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import httpx
import ollama
import pytest

from service_util import wait_for as _wait_for

MODEL = "smollm2:135m"
SLOTS, MAX_QUEUE = 4, 12


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=SLOTS, max_queue=MAX_QUEUE, keep_alive="10m")
    httpx.post(svc.url + "/api/generate", json={"model": MODEL}, timeout=120)      # load once for the module
    yield svc


def _strata(url: str) -> dict:
    models = httpx.get(url + "/api/ps", timeout=30).json()["models"]
    m = next((m for m in models if m["name"] == MODEL), None)
    return m["strata"] if m else {}


def test_sixteen_clients_on_four_slots_all_complete(server):
    client = ollama.Client(host=server.url)
    busy_seen: list[int] = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            busy_seen.append(_strata(server.url).get("slots_busy", 0))
            time.sleep(0.02)

    def one(i: int):
        return client.generate(model=MODEL, prompt=f"Write a word about the number {i}.",
                               options={"num_predict": 4, "temperature": 0.7, "seed": i})

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(one, range(16)))
    finally:
        stop.set()
        watcher.join()
    assert len(results) == 16
    assert all(r.done and 1 <= r.eval_count <= 4 and r.response for r in results)
    assert max(busy_seen) <= SLOTS                          # never more than the model's slots at once
    s = _strata(server.url)
    assert s["slots_busy"] == 0 and s["queued"] == 0


def _runner_stats(server):
    from app.service import appkeys

    model = server.app[appkeys.SCHEDULER].models[MODEL]
    return server.call(model.client.stats(), timeout=30)


def test_beyond_the_queue_is_503_and_disconnects_free_slots(server):
    steps_before = _runner_stats(server).steps
    # endless replies (no length limit, the end of text ignored, the context shifted when full): only a client that
    # goes away ends one, so every slot is still busy when the extra request comes, and idle slots at the end prove
    # the disconnects reached the runner, however fast it decodes
    long_job = {"model": MODEL, "prompt": "Tell a very long story.",
                "options": {"num_predict": -1, "ignore_eos": True, "temperature": 1.0}}
    first_lines: list[bytes] = []

    async def hold(session: aiohttp.ClientSession):
        async with session.post(server.url + "/api/generate", json=long_job) as resp:
            async for line in resp.content:
                first_lines.append(line)

    async def scenario():
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        holders = [asyncio.create_task(hold(session)) for _ in range(SLOTS + MAX_QUEUE)]
        try:
            await asyncio.to_thread(_wait_for, lambda: (lambda s: s.get("slots_busy") == SLOTS and
                                                        s.get("queued") == MAX_QUEUE)(_strata(server.url)),
                                    120, "4 busy + 12 queued")
            async with aiohttp.ClientSession() as other:
                async with other.post(server.url + "/api/generate",
                                      json={"model": MODEL, "prompt": "one more", "options": {"num_predict": 2}}) as r:
                    status, headers, body = r.status, r.headers, await r.json()
            while len(first_lines) < SLOTS:     # the running ones are mid-stream when they disconnect
                await asyncio.sleep(0.02)
            return status, headers, body
        finally:
            for t in holders:        # every client goes away mid-stream (4) or while queued (12)
                t.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
            await session.close()

    status, headers, body = asyncio.run(scenario())
    assert status == 503
    assert int(headers["Retry-After"]) >= 1
    assert "busy" in body["error"]
    _wait_for(lambda: (lambda s: s.get("slots_busy") == 0 and s.get("queued") == 0)(_strata(server.url)),
              120, "slots freed after disconnect")
    # ... and in the runner: its slots go idle, which endless requests do only when they are cancelled there
    _wait_for(lambda: _runner_stats(server).slots_busy == 0, 120, "runner slots idle")
    print(f"decode steps while holding: {_runner_stats(server).steps - steps_before}")
    r = ollama.Client(host=server.url).generate(model=MODEL, prompt="Hi", options={"num_predict": 2})
    assert r.done
    metrics = httpx.get(server.url + "/metrics").text
    assert f'strata_queue_rejected_total{{model="{MODEL}"}} 1' in metrics
