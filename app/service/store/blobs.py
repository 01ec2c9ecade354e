"""The store's folder of blobs: GGUF files named by their content (`sha256-HEX.gguf`, split models as their parts),
hard-linked from a source on the same filesystem (no copy, no extra space) or copied and hashed on the way in.
Files only: which names use a blob is the database's business (model_store.py), which asks this folder to stage,
place, find and delete files. Covered by tests/unit/service/store/test_blobs.py and test_store.py."""
from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from app.engine.gguf.split import sibling_paths

Progress = Callable[[str, int, int], None]     # (phase "hashing" | "copying", bytes done, bytes total)
CHUNK = 1 << 20


def sha256_file(path: Path, progress: Progress | None = None, total: int = 0) -> str:
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress("hashing", done, total)
    return h.hexdigest()


def _copy_and_hash(src: Path, dst: Path, progress: Progress | None, total: int) -> str:
    h = hashlib.sha256()
    done = 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        while chunk := fi.read(CHUNK):
            h.update(chunk)
            fo.write(chunk)
            done += len(chunk)
            if progress:
                progress("copying", done, total)
        fo.flush()
        os.fsync(fo.fileno())
    return h.hexdigest()


class BlobFolder:
    """One folder of content-addressed files. A file arrives under a temporary name (`stage`), then takes its
    digest's name (`place`), so a reader never sees half a blob and the same bytes are stored once."""

    def __init__(self, path: Path):
        self.path = path
        self.path.mkdir(parents=True, exist_ok=True)

    def blob(self, digest_hex: str) -> Path:
        """Where the blob of `digest_hex` is (or would be) kept."""
        return self.path / f"sha256-{digest_hex}.gguf"

    def holds(self, path: Path) -> bool:
        """Whether `path` is in this folder (a model's file elsewhere is never the store's to move or delete)."""
        try:
            return Path(path).resolve().parent == self.path.resolve()
        except OSError:
            return False

    def stage(self, src: Path, link: bool, progress: Progress | None) -> tuple[Path, str]:
        """Hard-link (else copy) `src` to a temporary name in the folder and hash it: (temp path, sha256 hex)."""
        size = src.stat().st_size
        tmp = self.path / f".import-{os.getpid()}-{time.monotonic_ns()}.partial"
        try:
            linked = False
            if link:
                try:
                    os.link(src, tmp)
                    linked = True
                except OSError:                               # other filesystem, or links not allowed
                    linked = False
            digest = sha256_file(tmp, progress, size) if linked else _copy_and_hash(src, tmp, progress, size)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp, digest

    @staticmethod
    def place(tmp: Path, dest: Path, size: int) -> None:
        """A staged file under its final name; dropped when the same bytes are there already."""
        if dest.exists() and dest.stat().st_size == size:
            tmp.unlink()
        else:
            os.replace(tmp, dest)

    def store(self, src: Path, link: bool = True) -> Path:
        """`src` stored under its digest (staged, then placed); its stored path."""
        tmp, digest = self.stage(src, link, None)
        dest = self.blob(digest)
        try:
            self.place(tmp, dest, src.stat().st_size)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dest

    def adopt(self, src: Path, dest_name: str) -> Path:
        """Put a file known by its digest under `dest_name` (hard link, else copy), unhashed: the source is
        content-addressed (ModelStore.blob_path)."""
        dest = self.path / dest_name
        if Path(src).resolve() == dest.resolve():
            return dest
        tmp = self.path / f".adopt-{os.getpid()}-{time.monotonic_ns()}.partial"
        try:
            try:
                os.link(src, tmp)
            except OSError:
                shutil.copyfile(src, tmp)
            self.place(tmp, dest, Path(src).stat().st_size)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return dest

    def delete(self, path: Path) -> None:
        """Delete a blob of this folder (every part of a split model); a file elsewhere, or not named as a blob,
        is left alone. The caller has checked that no name uses it."""
        if not self.holds(path) or not Path(path).name.startswith("sha256-"):
            return
        for part in sibling_paths(str(path)) or [str(path)]:
            Path(part).unlink(missing_ok=True)
