"""Helpers shared by the tests that drive a real server on loopback (and the environment they run it with)."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import replace


def wait_for(cond, timeout=120.0, what="condition"):
    """Poll `cond` until it is true; fail the test (not time it) when `timeout` seconds pass first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached")


class HeldSlots:
    """`n` of a live service's slots for `model`, held by the test (as running requests would: leases taken on the
    service's loop, the model loaded first if it is not) until `release()`. A request sent meanwhile waits in the
    model's queue for as long as the test says, whatever the machine's speed."""

    def __init__(self, svc, model: str, n: int = 1):
        from app.service import appkeys

        self._release = threading.Event()
        self._held = [threading.Event() for _ in range(n)]
        scheduler = svc.app[appkeys.SCHEDULER]

        async def hold(held: threading.Event):
            async with scheduler.lease(model):
                held.set()
                await asyncio.to_thread(self._release.wait)

        self._done = [asyncio.run_coroutine_threadsafe(hold(h), svc.loop) for h in self._held]
        wait_for(lambda: all(h.is_set() for h in self._held) or any(d.done() for d in self._done),
                 what=f"{n} slot(s) of {model} held")
        for d in self._done:
            if d.done():
                d.result()              # a lease that failed (the model does not load...) says why

    def release(self):
        self._release.set()
        for d in self._done:
            d.result(timeout=120)


@contextmanager
def environ(values: dict[str, str | None]):
    """These environment variables set (None: unset) for the block, e.g. a module-scoped server's settings read
    from the environment; then each put back as it was, or removed when it was not set."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def store_factory(home):
    """A ModelStore maker for ServiceThread: the store lives under `home` and never scans the user's home for
    other apps' models, so each test module's server starts from a known store."""
    def make():
        from app.service.store.model_store import ModelStore

        return ModelStore(db_path=home / "strata.db", models_dir=home / "models", discover_external=False)
    return make


class LiveServices:
    """What the `live_service` fixture (tests/conftest.py) hands a test module: `live_service(**fields)` starts a
    service on 127.0.0.1, port 0, with `ServiceConfig(**fields)` (or `config` with `fields` replaced), its store in
    a fresh folder (`home`, also `svc.home`; `store` a store factory of the test's own) that never looks at other
    apps' models; every service it started stops at the end of the module. `with live_service.running(...)` gives
    one that stops at the end of the block, for a test that needs a server of its own."""

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self._started = []

    def __call__(self, config=None, *, home=None, store=None, **fields):
        from app.service.config import ServiceConfig
        from app.service.server import ServiceThread

        home = home if home is not None else self._tmp.mktemp("service-home")
        if config is None:
            config = ServiceConfig(**{"host": "127.0.0.1", "port": 0, **fields})
        elif fields:
            config = replace(config, **fields)
        svc = ServiceThread(config, store_factory=store or store_factory(home))
        svc.home = home
        self._started.append(svc)
        return svc.start()

    @contextmanager
    def running(self, config=None, **kw):
        svc = self(config, **kw)
        try:
            yield svc
        finally:
            svc.stop()

    def stop_all(self):
        for svc in reversed(self._started):
            svc.stop()
        self._started.clear()
