"""Blob downloads: resumable, in parallel ranges for big blobs, verified, and shared between concurrent pulls.

One `Transfer` per blob at a time (keyed by digest): a second pull of the same blob waits on the first one's
transfer and sees the same progress; when the last waiter goes away (a client that disconnects, a cancelled
pull) the transfer stops. This is how Ollama's server/download.go behaves, and the layout on disk is similar:

    <root>/sha256-HEX.partial        the bytes so far (written at their offsets, parts in parallel)
    <root>/sha256-HEX.parts.json     which byte ranges are done, so a later pull resumes where this one stopped

Nothing here registers a model: a finished transfer is a complete `.partial`; `verify_into` hashes it and only
then moves it to its final name (a mismatch removes the partial, so the next pull downloads it again).
Covered by tests/integration/service/test_pull.py (resume, digests, cut connections).
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

import aiohttp
from yarl import URL

from app import __version__

log = logging.getLogger("strata.pull")

MB = 1000 * 1000
PART_MIN = 100 * MB           # Ollama's part sizes: total/16, clamped to [100 MB, 1000 MB]
PART_MAX = 1000 * MB
N_PARTS = 16
CONCURRENCY = 8               # parts downloaded at once
STALL_S = 30.0                # no byte for this long: the part is retried (Ollama: 30 s)
RETRIES = 6
WRITE_CHUNK = 1 << 20         # received bytes are written in chunks of this size
MAX_REDIRECTS = 10

Progress = Callable[[int, int], Awaitable[None]]     # (completed bytes, total bytes)


def _env_number(name: str, default: float) -> float:
    """Tuning knobs from the environment (tests use small parts and short stalls); bad values are ignored."""
    try:
        v = float(os.environ.get(name, ""))
        return v if v > 0 else default
    except ValueError:
        return default


class RegistryError(Exception):
    """A pull or push failed; `status` is the HTTP status the API reports (404 missing, 502 upstream, ...)."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class DigestMismatch(RegistryError):
    pass


@dataclass(frozen=True)
class Source:
    """Where one blob comes from and what it must hash to."""
    url: str
    digest: str                              # "sha256:HEX" (or "gitsha1:HEX"): the key and what the bytes hash to
    size: int                                # bytes, from the manifest / the Hub's file listing
    headers: tuple[tuple[str, str], ...] = ()   # sent to the first host only (auth), never after a redirect away
    allow_http: bool = False                 # plain http is allowed (the user asked for an insecure registry)

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]


@dataclass
class _Part:
    offset: int
    size: int
    done: int = 0
    buffered: int = 0                        # received, not yet written (counted in progress)

    @property
    def start(self) -> int:
        return self.offset + self.done


@dataclass
class Transfer:
    source: Source
    parts: list[_Part] = field(default_factory=list)
    waiters: int = 0
    task: asyncio.Task | None = None
    direct_url: str | None = None            # where redirects ended, reused by every part
    abandoned: bool = False                  # its last waiter left and cancelled it
    saved_at: float = 0.0                    # when the parts record was last written

    @property
    def completed(self) -> int:
        return sum(p.done + p.buffered for p in self.parts)


def sha256_file(path: Path, want_git_sha1: bool = False) -> tuple[str, str | None]:
    """sha256 of a file (and its git blob id when asked: Hub files not in LFS are known by that)."""
    h = hashlib.sha256()
    g = None
    if want_git_sha1:
        g = hashlib.sha1()
        g.update(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            if g:
                g.update(chunk)
    return h.hexdigest(), (g.hexdigest() if g else None)


class Downloader:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.part_min = int(_env_number("STRATA_PULL_PART_MIN", PART_MIN))
        self.stall_s = _env_number("STRATA_PULL_STALL_S", STALL_S)
        self.retries = int(_env_number("STRATA_PULL_RETRIES", RETRIES))
        self._transfers: dict[str, Transfer] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._session: aiohttp.ClientSession | None = None

    # ---- files ---------------------------------------------------------------------------------------------
    def partial_path(self, src: Source) -> Path:
        return self.root / f"sha256-{src.hex}.partial"

    def _sidecar(self, src: Source) -> Path:
        return self.root / f"sha256-{src.hex}.parts.json"

    def downloaded_bytes(self, src: Source) -> int:
        """Bytes of this blob already on disk from an earlier, interrupted pull (for the free-space check)."""
        t = self._transfers.get(src.digest)
        if t is not None:
            return t.completed
        parts = self._read_parts(src)
        return sum(p.done for p in parts) if parts else 0

    def _read_parts(self, src: Source) -> list[_Part] | None:
        try:
            doc = json.loads(self._sidecar(src).read_text())
            if doc.get("size") != src.size or not self.partial_path(src).exists():
                return None
            parts = [_Part(int(o), int(s), int(d)) for o, s, d in doc["parts"]]
            if sum(p.size for p in parts) != src.size or any(not 0 <= p.done <= p.size for p in parts):
                return None
            return parts
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_parts(self, t: Transfer) -> None:
        tmp = self._sidecar(t.source).with_suffix(".tmp")
        tmp.write_text(json.dumps({"digest": t.source.digest, "size": t.source.size,
                                   "parts": [[p.offset, p.size, p.done] for p in t.parts]}))
        os.replace(tmp, self._sidecar(t.source))

    def discard(self, src: Source) -> None:
        self.partial_path(src).unlink(missing_ok=True)
        self._sidecar(src).unlink(missing_ok=True)

    def _plan_parts(self, size: int) -> list[_Part]:
        part = min(max(size // N_PARTS, self.part_min), PART_MAX)
        return [_Part(off, min(part, size - off)) for off in range(0, size, part)] or [_Part(0, 0)]

    # ---- the shared transfer ---------------------------------------------------------------------------------
    async def fetch(self, src: Source, progress: Progress, tick: float = 0.1) -> Path:
        """Download `src` into its partial file (resuming) and return it once complete (not yet verified).
        Cancelling this call stops the transfer when no other pull is waiting for the same blob."""
        t = self._transfers.get(src.digest)
        if t is not None and t.abandoned and t.task is not None:
            await asyncio.wait({t.task})            # let the cancelled one close its file first
            t = self._transfers.get(src.digest)
        if t is None:
            t = Transfer(src)
            self._transfers[src.digest] = t
            t.task = asyncio.get_running_loop().create_task(self._run(t))
            t.task.add_done_callback(functools.partial(self._forget, src.digest, t))
        task = t.task
        assert task is not None                 # a registered transfer has its task (just above)
        t.waiters += 1
        try:
            last = -1
            while not task.done():
                done = t.completed
                if done != last:
                    last = done
                    await progress(done, src.size)
                await asyncio.wait({task}, timeout=tick)
            task.result()                       # raises the transfer's error
            await progress(src.size, src.size)
            return self.partial_path(src)
        finally:
            t.waiters -= 1
            if t.waiters == 0 and not task.done():
                t.abandoned = True
                task.cancel()

    def _forget(self, key: str, t: Transfer, task: asyncio.Task) -> None:
        if self._transfers.get(key) is t:
            del self._transfers[key]
        if not task.cancelled() and task.exception() is not None:
            log.info("download of %s failed: %s", key[:19], task.exception())

    async def _run(self, t: Transfer) -> None:
        src = t.source
        self.root.mkdir(parents=True, exist_ok=True)
        t.parts = self._read_parts(src) or self._plan_parts(src.size)
        if not any(p.done for p in t.parts):
            self.partial_path(src).unlink(missing_ok=True)
        fd = os.open(self.partial_path(src), os.O_RDWR | os.O_CREAT, 0o644)
        keep = True
        try:
            self._write_parts(t)
            try:
                await self._run_parts(t, fd)
            except _NoRanges:
                # the server ignores Range: start again from byte 0 as one part
                t.parts = [_Part(0, src.size)]
                os.ftruncate(fd, 0)
                await self._run_parts(t, fd)
            os.fsync(fd)
            if os.fstat(fd).st_size != src.size:
                raise RegistryError(f"blob {src.digest}: got {os.fstat(fd).st_size} bytes, expected {src.size}")
        except BaseException as e:
            # nothing to resume from, or a blob the registry does not have: leave no partial behind
            keep = not (sum(p.done for p in t.parts) == 0 or (isinstance(e, RegistryError) and e.status == 404))
            raise
        finally:
            os.close(fd)
            if keep:
                try:
                    self._write_parts(t)
                except OSError:
                    pass
            else:
                self.discard(src)

    async def _run_parts(self, t: Transfer, fd: int) -> None:
        sem = asyncio.Semaphore(CONCURRENCY if len(t.parts) > 1 else 1)

        async def one(part: _Part) -> None:
            async with sem:
                await self._part_with_retries(t, part, fd)

        tasks = [asyncio.ensure_future(one(p)) for p in t.parts if p.done < p.size]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _part_with_retries(self, t: Transfer, part: _Part, fd: int) -> None:
        err: Exception | None = None
        for attempt in range(self.retries):
            try:
                await self._part(t, part, fd)
                return
            except (_NoRanges, RegistryError):
                raise
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, _Stalled) as e:
                err = e
                part.buffered = 0
                delay = min(8.0, 0.25 * 2 ** attempt)
                log.info("%s bytes %d-: attempt %d failed (%s); retrying in %.1f s", t.source.digest[7:19],
                         part.start, attempt + 1, _describe(e), delay)
                await asyncio.sleep(delay)
        raise RegistryError(f"downloading {t.source.digest[7:19]} from {URL(t.source.url).host} failed "
                            f"{self.retries} times ({_describe(err)}); pull again to resume where it stopped")

    async def _part(self, t: Transfer, part: _Part, fd: int) -> None:
        src = t.source
        ranged = not (len(t.parts) == 1 and part.start == 0)
        headers = {"Range": f"bytes={part.start}-{part.offset + part.size - 1}"} if ranged else {}
        async with await self._open(t, headers) as resp:
            if ranged and resp.status == 200:
                raise _NoRanges()
            if ranged and resp.status == 206:
                _check_content_range(resp.headers.get("Content-Range", ""), part, src)
            loop = asyncio.get_running_loop()
            buf = bytearray()
            need = part.size - part.done
            while need > 0:
                try:
                    chunk = await asyncio.wait_for(resp.content.read(min(need, WRITE_CHUNK)), self.stall_s)
                except asyncio.TimeoutError:
                    raise _Stalled(f"no data for {self.stall_s:.0f} s") from None
                if not chunk:
                    raise aiohttp.ClientPayloadError(f"connection closed {need} bytes early")
                buf += chunk
                need -= len(chunk)
                part.buffered = len(buf)
                if len(buf) >= WRITE_CHUNK or need == 0:
                    await loop.run_in_executor(None, os.pwrite, fd, bytes(buf), part.start)
                    part.done += len(buf)
                    part.buffered = 0
                    buf.clear()
                    self._maybe_save(t)

    def _maybe_save(self, t: Transfer) -> None:
        now = time.monotonic()
        if now - t.saved_at > 0.5:
            t.saved_at = now
            try:
                self._write_parts(t)
            except OSError:
                pass

    async def _open(self, t: Transfer, extra: dict) -> aiohttp.ClientResponse:
        """GET the blob (following redirects by hand: credentials go only to the host the user named)."""
        session = self.session()
        url = URL(t.direct_url or t.source.url)
        first = URL(t.source.url)
        for _ in range(MAX_REDIRECTS + 1):
            if url.scheme == "http" and not t.source.allow_http:
                raise RegistryError(f"refusing a plain-http download from {url.host} (use insecure for such "
                                    "a registry)", 400)
            headers = dict(extra)
            if url.host == first.host and url.port == first.port:
                headers.update(t.source.headers)
            resp = await session.get(url, headers=headers, allow_redirects=False)
            if resp.status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
                url = url.join(URL(resp.headers["Location"]))
                resp.release()
                continue
            if resp.status in (200, 206):
                t.direct_url = str(url)
                return resp
            text = (await resp.text(errors="replace"))[:300]
            resp.release()
            what = f"blob {t.source.digest} from {first.host}"
            if resp.status == 404:
                raise RegistryError(f"{what}: not found (HTTP 404)", 404)
            if resp.status in (401, 403):
                raise RegistryError(f"{what}: access denied (HTTP {resp.status}) {text}".strip(), 502)
            if resp.status == 416:
                raise RegistryError(f"{what}: the server refused the byte range (HTTP 416)", 502)
            if resp.status >= 500:
                raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status, message=text)
            raise RegistryError(f"{what}: HTTP {resp.status} {text}".strip(), 502)
        raise RegistryError(f"blob {t.source.digest}: more than {MAX_REDIRECTS} redirects")

    # ---- verification --------------------------------------------------------------------------------------
    def lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    async def verify_into(self, src: Source, dest_for: Callable[[str], Path]) -> Path:
        """Hash the complete partial; when it matches, move it to `dest_for(sha256 hex)` and return that path.
        A mismatch removes the partial and its record (the next pull starts over) and raises DigestMismatch.
        A `gitsha1:` source (a Hub file kept in git, not LFS) is checked against its git blob id."""
        git = src.digest.startswith("gitsha1:")
        async with self.lock(src.digest):
            if not git and (dest := dest_for(src.hex)).exists() and dest.stat().st_size == src.size:
                return dest                               # another pull of the same blob got here first
            partial = self.partial_path(src)
            loop = asyncio.get_running_loop()
            got, got_git = await loop.run_in_executor(None, sha256_file, partial, git)
            if (got_git if git else got) != src.hex:
                self.discard(src)
                have = f"gitsha1:{got_git}" if git else f"sha256:{got}"
                raise DigestMismatch(f"digest mismatch, file must be downloaded again: want {src.digest}, "
                                     f"got {have}")
            dest = dest_for(got)
            os.replace(partial, dest)
            self._sidecar(src).unlink(missing_ok=True)
            return dest

    # ---- HTTP session --------------------------------------------------------------------------------------
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # no total timeout (blobs are large); stalls are caught per read (stall_s)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)
            self._session = aiohttp.ClientSession(timeout=timeout, trust_env=True,
                                                  headers={"User-Agent": _user_agent()})
        return self._session

    async def close(self) -> None:
        for t in list(self._transfers.values()):
            if t.task is not None:
                t.task.cancel()
        tasks = [t.task for t in self._transfers.values() if t.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()


class _NoRanges(Exception):
    """The server answered a byte-range request with the whole file."""


class _Stalled(Exception):
    pass


def _check_content_range(value: str, part: _Part, src: Source) -> None:
    # "bytes START-END/TOTAL"
    try:
        unit, _, rest = value.partition(" ")
        span, _, total = rest.partition("/")
        start = int(span.split("-")[0])
    except ValueError:
        raise RegistryError(f"blob {src.digest}: the server sent a bad Content-Range {value!r}") from None
    if unit != "bytes" or start != part.start or (total not in ("*", "") and int(total) != src.size):
        raise RegistryError(f"blob {src.digest}: the server sent bytes {rest!r}, expected {part.start}- of "
                            f"{src.size}")


def _describe(e: BaseException | None) -> str:
    if e is None:
        return "no attempt made"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _user_agent() -> str:
    return f"strata/{__version__}"
