"""serve()'s keepalive: a stream with nothing to say for KEEPALIVE_S seconds (a long prompt still being read) sends
its renderer's keepalive frames, so a client with an idle limit (Codex: 5 minutes without a Responses event)
keeps waiting; the generation itself is never interrupted by it.

A real aiohttp server on loopback runs `dialects/base.serve` with the Responses renderer; the generation is a
stand-in whose first event waits until the client has seen a keepalive, so the order is fixed by the events
themselves, not by how long anything takes."""
from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
from aiohttp import web

from app.service import appkeys as keys
from app.service.dialects import base
from app.service.dialects.responses import parse as rp
from app.service.dialects.responses.render import ResponsesRenderer
from app.service.generation.result import Finished, GenerationResult, TextDelta


class StandIn:
    """What serve() uses of a pipeline Generation; its events wait for `gate`."""

    def __init__(self, gate: asyncio.Event):
        self.gate = gate
        self.result = GenerationResult(model="m")

    async def start(self):
        pass

    def headers(self):
        return {}

    async def events(self):
        await self.gate.wait()
        for ev in (TextDelta("hi"), Finished(reason="stop", prompt_tokens=3, completion_tokens=1,
                                             prompt_seconds=0.1, generation_seconds=0.1)):
            self.result.add(ev)
            yield ev


async def exchange(monkeypatch) -> list[dict]:
    gate = asyncio.Event()

    async def prepare(scheduler, req):
        return object()

    @contextlib.asynccontextmanager
    async def generate(scheduler, metrics, job):
        yield StandIn(gate)

    monkeypatch.setattr(base.pipeline, "prepare", prepare)
    monkeypatch.setattr(base.pipeline, "generate", generate)
    monkeypatch.setattr(base, "KEEPALIVE_S", 0.05)

    async def handler(request):
        req, wire = rp.parse_responses({"model": "m", "input": "hi", "stream": True})
        return await base.serve(request, req, lambda job: ResponsesRenderer("m", wire))

    app = web.Application()
    for key in (keys.SCHEDULER, keys.STORE, keys.METRICS):      # serve() only hands them to the stand-in
        app[key] = None
    app.router.add_post("/v1/responses", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    events = []
    try:
        async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/v1/responses", json={}) as r:
            assert r.status == 200
            async for line in r.content:
                if line.startswith(b"data: "):
                    events.append(json.loads(line[6:]))
                    if [e["type"] for e in events].count("response.in_progress") == 3:
                        gate.set()               # two keepalives seen: now the reply may come
    finally:
        await runner.cleanup()
    return events


def test_a_quiet_stream_sends_keepalives_then_the_reply(monkeypatch):
    events = asyncio.run(exchange(monkeypatch))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.in_progress",
                         "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "hi"


def test_renderers_without_a_keepalive_send_nothing():
    assert list(base.Renderer().keepalive()) == []
