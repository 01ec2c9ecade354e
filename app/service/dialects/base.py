"""What every dialect shares: the Renderer contract and `serve()`, which runs an internal request and renders
it, streamed or not. A dialect is a parser (wire body -> GenerationRequest) plus a Renderer (the internal
result -> wire); see docs/architecture.md, "Adding an API dialect".
Covered by tests/unit/service/dialects/test_dialect_frames.py (the Renderer contract as serve() drives it)."""
from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, AsyncGenerator, AsyncIterator, Iterable

from aiohttp import web

from .. import appkeys as keys
from ..generation import pipeline
from ..generation.request import GenerationRequest
from ..generation.result import (Finished, GenerationResult, PromptProgress, TextDelta, ThinkingDelta,
                                 ToolCallArguments, ToolCallEvent, ToolCallStart)
from ..http.bodies import NDJSONWriter, SSEComment, SSEEvent
from ..http import request_log
from ..http.errors import ApiError
from ..http.metrics import Metrics
from ..scheduling.door import ServiceHost
from ..store.proxy import AsyncStore
from . import whole

Frame = dict | str | SSEEvent | SSEComment   # one streamed message: a JSON object, a raw string (SSE's "[DONE]"), a named SSE event


class Renderer:
    """Turns one generation's result into a dialect's wire format. Streamed: `opening()` once the model is
    ready, `delta()` per TextDelta, `closing()` after the Finished event, or `error()` when it fails after the
    first byte was sent (before that, the error is the HTTP answer). Not streamed: `complete()`.
    Subclasses set `writer` (NDJSONWriter: one JSON object per line; SSEWriter: `data: ...` events)."""
    writer: type = NDJSONWriter
    # What the headers could not carry: the fit's facts (pipeline.context_facts: num_ctx, reply_room, ...) of a
    # stream that opened before its prompt was fitted, set by serve(); closing() puts it in the stream's final
    # event as `strata` (empty: the headers said it all)
    trailer: dict = {}
    # a stream of this wire shows a tool call in pieces as the model writes it (tool_call_start, then
    # tool_call_arguments, then tool_call at its end); False: only tool_call, once the call is complete
    call_pieces: bool = False

    def opening(self) -> Iterable[Frame]:
        return ()

    def delta(self, ev: TextDelta) -> Iterable[Frame]:
        raise NotImplementedError

    def thinking(self, ev: ThinkingDelta) -> Iterable[Frame]:
        """Reasoning text as it comes (dialects without a place for it show nothing)."""
        return ()

    def tool_call_start(self, ev: ToolCallStart) -> Iterable[Frame]:
        """A call begins: its id and name (only where `call_pieces`)."""
        return ()

    def tool_call_arguments(self, ev: ToolCallArguments) -> Iterable[Frame]:
        """A piece of the open call's arguments, JSON text (only where `call_pieces`)."""
        return ()

    def tool_call(self, ev: ToolCallEvent) -> Iterable[Frame]:
        """One complete tool call (where `call_pieces`: the end of the call its pieces began)."""
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

    def progress(self, ev: PromptProgress) -> Iterable[Frame]:
        """A long prompt's progress, for a client that asked (`return_progress`); dialects without a frame for it
        send nothing."""
        return ()

    def keepalive(self) -> Iterable[Frame]:
        """Sent while a stream has had nothing to say for KEEPALIVE_S seconds (a long prompt being read): bytes
        that keep an idle-timing client on the line (Bun's fetch, which Claude Code and OpenCode run on, drops
        a connection after 5 minutes without a byte). Dialects whose wire has no such frame send nothing."""
        return ()


KEEPALIVE_S = 10.0          # Anthropic's API pings its streams on about this pace


async def paced(events: AsyncIterator, interval) -> AsyncGenerator:
    """`events` as they come, and None each time `interval` seconds pass without one (None: never; a callable: asked
    before each wait, so the pace can change as the stream goes; 0: one turn of the event loop, time enough for a
    step that need not wait). The pending step of `events` is never cancelled by the wait (that would end the
    generator), only when the consumer stops."""
    if interval is None:
        async for ev in events:
            yield ev
        return
    pace = interval if callable(interval) else (lambda: interval)
    it = events.__aiter__()
    step: asyncio.Future | None = None
    try:
        while True:
            if step is None:
                step = asyncio.ensure_future(it.__anext__())
            timeout = pace()
            if timeout == 0:
                await asyncio.sleep(0)      # the step, queued before this task resumes, runs until it must wait
            else:
                await asyncio.wait({step}, timeout=timeout)
            if not step.done():
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


def context(request: web.Request) -> tuple[ServiceHost, AsyncStore, Metrics]:
    """(scheduler, store, metrics) of the app serving this request."""
    app = request.app
    return app[keys.SCHEDULER], app[keys.STORE], app[keys.METRICS]


class _Leased:
    """_generation's first item: the model is leased (loaded, a slot taken); the prompt is not fitted yet."""


LEASED = _Leased()


@dataclass(frozen=True)
class _Started:
    """_generation's second item: the generation, its prompt fitted (the response's headers are known)."""
    gen: Any


async def _generation(scheduler: ServiceHost, metrics: Metrics, job: pipeline.Job) -> AsyncGenerator:
    """One streamed generation as a sequence: LEASED, then the started Generation (its prompt fitted), then its
    events. Closing it early frees the slot (or leaves the queue)."""
    async with pipeline.generate(scheduler, metrics, job) as gen:
        yield LEASED
        await gen.start()
        yield _Started(gen)
        async for ev in gen.events():
            yield ev


async def serve(request: web.Request, req: GenerationRequest, make_renderer) -> web.StreamResponse:
    """Run `req` and answer in the renderer's format. `make_renderer(job)` builds the renderer once the model
    is resolved (some wire formats name the resolved model).

    A stream answers once its prompt is fitted (a prompt that does not fit is an HTTP 400, not a stream that
    fails), unless it must wait for its model first (queued behind the model's busy slots or waiting for its load:
    the stream opens at once) or its fit takes longer than KEEPALIVE_S (a context growth reloading the model: the
    stream opens then). On a wire that has a keepalive, the stream then opens (headers and the renderer's opening)
    and sends the keepalive every KEEPALIVE_S until the reply comes, so a client with an idle limit (Bun's fetch,
    under Claude Code and OpenCode: 5 minutes; Codex: 5 minutes without a Responses event) does not give up in the
    queue or during the reload; what fails after that is the stream's error event. Its headers are those the
    request alone gives: the fit's (X-Strata-Num-Ctx, X-Strata-Reply-Room, ...) are not known when they go out,
    and HTTP has no later place that these clients read (a chunked trailer is dropped by fetch and by the
    official clients), so the stream's final event carries them (`Renderer.trailer`, as `strata`). Deciding the
    context before the headers would cost the wait the early answer is there to cover: a load plans it, and a
    queued request may still grow it. Ollama's NDJSON has no keepalive and Ollama itself sends nothing before
    the model is scheduled: that wire waits, silent, as Ollama does (its headers always carry the fit).
    Not streamed: one JSON body, whose answer starts with leading spaces when it takes longer than
    whole.WHOLE_KEEPALIVE_START_S, and which a resent request takes over when its client gave up (whole.py)."""
    scheduler, _, metrics = context(request)
    job = await pipeline.prepare(scheduler, req)
    renderer: Renderer = make_renderer(job)
    if not req.stream:                  # one JSON body, kept alive with leading spaces while it waits (whole.py)
        async def compute(progress: whole.Progress) -> dict:
            async with pipeline.generate(scheduler, metrics, job) as run:
                progress.t_leased = time.monotonic()
                await run.start()       # the prompt fitted (or the context grown): a quick refusal stays a 400
                progress.headers, progress.facts = run.headers(), pipeline.context_facts(run.result)
                return renderer.complete(await run.collect())
        return await whole.answer(request, request.app[keys.JOINS], compute, pipeline.job_headers(job))
    job.call_pieces = renderer.call_pieces
    w = renderer.writer(request)
    pings = type(renderer).keepalive is not Renderer.keepalive      # only a wire that has a keepalive
    leased, opened = False, False
    gen: pipeline.Generation | None = None

    def pace() -> float | None:
        if not pings:
            return None
        if not leased and not opened:
            return 0                    # a free slot on a loaded model is taken without waiting
        # fitting the prompt: a refusal within KEEPALIVE_S is still the HTTP answer; a fit that takes longer (a
        # context growth reloads the model) opens the stream and keeps it alive like a wait for the model
        return KEEPALIVE_S

    async def open_stream(headers: dict[str, str]) -> None:
        nonlocal opened
        if not opened:
            opened = True
            w.resp.headers.update(headers)
            await _send(w, renderer.opening())

    try:
        async with aclosing(_generation(scheduler, metrics, job)) as run, aclosing(paced(run, pace)) as events:
            async for ev in events:
                if ev is None:
                    if not opened:                  # waiting for the model: answer now
                        await open_stream(pipeline.job_headers(job))
                    await _send(w, renderer.keepalive())
                elif ev is LEASED:
                    leased = True
                elif isinstance(ev, _Started):
                    gen = ev.gen
                    if opened:                      # the headers went out without the fit's facts
                        renderer.trailer = pipeline.context_facts(gen.result)
                    await open_stream(gen.headers())
                elif isinstance(ev, TextDelta):
                    await _send(w, renderer.delta(ev))
                elif isinstance(ev, ThinkingDelta):
                    await _send(w, renderer.thinking(ev))
                elif isinstance(ev, ToolCallArguments):
                    await _send(w, renderer.tool_call_arguments(ev))
                elif isinstance(ev, ToolCallStart):
                    await _send(w, renderer.tool_call_start(ev))
                elif isinstance(ev, ToolCallEvent):
                    await _send(w, renderer.tool_call(ev))
                elif isinstance(ev, Finished):
                    await _send(w, renderer.finished(ev))
                elif isinstance(ev, PromptProgress):
                    if req.return_progress:
                        await _send(w, renderer.progress(ev))
    except ApiError as e:
        if not w.resp.prepared:
            raise
        request_log.note_error(e.message)
        await _send(w, renderer.error(e))
        return await w.finish()
    assert gen is not None                      # the run ended normally: it was started
    await _send(w, renderer.closing(gen.result))
    return await w.finish()


async def _send(w, frames: Iterable[Frame]) -> None:
    for f in frames:
        await w.send(f)
