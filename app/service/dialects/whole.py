"""A non-streamed answer (one JSON body) that keeps its client on the line, and a resent one that joins the first.

Keepalive. A non-streamed request sends nothing until its reply is complete: queued behind other clients, reading a
long prompt on a CPU, it can take minutes, and clients with a read timeout give up and send it again (httpx's
default is 5 s, litellm's 600 s; scripts set 30-120 s), so the same prompt is computed twice while the queue grows.
JSON allows whitespace before a value, so a request still unanswered after WHOLE_KEEPALIVE_START_S starts its
answer: status 200, the JSON content type, and a space every WHOLE_KEEPALIVE_S until the body follows. The start
waits half a minute because what fails after it cannot be an HTTP error any more, and the official clients do not
see an error in a 200's body (openai's and anthropic's return an empty object, ollama's a validation error): the
requests that take a few seconds, most of them, keep their real status; the ones that take minutes keep their client. The official
clients (openai, anthropic, ollama, httpx's .json()) read such a body as any other.
The status is decided when the first space goes, so the answer starts as late as it can, as a stream does
(base.serve): once the prompt is fitted (its headers then carry the fit's facts, X-Strata-Num-Ctx...), or while
the request waits for its model or slot (the queue, a load), or when a fit runs longer than WHOLE_KEEPALIVE_S (a
context growth reloads the model). A request refused quickly (bad request, unknown model, a full queue, a prompt
that does not fit) keeps its real status. What fails after the answer started (a load that fails after the wait,
a prompt found too long once the slot came, a runner that dies) cannot be a 4xx/5xx any more: it is the body the
4xx/5xx would have carried, the dialect's own error object (OpenAI's and Anthropic's {"error": {...}}, Ollama's
{"error": "..."}), and the request log records it. An answer that started before the fit carries the fit's facts
in the body as `strata` (a stream's final event does the same). llama-server and Ollama send nothing before a
non-streamed body; we chose the spaces because a client that times out and resends costs the machine the whole
prompt again.

Joining. A client that gave up (it closed the connection: aiohttp cancels its handler) leaves its computation
running for JOIN_GRACE_S; the same request (same path, same body bytes) arriving meanwhile takes it over, with its
place in the queue and what it has already computed, instead of starting again. Only an abandoned computation is
joined: two live clients that send the same request both get their own (a client may want two samples).
Covered by tests/integration/service/test_whole_keepalive.py.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field

from aiohttp import web

from ..http import request_log
from ..http.errors import ApiError, error_body

log = logging.getLogger("strata.whole")

WHOLE_KEEPALIVE_START_S = 30.0   # silence before the answer starts (below the common 60-600 s read timeouts)
WHOLE_KEEPALIVE_S = 5.0          # then between its leading spaces
JOIN_GRACE_S = 10.0         # how long an abandoned computation waits for its request to come again


@dataclass(eq=False)
class Progress:
    """How far a computation got, for the handlers that answer it: when it had its model and slot, and its
    headers once its prompt was fitted (the fit's facts: X-Strata-Num-Ctx...)."""
    t_leased: float | None = None
    headers: dict[str, str] | None = None
    facts: dict[str, int] = field(default_factory=dict)


@dataclass(eq=False)
class Shared:
    """One non-streamed computation and the handlers waiting for it."""
    key: str
    task: asyncio.Task
    progress: Progress
    waiters: int = 0
    joined: int = 0                             # handlers that took it over after it was abandoned
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)


class Joins:
    """The abandoned computations that a resent request may take over, by request key."""

    def __init__(self):
        self.orphans: dict[str, Shared] = {}
        self.adopted = 0                        # requests that took over an abandoned computation (a counter)

    def adopt(self, key: str) -> Shared | None:
        shared = self.orphans.pop(key, None)
        if shared is None or shared.task.done() and shared.task.cancelled():
            return None
        if shared.timer is not None:
            shared.timer.cancel()
            shared.timer = None
        shared.joined += 1
        self.adopted += 1
        return shared

    def abandon(self, shared: Shared) -> None:
        """Its last waiter left: keep it (or its answer, when it has one) JOIN_GRACE_S for a resend, then cancel
        it."""
        if shared.task.cancelled():
            return
        old = self.orphans.get(shared.key)
        if old is not None and old is not shared:
            self._cancel(old)
        self.orphans[shared.key] = shared
        shared.timer = asyncio.get_running_loop().call_later(JOIN_GRACE_S, self._expire, shared)

    async def close(self) -> None:
        """The service stops: nobody will resend; cancel what was kept (and wait for it to let go of its slot)."""
        orphans, self.orphans = list(self.orphans.values()), {}
        for shared in orphans:
            self._cancel(shared)
        await asyncio.gather(*(o.task for o in orphans), return_exceptions=True)

    def _expire(self, shared: Shared) -> None:
        if self.orphans.get(shared.key) is shared:
            del self.orphans[shared.key]
            self._cancel(shared)

    @staticmethod
    def _cancel(shared: Shared) -> None:
        if shared.timer is not None:
            shared.timer.cancel()
        shared.task.cancel()


def _retrieved(task: asyncio.Task) -> None:
    """An abandoned computation's failure nobody waits for is not an unhandled one."""
    if not task.cancelled():
        task.exception()


async def request_key(request: web.Request) -> str:
    """What makes two requests the same: the path and the body's bytes (and the credentials they carry)."""
    body = await request.read()                 # read once already: aiohttp keeps it
    h = hashlib.sha256()
    for part in (request.method, request.path_qs, request.headers.get("Authorization", ""),
                 request.headers.get("x-api-key", "")):
        h.update(part.encode() + b"\0")
    h.update(body)
    return h.hexdigest()


async def answer(request: web.Request, joins: Joins, compute, early_headers: dict[str, str]) -> web.StreamResponse:
    """Answer a non-streamed request with the body `compute(progress)` returns, keeping the client on the line
    meanwhile (`compute` notes in `progress` when it has its lease and, once its prompt is fitted, its headers);
    a request abandoned earlier with the same key is taken over instead. `early_headers`: what the request alone
    tells, sent when the answer must start before the fit (pipeline.job_headers)."""
    key = await request_key(request)
    shared = joins.adopt(key)
    if shared is None:
        progress = Progress()
        shared = Shared(key, asyncio.ensure_future(compute(progress)), progress)
        shared.task.add_done_callback(_retrieved)
    shared.waiters += 1
    p = shared.progress
    resp: web.StreamResponse | None = None
    early = False
    t_start = time.monotonic() + WHOLE_KEEPALIVE_START_S
    try:
        while True:
            before_start = t_start - time.monotonic()       # > 0: the answer may not start yet
            wait = min(WHOLE_KEEPALIVE_S, before_start) if resp is None and before_start > 0 else WHOLE_KEEPALIVE_S
            done, _ = await asyncio.wait({shared.task}, timeout=wait)
            if done:
                break
            if resp is None:
                if time.monotonic() < t_start:
                    continue                    # a request of a few seconds keeps its real status
                if p.headers is None and p.t_leased is not None \
                        and time.monotonic() - p.t_leased < WHOLE_KEEPALIVE_S:
                    continue                    # a fit is quick: its refusal can still be the HTTP answer
                early = p.headers is None
                headers = early_headers if p.headers is None else p.headers
                resp = web.StreamResponse(status=200, headers={**headers,
                                                               "Content-Type": "application/json; charset=utf-8"})
                await resp.prepare(request)
            await resp.write(b" ")
    except BaseException:
        shared.waiters -= 1
        if shared.waiters == 0:
            joins.abandon(shared)
        raise
    shared.waiters -= 1
    try:
        body = shared.task.result()
        if early and p.facts:                   # the headers went out without the fit's facts (as a stream's
            body = {**body, "strata": p.facts}  # final event carries them)
    except ApiError as e:
        if resp is None:
            raise
        request_log.note_error(e.message)
        body = error_body(request, e)
    except Exception as e:  # noqa: BLE001 - a bug on our side, after the 200 went: say so in the body
        if resp is None:
            raise
        log.exception("non-streamed request failed after its keepalive began")
        err = ApiError(500, f"internal error: {type(e).__name__}: {e}")
        request_log.note_error(err.message)
        body = error_body(request, err)
    if resp is None:
        return web.json_response(body, headers=p.headers or {})
    await resp.write(json.dumps(body).encode())
    await resp.write_eof()
    return resp
