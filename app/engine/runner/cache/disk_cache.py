"""The prompt cache on disk: sequence states that outlive the runner, so a reload (a larger context, an eviction)
or a restart of the app does not make the next agent session prefill its long system prompt again
(docs/prompt-cache.md, "On disk").

A file holds one sequence's KV state (`llama_state_seq_get_data`) and the tokens it was computed from, under
`<data dir>/prompt-cache/<key>/`, where the key hashes everything the bytes depend on: the model file (and its
LoRA adapters), the llama.cpp build, and the context settings that shape a sequence's state (KV types, flash
attention, streams). A file is trusted only when its header names exactly this runner's facts and its checksum
covers the tokens and the state; anything else is refused and deleted, never handed to llama.cpp. The whole
folder is bounded in bytes and files unused for `MAX_AGE_S` go; the least recently used go first.

Context thread: `best`, `load` (maps the file and checks it: the thread blocks for as long as the check reads it)
and `save` (copies the state out of the context, then a writer thread writes it). A loaded state is the file's
pages mapped read-only (`MappedState`), handed to llama.cpp from there: reading it into a buffer of the process first
cost a copy and a fault on every fresh page of that buffer (a 193 MiB state: 0.47 s to read it, against
0.07 s for the checksum and 0.03 s for llama_state_seq_set_data). Files are only ever replaced whole
(`write_state`: a temporary name, then rename), so a mapped file never shrinks under its reader. `scan` runs at start and again when the folder
changed (another runner of the same model wrote to it: the runner before a reload, for one).
Covered by tests/unit/engine/runner/cache/test_disk_cache.py and tests/integration/service/test_prompt_disk_cache.py.
"""
from __future__ import annotations

import hashlib
import json
import ctypes
import logging
import mmap
import os
import queue
import threading
import time
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from app.engine.runner.cache.stores import common_prefix

log = logging.getLogger("strata.engine")

MAGIC = b"STRATAPC"
FORMAT = 1
SUFFIX = ".pcache"
MIN_DISK_TOKENS = 1024          # a shorter prefix is computed again faster than it is written and read back
MAX_AGE_S = 7 * 86400           # a file unused this long goes
MAX_HEADER = 1 << 20
TMP_AGE_S = 600                 # a half-written file older than this belongs to a writer that died
DEFAULT_LIMIT = 4 << 30         # bytes, at most; and at most a tenth of the free disk (default_limit)


def default_limit(root: Path) -> int:
    """The bound when none is set: a tenth of the free space of the disk the cache lives on, at most 4 GiB."""
    try:
        st = os.statvfs(root if root.exists() else root.parent)
        return min(DEFAULT_LIMIT, st.f_bavail * st.f_frsize // 10)
    except OSError:
        return 0


def file_identity(path: str) -> dict:
    """What names a model (or adapter) file's contents without reading them all: a store blob's name is its
    sha256; any other file is its resolved path, size and modification time (an edited file is another file)."""
    p = Path(path)
    name = p.name
    if name.startswith("sha256-") and len(name) >= 71:
        return {"sha256": name[7:71]}
    st = p.stat()
    return {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def build_identity() -> dict:
    """The llama.cpp build the runner uses (llama-cpp-python's version and its libllama file): a state written by
    another build is never trusted, even where llama.cpp's own checks would pass."""
    import llama_cpp       # late: the runner child has it mapped already; the service never calls this
    lib = Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(p for p in lib.iterdir() if p.suffix in (".so", ".dylib", ".dll")) if lib.is_dir() else []
    out: dict = {"llama_cpp_python": getattr(llama_cpp, "__version__", "")}
    for f in libs:
        st = f.stat()
        out[f.name] = [st.st_size, st.st_mtime_ns]
    return out


def key_of(facts: dict) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]


def tokens_name(tokens: np.ndarray) -> str:
    return hashlib.sha1(tokens.tobytes()).hexdigest()[:24] + SUFFIX


class DiskEntry:
    __slots__ = ("path", "tokens", "size", "payload_at", "payload_size", "crc")

    def __init__(self, path: Path, tokens: np.ndarray, size: int, payload_at: int, payload_size: int, crc: int):
        self.path, self.tokens, self.size = path, tokens, size
        self.payload_at, self.payload_size, self.crc = payload_at, payload_size, crc


class Refused(Exception):
    """A file that is not a state this runner may load (damaged, foreign, another build)."""


class MappedState:
    """A state file's payload as its mapped pages (no copy): `pointer` and `len` for llama_state_seq_set_data,
    valid until `close`."""

    def __init__(self, mapped: mmap.mmap, entry: DiskEntry):
        self._mapped = mapped
        self._at, self._n_tokens = entry.payload_at, len(entry.tokens)
        # a file shorter than its header says raises here (ValueError), before anything reads it
        self.payload = np.frombuffer(mapped, dtype=np.uint8, count=entry.payload_size, offset=entry.payload_at)

    def tokens_bytes(self) -> bytes:
        return self._mapped[self._at - 4 * self._n_tokens:self._at]

    @property
    def pointer(self):
        return ctypes.cast(self.payload.ctypes.data, ctypes.POINTER(ctypes.c_uint8))

    def __len__(self) -> int:
        return len(self.payload)

    def close(self) -> None:
        self.payload = np.empty(0, dtype=np.uint8)      # the view goes first: a mapping with views cannot close
        self._mapped.close()


def read_header(path: Path, facts: dict) -> DiskEntry:
    """Parse a file's header and tokens; raise Refused unless it is a complete file written for `facts`."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(len(MAGIC) + 4)
        if len(head) != len(MAGIC) + 4 or head[:len(MAGIC)] != MAGIC:
            raise Refused("not a Strata prompt-cache file")
        n = int.from_bytes(head[len(MAGIC):], "little")
        if not 0 < n <= MAX_HEADER:
            raise Refused("bad header length")
        try:
            h = json.loads(f.read(n))
        except ValueError:
            raise Refused("damaged header") from None
        if not isinstance(h, dict) or h.get("format") != FORMAT:
            raise Refused("another file format")
        if h.get("facts") != facts:
            raise Refused("written for another model, build or context")
        n_tokens, payload_size, crc = h.get("n_tokens"), h.get("payload_size"), h.get("crc32")
        if not (isinstance(n_tokens, int) and isinstance(payload_size, int) and isinstance(crc, int)) or \
                min(n_tokens, payload_size, crc) < 0:
            raise Refused("damaged header")
        tok_at = len(MAGIC) + 4 + n
        if size != tok_at + 4 * n_tokens + payload_size or n_tokens == 0 or payload_size == 0:
            raise Refused("truncated or padded file")
        tokens = np.frombuffer(f.read(4 * n_tokens), dtype="<i4").astype(np.int32)
    return DiskEntry(path, tokens, size, tok_at + 4 * n_tokens, payload_size, crc)


def write_file(path: Path, facts: dict, tokens: np.ndarray, payload) -> int:
    """Write a state file atomically (a temporary name, then rename). Returns its size."""
    tok = np.ascontiguousarray(tokens, dtype="<i4").tobytes()
    mv = memoryview(payload).cast("B")
    crc = zlib.crc32(mv, zlib.crc32(tok))
    header = json.dumps({"format": FORMAT, "facts": facts, "n_tokens": len(tokens), "payload_size": len(mv),
                         "crc32": crc, "written": time.time()}).encode()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(header).to_bytes(4, "little") + header)
            f.write(tok)
            f.write(mv)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink(missing_ok=True)
    return len(MAGIC) + 4 + len(header) + len(tok) + len(mv)


class DiskPromptCache:
    """This runner's files, and the bound over the whole cache folder (every model's). `limit` 0 = off."""

    def __init__(self, root: str | os.PathLike, facts: dict, limit: int, max_age_s: float = MAX_AGE_S):
        self.root = Path(root)
        self.facts = facts
        self.key = key_of(facts)
        self.dir = self.root / self.key
        self.limit = max(0, int(limit))
        self.max_age_s = max_age_s
        self.entries: list[DiskEntry] = []
        self.lock = threading.Lock()        # entries: the writer thread adds, the context thread reads and drops
        self.hits = self.hit_tokens = self.writes = self.refused = 0
        self.restore_s = 0.0                # seconds the last restore took (read, check, load into the context)
        self._dir_mtime = -1
        self.on_change: Callable[[], None] | None = None   # called (from any thread) when state() changed
        self._q: queue.Queue = queue.Queue(maxsize=2)
        self._pending: list[np.ndarray] = []    # tokens of states queued or being written (count as covered)
        self._writer: threading.Thread | None = None
        if self.limit > 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.scan()

    @property
    def enabled(self) -> bool:
        return self.limit > 0

    @property
    def bytes(self) -> int:
        with self.lock:
            return sum(e.size for e in self.entries)

    def state(self) -> dict:
        with self.lock:
            n, size = len(self.entries), sum(e.size for e in self.entries)
        return {"bytes": size, "entries": n, "limit": self.limit, "hits": self.hits, "hit_tokens": self.hit_tokens,
                "restore_s": self.restore_s, "writes": self.writes, "refused": self.refused}

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def record_hit(self, n: int, seconds: float) -> None:
        self.hits += 1
        self.hit_tokens += n
        self.restore_s = seconds
        self._changed()

    # ---- the folder ------------------------------------------------------------------------------------------
    def scan(self) -> None:
        """Index this runner's files (refusing and deleting bad ones), then bound the whole folder."""
        try:
            self._dir_mtime = self.dir.stat().st_mtime_ns
            names = {p.name: p for p in self.dir.iterdir() if p.name.endswith(SUFFIX)}
        except OSError:
            return
        with self.lock:
            known = {e.path.name for e in self.entries}
        found = []
        for name, p in names.items():
            if name in known:
                continue
            try:
                found.append(read_header(p, self.facts))
            except Refused as e:
                self._refuse(p, str(e))
            except OSError:
                pass                        # vanished meanwhile (another runner evicted it)
        with self.lock:
            self.entries = [e for e in self.entries if e.path.name in names] + found
        self.evict()
        self._changed()

    def rescan_if_changed(self) -> None:
        try:
            m = self.dir.stat().st_mtime_ns
        except OSError:
            return
        if m != self._dir_mtime:
            self.scan()

    def evict(self, incoming: int = 0) -> None:
        """Files older than max_age_s go; then the least recently used until the folder (every model's files and
        `incoming` more bytes) is within the limit. Half-written files of dead writers go too."""
        now = time.time()
        files = []
        try:
            for d in self.root.iterdir():
                if not d.is_dir():
                    continue
                for p in d.iterdir():
                    try:
                        st = p.stat()
                    except OSError:
                        continue
                    if p.name.endswith(".tmp"):
                        if now - st.st_mtime > TMP_AGE_S:
                            p.unlink(missing_ok=True)
                        continue
                    if p.name.endswith(SUFFIX):
                        files.append((st.st_mtime, st.st_size, p))
        except OSError:
            return
        files.sort(key=lambda f: f[0])
        total = sum(f[1] for f in files) + incoming
        for mtime, size, p in files:
            if now - mtime <= self.max_age_s and total <= self.limit:
                break
            p.unlink(missing_ok=True)
            total -= size
            self._forget(p)

    def _forget(self, path: Path) -> None:
        with self.lock:
            self.entries = [e for e in self.entries if e.path != path]

    def _refuse(self, path: Path, why: str) -> None:
        log.warning("prompt cache file %s refused and deleted: %s", path, why)
        self.refused += 1
        path.unlink(missing_ok=True)
        self._forget(path)
        self._changed()

    # ---- lookups (context thread) ----------------------------------------------------------------------------
    def best(self, prompt, limit: int | None = None, max_len: int | None = None) -> tuple[DiskEntry | None, int]:
        """The file whose tokens share the longest prefix with `prompt`: (entry, tokens reusable). `max_len`: only
        files of at most that many tokens (a state loads whole: it must fit the sequence's cells)."""
        with self.lock:
            entries = [e for e in self.entries if max_len is None or len(e.tokens) <= max_len]
        best, n_best = None, 0
        for e in entries:
            n = common_prefix(e.tokens, prompt)
            if limit is not None:
                n = min(n, limit)
            if n > n_best:
                best, n_best = e, n
        return best, n_best

    def covered(self, tokens) -> int:
        """How many leading tokens of `tokens` some file already holds (or will, once the writer gets to it)."""
        with self.lock:
            pending = [common_prefix(t, tokens) for t in self._pending]
        return max([self.best(tokens)[1], *pending])

    def load(self, entry: DiskEntry) -> MappedState | None:
        """The entry's state, checked, mapped from its file (close it after use), or None when the file is gone
        or refused."""
        try:
            with open(entry.path, "rb") as f:
                if os.fstat(f.fileno()).st_size != entry.size:
                    raise Refused("changed since it was indexed")
                state = MappedState(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), entry)
            try:
                tok = state.tokens_bytes()
                if zlib.crc32(state.payload.data, zlib.crc32(tok)) != entry.crc or \
                        np.frombuffer(tok, dtype="<i4").tolist() != entry.tokens.tolist():
                    raise Refused("checksum mismatch")
            except BaseException:
                state.close()
                raise
        except Refused as e:
            self._refuse(entry.path, str(e))
            return None
        except (OSError, ValueError):       # gone, or too short for what its header says
            self._forget(entry.path)
            return None
        os.utime(entry.path)                 # recently used: the last to be evicted
        return state

    def refuse(self, entry: DiskEntry, why: str) -> None:
        """llama.cpp did not accept the entry's state: it never will."""
        self._refuse(entry.path, why)

    # ---- writing ---------------------------------------------------------------------------------------------
    def save(self, tokens, payload, size: int) -> bool:
        """Queue a state (a buffer of `size` bytes, no longer used by the caller) for writing; False when the
        writer is busy with two already (the cache is a help, never a wait)."""
        if not self.enabled or size + len(tokens) * 4 > self.limit:
            return False
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="strata-disk-cache", daemon=True)
            self._writer.start()
        toks = np.asarray(tokens, dtype=np.int32).copy()
        with self.lock:
            self._pending.append(toks)
        try:
            self._q.put_nowait((toks, payload, size))
        except queue.Full:
            with self.lock:
                self._pending = [t for t in self._pending if t is not toks]
            return False
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until queued states are written (at shutdown); False if the time ran out."""
        if self._writer is None:
            return True
        end = time.monotonic() + timeout
        while self._q.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.02)
        return not self._q.unfinished_tasks

    def _write_loop(self) -> None:
        while True:
            tokens, payload, size = self._q.get()
            try:
                self._write(tokens, memoryview(payload)[:size])
            except Exception as e:  # noqa: BLE001 - a full disk or a vanished folder: the cache is best effort
                log.warning("writing a prompt cache file: %s", e)
            finally:
                with self.lock:
                    self._pending = [t for t in self._pending if t is not tokens]
                self._q.task_done()

    def _write(self, tokens: np.ndarray, payload) -> None:
        self.evict(incoming=len(payload) + 4 * len(tokens) + 4096)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / tokens_name(tokens)
        size = write_file(path, self.facts, tokens, payload)
        entry = read_header(path, self.facts)
        with self.lock:
            # files whose tokens are a prefix of these are superseded by this one
            old = [e for e in self.entries if e.path != path and common_prefix(e.tokens, tokens) == len(e.tokens)]
            self.entries = [e for e in self.entries if e.path != path and e not in old] + [entry]
        for e in old:
            e.path.unlink(missing_ok=True)
        self.writes += 1
        self._dir_mtime = self.dir.stat().st_mtime_ns
        self._changed()
        log.info("prompt cache: wrote %d tokens (%.1f MiB) to %s", len(tokens), size / 2**20, path.name)
