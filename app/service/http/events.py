"""Event bus for `/api/events` (server-sent events). Producers call `publish(type, data)` from the loop thread;
each subscriber owns a bounded queue, so one slow reader cannot grow memory without limit (it loses the
oldest events and gets a `dropped` note instead)."""
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


class EventBus:
    def __init__(self, queue_size: int = 256):
        self._subscribers: set[asyncio.Queue] = set()
        self._queue_size = queue_size

    def publish(self, type: str, data: dict) -> None:
        ev = Event(type, data, time.time())
        for q in list(self._subscribers):
            if q.full():
                try:
                    q.get_nowait()
                except asyncio.QueueEmpty:
                    pass
            q.put_nowait(ev)

    @contextmanager
    def subscribe(self):
        q: asyncio.Queue = asyncio.Queue(maxsize=self._queue_size)
        self._subscribers.add(q)
        try:
            yield q
        finally:
            self._subscribers.discard(q)
