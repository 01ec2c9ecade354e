"""Qt <-> asyncio bridge: the GUI hands coroutines to a loop in another thread and gets results as Qt signals.

This is the threading model that tested cleanly (docs/architecture.md "Desktop facts"): the asyncio loop runs in its own thread;
`asyncio.run_coroutine_threadsafe` hands work over; signals emitted from the loop thread are queued and delivered
in the GUI thread. Nothing here waits in the GUI thread.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable

from PySide6.QtCore import QObject, QTimer, Signal

from app.api_client import ApiClient, ApiError, user_agent_of

USER_AGENT = user_agent_of("strata-desktop")     # server_data.OWN_CLIENT: the Server window knows its own app


class LoopThread:
    """An asyncio loop running in a daemon thread."""

    def __init__(self, name: str = "strata-gui-client"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Awaitable) -> "asyncio.Future":
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return

        async def _drain():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(_drain(), self.loop).result(timeout)
        except Exception:
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


class Call(QObject):
    """One request in flight. Signals arrive in the GUI thread. `cancel()` cancels the task in the loop; for a
    stream that closes the HTTP response, which is how the service learns to stop."""
    item = Signal(object)         # each streamed object
    finished = Signal(object)     # the result (None for streams)
    failed = Signal(str)          # a message fit to show the user
    cancelled = Signal()

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.future = None
        self.done = False

    def cancel(self) -> None:
        if self.future is not None and not self.future.done():
            self.future.cancel()


class ServiceBridge(QObject):
    event = Signal(str, object)        # server-sent event: (type, data)
    connection = Signal(bool)          # event stream up / down
    # Loop thread -> GUI thread relay. The loop thread never emits a Call's own signals: a fast reply could be
    # emitted before the caller (back in the GUI thread) has connected to them, and a queued signal with no
    # connection is dropped. This relay is connected from the start; its slot runs in the GUI thread, after
    # the caller's code, and re-emits on the Call.
    _deliver = Signal(object, str, object)

    def __init__(self, base_url: str, api_key: str | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.base_url = base_url.rstrip("/")
        self.client = ApiClient(self.base_url, api_key, user_agent=USER_AGENT)
        self.loop_thread = LoopThread()
        self._pending: set[Call] = set()
        self._events_future = None
        self.closed = False
        self._deliver.connect(self._on_deliver)

    # one-shot and streamed calls -----------------------------------------------------------------------------
    def call(self, make: Callable[[ApiClient], Awaitable[Any]]) -> Call:
        """`make(client)` returns a coroutine; its result comes back as `Call.finished`."""
        return self._start(make, stream=False)

    def stream(self, make: Callable[[ApiClient], Any]) -> Call:
        """`make(client)` returns an async iterator; each item comes back as `Call.item`, then `finished(None)`."""
        return self._start(make, stream=True)

    def _start(self, make, stream: bool) -> Call:
        c = Call(self)
        self._pending.add(c)
        for sig in (c.finished, c.failed, c.cancelled):
            sig.connect(lambda *_, c=c: self._settled(c))
        if self.closed:
            QTimer.singleShot(0, lambda: c.failed.emit("the window is closing"))
            return c
        c.future = self.loop_thread.submit(self._run(c, make, stream))
        return c

    def _on_deliver(self, c: Call, kind: str, payload) -> None:
        if c.done or self.closed:      # after close() the windows are going away: nothing more to tell them
            return
        if kind == "item":
            c.item.emit(payload)
        elif kind == "finished":
            c.finished.emit(payload)
        elif kind == "failed":
            c.failed.emit(payload)
        else:
            c.cancelled.emit()

    def _settled(self, c: Call) -> None:
        c.done = True
        self._pending.discard(c)
        c.deleteLater()

    async def _run(self, c: Call, make, stream: bool) -> None:
        try:
            if stream:
                agen = make(self.client)
                try:
                    async for obj in agen:
                        self._deliver.emit(c, "item", obj)
                finally:
                    await agen.aclose()
                self._deliver.emit(c, "finished", None)
            else:
                self._deliver.emit(c, "finished", await make(self.client))
        except asyncio.CancelledError:
            self._deliver.emit(c, "cancelled", None)
            raise
        except ApiError as e:
            self._deliver.emit(c, "failed", str(e))
        except Exception as e:  # a bug or an odd reply: show it, never kill the loop
            self._deliver.emit(c, "failed", f"{type(e).__name__}: {e}")

    # server-sent events ------------------------------------------------------------------------------------------
    def start_events(self, retry_s: float = 1.0) -> None:
        if self._events_future is None and not self.closed:
            self._events_future = self.loop_thread.submit(self._watch_events(retry_s))

    async def _watch_events(self, retry_s: float) -> None:
        while True:
            try:
                async for etype, data in self.client.events():
                    if etype == "connected":
                        self.connection.emit(True)
                    else:
                        self.event.emit(etype, data)
            except asyncio.CancelledError:
                raise
            except Exception:
                pass
            self.connection.emit(False)
            await asyncio.sleep(retry_s)

    def close(self) -> None:
        """Cancel what is in flight, close the HTTP session and stop the loop thread (bounded wait)."""
        if self.closed:
            return
        self.closed = True
        if self._events_future is not None:
            self._events_future.cancel()
        for c in list(self._pending):
            c.cancel()
        try:
            self.loop_thread.submit(self.client.close()).result(5)
        except Exception:
            pass
        self.loop_thread.stop()
