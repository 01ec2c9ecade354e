"""The model store's blobs by digest: what pulls, `/api/blobs` uploads and `/api/create` with `files` or
`adapters` need (a mixin of ModelStore, app/service/store/model_store.py, which owns the folder and the database)."""
from __future__ import annotations

import os
import shutil
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from app.engine.gguf.adapter import read_adapter


class StoreBlobs:
    models_dir: Path

    if TYPE_CHECKING:        # what ModelStore, the class this is part of, provides
        def _connect(self) -> sqlite3.Connection: ...
        def _external_records(self) -> list[Any]: ...            # ModelRecords (not imported: a cycle)
        def _stage(self, src: Path, link: bool, progress: Callable[[str, int, int], None] | None
                   ) -> tuple[Path, str]: ...
        @staticmethod
        def _place(tmp: Path, dest: Path, size: int) -> None: ...
        def _delete_blob_if_unused(self, db: sqlite3.Connection, path: Path) -> None: ...

    def blob_dir(self) -> Path:
        return self.models_dir

    def blob_path(self, digest_hex: str, size: int | None = None) -> Path | None:
        """A file on this machine whose sha256 is `digest_hex`: a stored blob, a model's file in the store, a
        built-in/external file hashed before, or another app's content-addressed blob (Ollama, HF cache)."""
        own = self.models_dir / f"sha256-{digest_hex}.gguf"
        candidates = [own]
        with closing(self._connect()) as db:
            candidates += [Path(r["path"]) for r in db.execute(
                "SELECT path FROM models WHERE sha256 = ? UNION SELECT path FROM file_hashes WHERE sha256 = ?",
                (digest_hex, digest_hex))]
        candidates += [Path(r.path) for r in self._external_records() if r.sha256 == digest_hex]
        for p in candidates:
            try:
                if p.is_file() and (size is None or p.stat().st_size == size):
                    return p
            except OSError:
                continue
        return None

    def adopt_blob(self, src: Path, dest_name: str) -> Path:
        """Put a file known by its digest under `dest_name` in the store (hard link, else copy), unhashed: the
        source is content-addressed (see blob_path)."""
        dest = self.models_dir / dest_name
        if Path(src).resolve() == dest.resolve():
            return dest
        tmp = self.models_dir / f".adopt-{os.getpid()}-{time.monotonic_ns()}.partial"
        try:
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
            self._place(tmp, dest, Path(src).stat().st_size)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dest

    def add_adapter(self, path: str | os.PathLike) -> Path:
        """A LoRA adapter GGUF (a path on this machine, or a stored blob) into the store's folder, checked; its
        stored path (`sha256-HEX.gguf`, shared with any identical file)."""
        src = Path(path).expanduser()
        read_adapter(src)
        src = src.resolve()
        if src.parent == self.models_dir.resolve() and src.name.startswith("sha256-"):
            return src
        tmp, digest = self._stage(src, True, None)
        dest = self.models_dir / f"sha256-{digest}.gguf"
        self._place(tmp, dest, src.stat().st_size)
        return dest

    def release_blob(self, path: Path) -> None:
        """Delete a blob of the store's folder that no model uses (a pull or upload that did not become a model)."""
        with closing(self._connect()) as db:
            self._delete_blob_if_unused(db, Path(path))

