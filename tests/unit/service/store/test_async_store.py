"""AsyncStore (app/service/store/proxy.py): the model store used from the event loop. Each operation is a typed
coroutine with ModelStore's own signature; every call runs on the one store thread, and an import on a thread of
its own so that listings go on while it hashes."""
from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from app.service.store.model_store import ModelNotFound, ModelStore
from app.service.store.proxy import AsyncStore, store_error


def _operations() -> list[str]:
    return [n for n, f in vars(AsyncStore).items() if inspect.isfunction(f) and not n.startswith("_") and n != "close"]


def _shape(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_each_operation_is_a_coroutine_with_the_stores_signature():
    ops = _operations()
    assert {"get", "list", "info", "create", "copy", "remove", "add_model", "import_gguf", "blob_path",
            "adopt_blob", "release_blob"} <= set(ops)
    for name in ops:
        assert inspect.iscoroutinefunction(getattr(AsyncStore, name)), name
        assert _shape(getattr(AsyncStore, name)) == _shape(getattr(ModelStore, name)), name


def test_calls_run_on_the_store_thread_and_an_import_beside_it(dense_gguf):
    threads: dict[str, set[str]] = {"factory": set(), "get": set(), "progress": set()}

    class NotingStore(ModelStore):          # the real store; it only notes which thread each `get` ran on
        def get(self, name):
            threads["get"].add(threading.current_thread().name)
            return super().get(name)

    def factory():
        threads["factory"].add(threading.current_thread().name)
        return NotingStore()

    store = AsyncStore(factory)
    hashing, listed = threading.Event(), threading.Event()

    def progress(phase, done, total):       # runs in the import's thread: hold it until a listing went through
        threads["progress"].add(threading.current_thread().name)
        hashing.set()
        listed.wait(60)

    async def scenario():
        job = asyncio.ensure_future(store.import_gguf(dense_gguf, "dense:async", progress=progress))
        assert await asyncio.to_thread(hashing.wait, 60)
        during = [r.name for r in await store.list()]        # the store thread is free while the import hashes
        listed.set()
        record = await job
        assert "dense:async" not in during
        assert (await store.get("DENSE:async")).path == record.path
        copied = await store.copy("dense:async", "dense:copy")
        assert copied.path == record.path and copied.name == "dense:copy"
        assert {"dense:async", "dense:copy"} <= {r.name for r in await store.list()}
        assert (await store.remove("dense:copy")).name == "dense:copy"
        with pytest.raises(ModelNotFound) as missing:
            await store.get("dense:copy")
        assert store_error(missing.value, "dense:copy").status == 404
        assert (await store.info("dense:async")).architecture == "llama"

    try:
        asyncio.run(scenario())
    finally:
        store.close()
    (store_thread,) = threads["factory"]
    assert store_thread.startswith("strata-store")
    assert threads["get"] == {store_thread}
    assert threads["progress"] and store_thread not in threads["progress"]
