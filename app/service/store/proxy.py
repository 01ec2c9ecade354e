"""The model store (SQLite) used from the event loop: every call runs on ONE dedicated thread, so a
connection made there is never used from another thread and the loop never blocks on disk."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from app.engine.gguf.errors import GGUFError

from ..http.errors import ApiError
from .model_store import ModelNotFound, StoreError
from .modelfile import ModelfileError
from .names import InvalidName


class StoreProxy:
    def __init__(self, factory):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-store")
        self._store = None
        self._factory = factory

    def _get(self):
        if self._store is None:
            self._store = self._factory()
        return self._store

    async def call(self, method: str, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: getattr(self._get(), method)(*args, **kwargs))

    async def call_aside(self, method: str, *args, **kwargs):
        """A long call (an import hashing gigabytes) on a thread of its own, so the store thread stays free for
        listings meanwhile; the store opens a connection per operation, so this is safe."""
        loop = asyncio.get_running_loop()
        store = await loop.run_in_executor(self._executor, self._get)
        return await asyncio.to_thread(getattr(store, method), *args, **kwargs)

    def close(self) -> None:
        def _close():
            close = getattr(self._store, "close", None)
            if close:
                close()
        try:
            self._executor.submit(_close).result(timeout=5)
        except Exception:  # noqa: BLE001
            pass
        self._executor.shutdown(wait=False)


def store_error(e: Exception, name: str = "") -> ApiError:
    """Store exceptions as HTTP errors, by type."""
    what = f"model {name!r}" if name else "model"
    if isinstance(e, ModelNotFound):
        return ApiError(404, f"{what} not found; see /api/tags, or add it with /api/create or `strata import`",
                        param="model", code="model_not_found")
    if isinstance(e, InvalidName):        # InvalidReference (registry names) is one too
        return ApiError(400, f"invalid model name: {e}", param="model")
    if isinstance(e, (GGUFError, ModelfileError, StoreError)):
        return ApiError(400, str(e))
    if isinstance(e, FileNotFoundError):
        return ApiError(400, f"file not found: {e.filename or e}")
    if isinstance(e, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return ApiError(400, f"cannot use that path: {e}")
    if isinstance(e, ValueError):
        return ApiError(400, str(e))
    return ApiError(500, f"model store error: {type(e).__name__}: {e}")


HASH_LIMIT = 2 * 1024 ** 3     # files up to this size get their sha256 computed (once, cached) for `digest`


async def with_digest(store, record):
    if getattr(record, "sha256", None) or (record.size or 0) > HASH_LIMIT:
        return record
    try:
        return await store.call("with_sha256", record)
    except Exception:  # noqa: BLE001 - a digest is a nicety; the file may have gone
        return record
