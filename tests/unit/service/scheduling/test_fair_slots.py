"""The order waiting requests get a model's slots (service/scheduling/fair_slots.py): watched (streamed) requests
first, round-robin across clients, arrival order within a client; a request that leaves the queue leaves no hole.
Pure asyncio; through the scheduler: test_scheduler_units.py."""
from __future__ import annotations

import asyncio

from app.service.scheduling.fair_slots import FairSlots


async def _queue(slots: FairSlots, arrivals: list[tuple[str, int]], served: list[str]) -> list[asyncio.Task]:
    """One task per arrival (client, priority), each waiting in order; each records itself when it gets a slot
    and keeps it until it is released."""
    tasks = []
    for i, (client, prio) in enumerate(arrivals):
        async def want(client=client, prio=prio, i=i):
            await slots.acquire(client, prio)
            served.append(f"{client}{i}")
        tasks.append(asyncio.create_task(want()))
        await asyncio.sleep(0)                   # it is queued before the next arrives
    return tasks


def test_one_clients_burst_does_not_hold_another_clients_request():
    async def main():
        slots, served = FairSlots(1), []
        await slots.acquire("busy")              # the one slot is taken
        tasks = await _queue(slots, [("a", 0)] * 4 + [("b", 0), ("c", 0), ("a", 0), ("b", 0)], served)
        assert [c for c, _ in slots.order()] == ["a", "b", "c", "a", "b", "a", "a", "a"]
        for _ in range(8):
            slots.release()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert served == ["a0", "b4", "c5", "a1", "b7", "a2", "a3", "a6"]   # turns, each client's own in order
        assert slots.free == 0 and slots.waiting() == 0
    asyncio.run(main())


def test_watched_requests_get_slots_before_background_ones():
    async def main():
        slots, served = FairSlots(1), []
        await slots.acquire("x")
        tasks = await _queue(slots, [("agent", 0), ("agent", 0), ("chat", 1), ("script", 0), ("gui", 1)], served)
        assert slots.order() == [("chat", 1), ("gui", 1), ("agent", 0), ("script", 0), ("agent", 0)]
        for _ in range(5):
            slots.release()
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert served == ["chat2", "gui4", "agent0", "script3", "agent1"]
    asyncio.run(main())


def test_a_request_that_leaves_the_queue_leaves_no_hole_and_no_lost_slot():
    async def main():
        slots, served = FairSlots(1), []
        await slots.acquire("x")
        tasks = await _queue(slots, [("a", 0), ("b", 0), ("c", 0)], served)
        tasks[1].cancel()                        # b's client went away
        await asyncio.sleep(0)
        assert [c for c, _ in slots.order()] == ["a", "c"]
        slots.release()
        await asyncio.sleep(0)
        slots.release()
        await asyncio.sleep(0)
        assert served == ["a0", "c2"]
        # a slot handed over in the same turn its waiter is cancelled goes on to the next one
        t = await _queue(slots, [("d", 0), ("e", 0)], served)
        slots.release()                          # d's future is resolved ...
        t[0].cancel()                            # ... and d leaves before it runs
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert served[-1] == "e1" and slots.free == 0
        slots.release()
        assert slots.free == 1
        await asyncio.gather(*tasks[::2], t[1])
    asyncio.run(main())
