"""What every dialect shares: the Renderer contract and `serve()`, which runs an internal request and renders
it, streamed or not. A dialect is a parser (wire body -> GenerationRequest) plus a Renderer (the internal
result -> wire); see docs/architecture.md, "Adding an API dialect".
Covered by tests/unit/service/dialects/test_dialect_frames.py (the Renderer contract as serve() drives it)."""
from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import AsyncGenerator, AsyncIterator, Iterable

from aiohttp import web

from .. import appkeys as keys
from ..generation import pipeline
from ..generation.request import GenerationRequest
from ..generation.result import Finished, GenerationResult, TextDelta, ThinkingDelta, ToolCallEvent
from ..http.bodies import NDJSONWriter, SSEComment, SSEEvent
from ..http import request_log
from ..http.errors import ApiError

Frame = dict | str | SSEEvent | SSEComment   # one streamed message: a JSON object, a raw string (SSE's "[DONE]"), a named SSE event


class Renderer:
    """Turns one generation's result into a dialect's wire format. Streamed: `opening()` once the model is
    ready, `delta()` per TextDelta, `closing()` after the Finished event, or `error()` when it fails after the
    first byte was sent (before that, the error is the HTTP answer). Not streamed: `complete()`.
    Subclasses set `writer` (NDJSONWriter: one JSON object per line; SSEWriter: `data: ...` events)."""
    writer: type = NDJSONWriter

    def opening(self) -> Iterable[Frame]:
        return ()

    def delta(self, ev: TextDelta) -> Iterable[Frame]:
        raise NotImplementedError

    def thinking(self, ev: ThinkingDelta) -> Iterable[Frame]:
        """Reasoning text as it comes (dialects without a place for it show nothing)."""
        return ()

    def tool_call(self, ev: ToolCallEvent) -> Iterable[Frame]:
        """One complete tool call."""
        return ()

    def finished(self, ev: Finished) -> Iterable[Frame]:
        """The Finished event as it passes (most dialects say everything in closing() instead)."""
        return ()

    def closing(self, result: GenerationResult) -> Iterable[Frame]:
        raise NotImplementedError

    def error(self, err: ApiError) -> Iterable[Frame]:
        raise NotImplementedError

    def complete(self, result: GenerationResult) -> dict:
        raise NotImplementedError

    def keepalive(self) -> Iterable[Frame]:
        """Sent while a stream has had nothing to say for KEEPALIVE_S seconds (a long prompt being read): bytes
        that keep an idle-timing client on the line (Bun's fetch, which Claude Code and OpenCode run on, drops
        a connection after 5 minutes without a byte). Dialects whose wire has no such frame send nothing."""
        return ()


KEEPALIVE_S = 10.0          # Anthropic's API pings its streams on about this pace


async def paced(events: AsyncIterator, interval: float | None) -> AsyncGenerator:
    """`events` as they come, and None each time `interval` seconds pass without one (None: never). The pending
    step of `events` is never cancelled by the wait (that would end the generator), only when the consumer stops."""
    if interval is None:
        async for ev in events:
            yield ev
        return
    it = events.__aiter__()
    step: asyncio.Future | None = None
    try:
        while True:
            if step is None:
                step = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({step}, timeout=interval)
            if not done:
                yield None
                continue
            finished, step = step, None
            try:
                ev = finished.result()
            except StopAsyncIteration:
                return
            yield ev
    finally:
        if step is not None:
            step.cancel()
            await asyncio.gather(step, return_exceptions=True)


def context(request: web.Request):
    """(scheduler, store, metrics) of the app serving this request."""
    app = request.app
    return app[keys.SCHEDULER], app[keys.STORE], app[keys.METRICS]


async def serve(request: web.Request, req: GenerationRequest, make_renderer) -> web.StreamResponse:
    """Run `req` and answer in the renderer's format. `make_renderer(job)` builds the renderer once the model
    is resolved (some wire formats name the resolved model)."""
    scheduler, _, metrics = context(request)
    job = await pipeline.prepare(scheduler, req)
    renderer: Renderer = make_renderer(job)
    async with pipeline.generate(scheduler, metrics, job) as gen:
        await gen.start()               # the prompt fitted (or the context grown) before any byte: a 400 stays one
        if not req.stream:
            return web.json_response(renderer.complete(await gen.collect()), headers=gen.headers())
        w = renderer.writer(request)
        w.resp.headers.update(gen.headers())
        try:
            await _send(w, renderer.opening())
            pings = type(renderer).keepalive is not Renderer.keepalive      # only a wire that has a keepalive
            async with aclosing(paced(gen.events(), KEEPALIVE_S if pings else None)) as events:
                async for ev in events:
                    if ev is None:
                        await _send(w, renderer.keepalive())
                    elif isinstance(ev, TextDelta):
                        await _send(w, renderer.delta(ev))
                    elif isinstance(ev, ThinkingDelta):
                        await _send(w, renderer.thinking(ev))
                    elif isinstance(ev, ToolCallEvent):
                        await _send(w, renderer.tool_call(ev))
                    elif isinstance(ev, Finished):
                        await _send(w, renderer.finished(ev))
        except ApiError as e:
            if not w.resp.prepared:
                raise
            request_log.note_error(e.message)
            await _send(w, renderer.error(e))
            return await w.finish()
        await _send(w, renderer.closing(gen.result))
        return await w.finish()


async def _send(w, frames: Iterable[Frame]) -> None:
    for f in frames:
        await w.send(f)
