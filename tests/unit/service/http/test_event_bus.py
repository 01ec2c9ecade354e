"""The `/api/events` bus (http/events.py) without a server: every subscriber gets what is published after it
subscribed, as server-sent events; a slow subscriber's queue is bounded (the oldest events go first); a reader that
left gets nothing more. The stream itself on a live service: tests/integration/service/test_service_api.py and the
desktop's state (tests/gui/)."""
from __future__ import annotations

import asyncio

from app.service.http.events import EventBus


def test_each_subscriber_gets_the_events_published_after_it_subscribed():
    async def run():
        bus = EventBus()
        bus.publish("before", {})
        with bus.subscribe() as a, bus.subscribe() as b:
            bus.publish("model.loaded", {"model": "m"})
            got_a, got_b = a.get_nowait(), b.get_nowait()
            assert got_a is got_b and got_a.type == "model.loaded" and a.empty() and b.empty()
            assert got_a.sse() == b'event: model.loaded\ndata: {"model": "m"}\n\n'
        bus.publish("after", {})               # nobody listens: nothing is kept
        assert not bus._subscribers
    asyncio.run(run())


def test_a_slow_subscriber_keeps_the_newest_events_within_its_bound():
    async def run():
        bus = EventBus(queue_size=3)
        with bus.subscribe() as q:
            for i in range(10):
                bus.publish("tick", {"i": i})
            assert [q.get_nowait().data["i"] for _ in range(q.qsize())] == [7, 8, 9]
    asyncio.run(run())
