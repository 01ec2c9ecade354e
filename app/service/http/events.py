"""Event bus for `/api/events` (server-sent events). Producers call `publish(type, data)` from the loop thread;
each subscriber owns a bounded queue, so one slow reader cannot grow memory without limit (it loses the
oldest events and gets a `dropped` note instead).

Some event types go only to subscribers that ask for them (`OPT_IN`: one `request` event per request start, lease
and end, for the Server window), so the usual subscribers (the desktop's state, scripts) see no more traffic than
before and a service nobody watches builds none of them (producers ask `wants(type)` first)."""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    type: str
    data: dict
    time: float

    def sse(self) -> bytes:
        return f"event: {self.type}\ndata: {json.dumps(self.data, default=str)}\n\n".encode()


OPT_IN = frozenset({"request"})


class EventBus:
    def __init__(self, queue_size: int = 256):
        self._subscribers: dict[asyncio.Queue, frozenset[str]] = {}     # queue -> the opt-in types it asked for
        self._queue_size = queue_size

    def wants(self, type: str) -> bool:
        """Whether any subscriber would get an event of this type."""
        if type not in OPT_IN:
            return bool(self._subscribers)
        return any(type in inc for inc in self._subscribers.values())

    def publish(self, type: str, data: dict) -> None:
        ev = Event(type, data, time.time())
        for q, inc in list(self._subscribers.items()):
            if type in OPT_IN and type not in inc:
                continue
            if q.full():
                try:
                    q.get_nowait()
                except asyncio.QueueEmpty:
                    pass
            q.put_nowait(ev)

    @contextmanager
    def subscribe(self, include=()):
        """A queue of the events from now on; `include`: the OPT_IN types this subscriber wants as well."""
        q: asyncio.Queue = asyncio.Queue(maxsize=self._queue_size)
        self._subscribers[q] = frozenset(include) & OPT_IN
        try:
            yield q
        finally:
            self._subscribers.pop(q, None)
