"""The async ApiClient for the CLI's plain (blocking) code: an event loop in a daemon thread runs its
coroutines; a stream becomes an iterator. Ctrl+C while waiting stops the coroutine on the loop too, so a
generation's HTTP stream closes and the service stops generating, as when a GUI user presses Stop.
Covered by tests/integration/cli/test_service_cli.py (`strata run` streaming, Ctrl+C)."""
from __future__ import annotations

import asyncio
import threading
from typing import AsyncIterator, Iterator


class LoopThread:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="strata-cli-loop", daemon=True)
        self._thread.start()

    def run(self, coro, timeout: float | None = None):
        """Run a coroutine on the loop and wait for its result here."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except BaseException:     # KeyboardInterrupt (or a timeout) here: stop it there as well
            fut.cancel()
            raise

    def iterate(self, stream: AsyncIterator) -> Iterator:
        """An async generator's items, one by one; leaving early closes it (on the loop)."""
        try:
            while True:
                try:
                    yield self.run(stream.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            asyncio.run_coroutine_threadsafe(_close(stream), self.loop).result(30)

    def spawn(self, coro) -> "asyncio.Future":
        """Start a coroutine on the loop without waiting (cancel the returned future to stop it)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


async def _close(stream) -> None:
    while getattr(stream, "ag_running", False):     # a cancelled __anext__ is still unwinding
        await asyncio.sleep(0)
    await stream.aclose()
