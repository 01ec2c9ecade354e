"""The model store (SQLite) used from the event loop: `AsyncStore`, one awaitable method per `ModelStore`
operation (`await store.get(name)`, `await store.list()`...). Every call runs on ONE dedicated thread, so a
connection made there is never used from another thread and the loop never blocks on disk; an import (hashing
gigabytes) runs on a thread of its own so listings go on meanwhile. Signatures are ModelStore's (model_store.py):
see there for what each one checks and raises."""
from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, TypeVar

from app import paths
from app.engine.gguf.errors import GGUFError
from app.engine.gguf.model_info import ModelInfo

from ..http.errors import ApiError
from .blobs import Progress
from .model_store import ModelStore
from .records import ModelNotFound, ModelRecord, StoreError
from .modelfile import ModelfileError
from .names import InvalidName

T = TypeVar("T")


class AsyncStore:
    def __init__(self, factory: Callable[[], ModelStore]):
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-store")
        self._store: ModelStore | None = None
        self._factory = factory

    def _get(self) -> ModelStore:
        if self._store is None:
            self._store = self._factory()
        return self._store

    async def _run(self, op: Callable[[ModelStore], T]) -> T:
        """`op(store)` on the store thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: op(self._get()))

    async def _run_aside(self, op: Callable[[ModelStore], T]) -> T:
        """A long `op(store)` on a thread of its own, so the store thread stays free for listings meanwhile; the
        store opens a connection per operation, so this is safe."""
        loop = asyncio.get_running_loop()
        store = await loop.run_in_executor(self._executor, self._get)
        return await asyncio.to_thread(op, store)

    @property
    def data_dir(self) -> Path:
        """The folder of the store's database: where data that belongs with this store lives (the prompt cache
        on disk). Read from the store once it exists (it does after the first lookup), else the app's data dir."""
        return self._store.db_path.parent if self._store is not None else paths.data_dir()

    async def folder(self) -> Path:
        """`data_dir`, once the store exists (it is made here when it does not yet)."""
        return await self._run(lambda s: s.folder())

    # ---- reading ---------------------------------------------------------------------------------------------
    async def list(self) -> list[ModelRecord]:
        return await self._run(lambda s: s.list())

    async def get(self, name: str) -> ModelRecord:
        return await self._run(lambda s: s.get(name))

    async def info(self, name: str) -> ModelInfo:
        return await self._run(lambda s: s.info(name))

    async def sha256(self, name: str) -> str:
        return await self._run(lambda s: s.sha256(name))

    async def with_sha256(self, rec: ModelRecord) -> ModelRecord:
        return await self._run(lambda s: s.with_sha256(rec))

    async def blob_dir(self) -> Path:
        return await self._run(lambda s: s.blob_dir())

    async def blob_path(self, digest_hex: str, size: int | None = None) -> Path | None:
        return await self._run(lambda s: s.blob_path(digest_hex, size))

    # ---- changing --------------------------------------------------------------------------------------------
    async def check_writable(self, name: str) -> None:
        return await self._run(lambda s: s.check_writable(name))

    async def import_gguf(self, path: str | os.PathLike, name: str | None = None, link: bool = True,
                          progress: Progress | None = None, mmproj: str | os.PathLike | None = None) -> ModelRecord:
        """On a thread of its own (`progress` is called there)."""
        return await self._run_aside(lambda s: s.import_gguf(path, name, link=link, progress=progress, mmproj=mmproj))

    async def store_projector(self, path: str | os.PathLike, link: bool = True) -> str:
        return await self._run(lambda s: s.store_projector(path, link))

    async def add_model(self, name: str, path: Path, digest_hex: str | None, parameters: dict | None = None,
                        template: str | None = None, system: str | None = None, license: str | None = None,
                        origin: str | None = None, adapters: tuple[str, ...] = (), manifest: str | None = None,
                        projector: str | None = None) -> ModelRecord:
        return await self._run(lambda s: s.add_model(name, path, digest_hex, parameters, template, system, license,
                                                     origin, adapters, manifest, projector=projector))

    async def create(self, name: str, from_name_or_path: str, parameters: dict | None = None,
                     template: str | None = None, system: str | None = None, license: str | None = None,
                     adapters: tuple[str, ...] = (), projector: str | None = None) -> ModelRecord:
        return await self._run(lambda s: s.create(name, from_name_or_path, parameters, template, system, license,
                                                  adapters, projector))

    async def model_settings(self) -> dict[str, dict]:
        return await self._run(lambda s: s.model_settings())

    async def set_model_settings(self, name: str, pinned: bool, keep_alive: str | None) -> None:
        return await self._run(lambda s: s.set_model_settings(name, pinned, keep_alive))

    async def copy(self, src: str, dst: str) -> ModelRecord:
        return await self._run(lambda s: s.copy(src, dst))

    async def remove(self, name: str) -> ModelRecord:
        return await self._run(lambda s: s.remove(name))

    async def add_adapter(self, path: str | os.PathLike) -> Path:
        return await self._run(lambda s: s.add_adapter(path))

    async def adopt_blob(self, src: Path, dest_name: str) -> Path:
        return await self._run(lambda s: s.adopt_blob(src, dest_name))

    async def release_blob(self, path: Path) -> None:
        return await self._run(lambda s: s.release_blob(path))

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


async def with_digest(store: AsyncStore, record: ModelRecord) -> ModelRecord:
    if getattr(record, "sha256", None) or (record.size or 0) > HASH_LIMIT:
        return record
    try:
        return await store.with_sha256(record)
    except Exception:  # noqa: BLE001 - a digest is a nicety; the file may have gone
        return record
