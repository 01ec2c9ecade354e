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


async def exchange(monkeypatch, path="/v1/responses", make=None, raw=None) -> list[dict]:
    """The stream's `data:` events; `raw` (when given) collects every line as sent, comments included."""
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
        if make is not None:
            return await make(request)
        req, wire = rp.parse_responses({"model": "m", "input": "hi", "stream": True})
        return await base.serve(request, req, lambda job: ResponsesRenderer("m", wire))

    app = web.Application()
    for key in (keys.SCHEDULER, keys.STORE, keys.METRICS):      # serve() only hands them to the stand-in
        app[key] = None
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    events = []
    try:
        async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}{path}", json={}) as r:
            assert r.status == 200
            async for line in r.content:
                if raw is not None:
                    raw.append(line)
                    if raw.count(b": keepalive\n") == 2:
                        gate.set()               # two comment keepalives seen: now the reply may come
                if line.startswith(b"data: ") and line != b"data: [DONE]\n":
                    events.append(json.loads(line[6:]))
                    if [e.get("type") for e in events].count("response.in_progress") == 3:
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


def test_an_openai_chat_stream_is_kept_alive_by_sse_comments(monkeypatch):
    """OpenAI's chat stream has no event for "still reading the prompt": an SSE comment keeps OpenCode (its chunk
    timeout) and Bun's idle limit on the line, and SSE parsers (the openai client's, the AI SDK's) skip it."""
    from app.service.dialects.openai import parse as op
    from app.service.dialects.openai.render import ChatRenderer

    async def chat(request):
        req, wire = op.parse_chat({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        return await base.serve(request, req, lambda job: ChatRenderer("m", wire, logprobs=False, top=0, id="c1"))

    raw: list[bytes] = []
    events = asyncio.run(exchange(monkeypatch, "/v1/chat/completions", chat, raw))
    first_text = next(i for i, line in enumerate(raw) if b'"content":"hi"' in line)
    assert raw.count(b": keepalive\n") >= 2 and raw.index(b": keepalive\n") < first_text
    assert raw[-2:] == [b"data: [DONE]\n", b"\n"]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"]) == "hi"
    assert events[-1]["choices"][0]["finish_reason"] == "stop" or any(
        c["choices"] and c["choices"][0]["finish_reason"] == "stop" for c in events)
