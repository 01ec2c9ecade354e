"""A model's slots and the order its waiting requests get them: watched requests first, then round-robin across
clients, arrival order within one client (event loop thread only).

Arrival order alone lets one client's burst (an agent's eight parallel side requests, a batch script) hold another
client's single request for minutes. Here each client (`client_of`: the User-Agent and the address it comes from,
as the request log names it) has its own queue; a freed slot goes to the next client in turn, and that client goes
to the back, so a client waits at most one turn per other waiting client. Requests a person watches (streamed:
`priority` 1) are served before background ones (not streamed), round-robin among themselves.
Covered by tests/unit/service/scheduling/test_fair_slots.py.
"""
from __future__ import annotations

import asyncio
import contextvars
from collections import OrderedDict, deque

from aiohttp import web

# who sent the request being handled (set by `middleware` for every API request)
_client: contextvars.ContextVar[str] = contextvars.ContextVar("strata_client", default="")


def client_of(request: web.Request) -> str:
    """A client's name for the queue's turns: its User-Agent (agents name themselves) and its address."""
    return f"{request.remote or ''} {request.headers.get('User-Agent', '')}".strip()


def current_client() -> str:
    return _client.get()


def set_client(name: str) -> contextvars.Token:
    """The current task (and the tasks it starts) acts for client `name` (the middleware; tests)."""
    return _client.set(name)


def middleware():
    @web.middleware
    async def identify(request: web.Request, handler):
        token = set_client(client_of(request))
        try:
            return await handler(request)
        finally:
            _client.reset(token)
    return identify


class FairSlots:
    """`n` slots. `await acquire(client, priority)` takes one (waiting in the fair order), `release()` gives it back.
    Drop-in for the asyncio.Semaphore the scheduler used (acquire/release), with the order made explicit."""

    def __init__(self, n: int):
        self.free = n
        # priority -> client -> its waiting requests, oldest first; the client order is the round-robin turn
        self._levels: dict[int, OrderedDict[str, deque[asyncio.Future]]] = {}

    def locked(self) -> bool:
        return self.free <= 0

    def waiting(self) -> int:
        return sum(len(q) for level in self._levels.values() for q in level.values())

    def order(self) -> list[tuple[str, int]]:
        """(client, priority) of the waiting requests in the order they would get slots (for tests and views)."""
        out: list[tuple[str, int]] = []
        for prio in sorted(self._levels, reverse=True):
            queues = [(c, [f for f in q if not f.done()]) for c, q in self._levels[prio].items()]
            depth = 0
            while any(len(q) > depth for _, q in queues):
                out.extend((c, prio) for c, q in queues if len(q) > depth)
                depth += 1
        return out

    async def acquire(self, client: str = "", priority: int = 0) -> None:
        if self.free > 0 and not self.waiting():
            self.free -= 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._levels.setdefault(priority, OrderedDict()).setdefault(client, deque()).append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()          # a slot was handed over just as the request left: pass it on
            else:
                self._drop(fut, client, priority)
            raise

    def release(self) -> None:
        self.free += 1
        while self.free > 0:
            fut = self._next()
            if fut is None:
                return
            self.free -= 1
            fut.set_result(None)

    def _next(self) -> asyncio.Future | None:
        """The next waiter in the fair order; its client goes to the back of its level's turn."""
        for prio in sorted(self._levels, reverse=True):
            level = self._levels[prio]
            while level:
                client, q = next(iter(level.items()))
                while q and q[0].done():           # cancelled meanwhile
                    q.popleft()
                if not q:
                    del level[client]
                    continue
                fut = q.popleft()
                level.move_to_end(client)
                if not q:
                    del level[client]
                return fut
            del self._levels[prio]
        return None

    def _drop(self, fut: asyncio.Future, client: str, priority: int) -> None:
        level = self._levels.get(priority)
        q = level.get(client) if level is not None else None
        if level is None or q is None:
            return
        try:
            q.remove(fut)
        except ValueError:
            pass
        if not q:
            del level[client]
            if not level:
                del self._levels[priority]
