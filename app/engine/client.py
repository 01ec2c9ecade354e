"""The parent side of a runner process (asyncio). One RunnerClient = one loaded model = one child process.

A reader thread blocks on the Connection and hands messages to the event loop in bursts (one wake-up for all
that is waiting), so the per-token cost on the loop is a queue put. When the process ends for any reason,
every request in flight fails with RunnerError (RunnerExited: naming the model, the exit signal or the freeze,
and the last lines the runner wrote to stderr), exit callbacks run in the loop, and a new RunnerClient can load
the model again. While requests wait, a watchdog kills a runner that froze or is stuck in one step
(runner_watch.py; docs/architecture.md, "When a runner dies or hangs").
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import AsyncGenerator, Callable

from app.discovery.host import host_memory, thp_mode, with_hugetlb_tunable
from app.engine import protocol as P
from app.engine import stderr_tail
from app.engine.gguf.chat_facts import read_chat_facts
from app.engine.layout.types import Layout
from app.engine.runner_settings import RunnerSettings
from app.engine.runner_watch import WatchLimits, judge, process_state, progress_between, scheduled_ns
from app.ggml import rpc

log = logging.getLogger("strata.engine")

CONFIRM_S = 0.25                    # a watchdog verdict is checked again this much later before the runner is killed
STDERR_DRAIN_S = 2.0                # after the process ended: how long its last stderr lines may take to arrive
PROMPT_CACHE_SHARE = 0.10           # default prompt cache: this share of the host's available RAM ...
PROMPT_CACHE_MAX = 4 << 30          # ... at most this much per loaded model


class RunnerError(RuntimeError):
    """The runner died or the request failed; the message says why, without naming the model: the caller that
    knows the model's name puts it in front once ("model 'x': its runner process ended unexpectedly ...")."""


class LoadError(RunnerError):
    """Loading failed (no memory, corrupt file, llama.cpp abort during load)."""


class RequestError(RunnerError):
    """The request itself was invalid (bad options, schema, template...); the runner is fine. Maps to HTTP 400."""


class ContextOverflowError(RequestError):
    """The prompt does not fit the loaded context (runner/prompt/context_fit.py); `data` has prompt_tokens, reserve and
    limit, for the service's answer (a larger context, or the dialect's own error)."""

    def __init__(self, message: str, data: dict | None = None):
        super().__init__(message)
        self.data = dict(data or {})


class RunnerExited(RunnerError):
    """The runner process is gone: `kind` "exited" (it died: a signal, an abort, an exit code), "frozen" (the
    watchdog killed it: no heartbeat, or stuck in one step) or "closed" (unloaded on purpose)."""

    def __init__(self, message: str, kind: str = "exited"):
        super().__init__(message)
        self.kind = kind


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


_ids = itertools.count(1)


def default_prompt_cache_bytes() -> int:
    """A modest share of the RAM available now (the service's STRATA_PROMPT_CACHE_MIB, read in its config, is
    passed as `prompt_cache_bytes` instead when set)."""
    try:
        _, available = host_memory()
    except OSError:
        return 0
    return int(min(PROMPT_CACHE_MAX, available * PROMPT_CACHE_SHARE))


# libgomp's spin at barriers before it sleeps (GOMP_SPINCOUNT), for runners: the default (300000 pauses, ~15 ms)
# never sleeps, which on a busy machine turns every graph barrier into a wait for a descheduled thread (a tenth of
# one thread's speed with a thread on every CPU); 3000 (~0.1 ms) keeps nearly the full-spin speed on an idle machine
# and most of one thread's on a busy one (docs/architecture.md, "llama.cpp facts" 16; bench/bench_threads.py with
# GOMP_SPINCOUNT set measures it: docs/bench-results.md). The user's own GOMP_SPINCOUNT / OMP_WAIT_POLICY win.
RUNNER_GOMP_SPINCOUNT = "3000"


_environ_lock = threading.Lock()


def _start_process(proc, huge_pages: bool) -> None:
    """Start the runner child; for a layout that reads its weights into memory (Layout.load_mode "read"), with its
    malloc asked for transparent huge pages (GLIBC_TUNABLES). glibc reads its tunables only when a process starts,
    so the variable must be in this process's environment at the spawn; it is taken out again at once, so that the
    service's later children (a dry run, an RPC worker, a CLI, a mapped runner) do not inherit it (one started by
    another thread during this spawn would). Only where the kernel gives huge pages on request ("madvise"): under
    "always" they come unasked."""
    if not huge_pages or thp_mode() != "madvise":
        proc.start()
        return
    with _environ_lock:
        before = os.environ.get("GLIBC_TUNABLES")
        os.environ["GLIBC_TUNABLES"] = with_hugetlb_tunable(before or "")
        try:
            proc.start()
        finally:
            if before is None:
                del os.environ["GLIBC_TUNABLES"]
            else:
                os.environ["GLIBC_TUNABLES"] = before


def _runner_process(*args) -> None:
    """The runner child's target (pickled by name for the 'spawn' start). The import is here, not at the top:
    app/engine/runner/ (llama.cpp, the step loop) is loaded only in the runner child, never in the service
    (docs/architecture.md, "Process model"); and libgomp reads its spin policy when llama.cpp loads it, below."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = RUNNER_GOMP_SPINCOUNT
    for name, value in Layout.from_dict(args[1]).environment().items():   # read by llama.cpp when it loads
        os.environ.setdefault(name, value)
    from app.engine.runner.main import runner_main

    runner_main(*args)


def _chat_facts(path: str):
    """The model's chat facts (template choice, family, turn stops), read here once for the runner it starts
    (cached per file version: the same the service reads for its checks and parser). A file llama.cpp may load
    but this reader cannot read still runs, with the GGUF's own template and no family markup."""
    try:
        return read_chat_facts(path)
    except Exception as e:  # noqa: BLE001 - never fail a load that llama.cpp may accept over this
        log.warning("chat facts unavailable for %s: %s", path, e)
        return None


class RunnerClient:
    def __init__(self, layout: Layout, *, n_threads: int | None = None, model_name: str = "", log_dir=None,
                 prompt_cache_bytes: int | None = None, watch: WatchLimits | None = None,
                 settings: RunnerSettings | None = None):
        self.layout = layout
        self.n_threads = n_threads
        self.model_name = model_name
        self.log_dir = str(log_dir) if log_dir else None
        # host RAM the runner may keep sequence states in (the prompt cache); accounted as its own memory kind
        self.prompt_cache_bytes = default_prompt_cache_bytes() if prompt_cache_bytes is None else prompt_cache_bytes
        self.watch = watch or WatchLimits()    # the service passes its config's; tests and benches the defaults
        self.settings = settings or RunnerSettings()    # likewise: the child reads no STRATA_* variable itself
        self._last_sign = time.monotonic()      # the last message from the runner (set on the reader thread)
        self._work_since = time.monotonic()     # when requests started waiting, after a time without any
        self._beat: P.Heartbeat | None = None   # the runner's last heartbeat
        self._stalled: str | None = None        # why the watchdog killed it
        # a late heartbeat's silence: (its start, when first measured, runner_watch.scheduled_ns then)
        self._quiet: tuple[float, float, dict[int, int] | None] | None = None
        self._stderr: stderr_tail.StderrTail | None = None
        self.exit_error: RunnerExited | None = None     # what every request got when the process ended
        self._watchdog_task: asyncio.Task | None = None
        self.prompt_cache_used = 0          # bytes the runner's host-RAM prompt cache holds now
        self.prompt_cache_entries = 0
        self.checkpoints = P.PromptCacheState(0, 0, 0)   # the runner's context checkpoints (bytes, count, hits)
        self.disk_cache = P.DiskCacheState(0, 0, 0)      # the runner's prompt cache on disk
        self.alive = False
        self.pid: int | None = None
        self.loaded: P.Loaded | None = None
        self.in_flight = 0
        self.exitcode: int | None = None
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams: dict[str, asyncio.Queue] = {}
        self._futures: dict[str, asyncio.Future] = {}
        self._exit_cbs: list[Callable[[int | None], None]] = []
        self._load_fut: asyncio.Future | None = None
        self._on_progress: Callable[[float], None] | None = None
        self._exited: asyncio.Event | None = None
        self._closing = False
        self._worker_down = ""      # why the RPC workers the layout uses stopped answering, when the runner died

    # ---- lifecycle ---------------------------------------------------------------------------------------
    async def start(self, on_progress: Callable[[float], None] | None = None) -> P.Loaded:
        if self._proc is not None:
            raise RunnerError("this RunnerClient was already started; create a new one to load again")
        self._loop = asyncio.get_running_loop()
        self._exited = asyncio.Event()
        self._load_fut = self._loop.create_future()
        self._on_progress = on_progress
        facts = await self._loop.run_in_executor(None, _chat_facts, self.layout.model_path)
        mp = multiprocessing.get_context("spawn")
        parent, child = mp.Pipe(duplex=True)
        if self.log_dir is None and stderr_tail.supported():   # else it writes its stderr to its own log file
            self._stderr = stderr_tail.StderrTail()
        self._proc = mp.Process(target=_runner_process, name=f"strata-runner-{self.model_name or 'model'}",
                                args=(child, self.layout.to_dict(), self.n_threads, self.model_name, self.log_dir,
                                      self.prompt_cache_bytes, self._stderr and self._stderr.child_end, facts,
                                      self.settings),
                                daemon=True)
        try:
            await self._loop.run_in_executor(None, _start_process, self._proc, self.layout.load_mode == "read")
        finally:
            if self._stderr is not None:
                self._stderr.child_started()
        child.close()
        self._conn = parent
        self.pid = self._proc.pid
        self.alive = True
        threading.Thread(target=self._read_loop, name=f"strata-runner-reader-{self.pid}", daemon=True).start()
        try:
            loaded = await self._load_fut
        except BaseException:
            await self.close()
            raise
        if self.watch.enabled:
            self._watchdog_task = self._loop.create_task(self._watchdog())
        return loaded

    async def close(self) -> None:
        """End the process (all its memory comes back). Idempotent."""
        if self._proc is None or self._closing:
            if self._exited is not None and self._proc is not None:
                await self._exited.wait()
            return
        self._closing = True
        proc, conn, exited = self._proc, self._conn, self._exited
        assert conn is not None and exited is not None          # start() set them with the process
        if self.alive:
            try:
                conn.send(P.Shutdown())
            except (OSError, ValueError):
                pass
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, proc.join, 10)
        if proc.is_alive():
            proc.terminate()
            await loop.run_in_executor(None, proc.join, 5)
        if proc.is_alive():
            proc.kill()
            await loop.run_in_executor(None, proc.join, 5)
        try:
            await asyncio.wait_for(exited.wait(), 10)
        except asyncio.TimeoutError:
            self._on_exit(proc.exitcode)
        try:
            conn.close()
        except OSError:
            pass

    def add_exit_callback(self, cb: Callable[[int | None], None]) -> None:
        self._exit_cbs.append(cb)

    # ---- requests ----------------------------------------------------------------------------------------
    def _not_running(self) -> RunnerError:
        if self.exit_error is not None:
            return RunnerExited(str(self.exit_error), self.exit_error.kind)
        return RunnerError("its runner is not running")

    async def generate(self, req: P.GenerateRequest) -> AsyncGenerator[P.Admitted | P.PromptProgress | P.TokenEvent |
                                                                         P.DoneEvent, None]:
        if not self.alive:
            raise self._not_running()
        if req.id in self._streams:
            raise RequestError(f"request id {req.id!r} is already in flight")
        q: asyncio.Queue = asyncio.Queue()
        self._work_starts()
        self._streams[req.id] = q
        self.in_flight += 1
        finished = False
        try:
            self._send(req)
            while True:
                item = await q.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                if isinstance(item, P.ErrorEvent):
                    finished = True
                    if item.kind == "context":
                        raise ContextOverflowError(item.message, item.data)
                    raise (RequestError if item.kind == "invalid" else RunnerError)(item.message)
                if isinstance(item, P.DoneEvent):
                    finished = True
                    yield item
                    return
                yield item
        finally:
            self._streams.pop(req.id, None)
            self.in_flight -= 1
            if not finished and self.alive:
                try:
                    self._send(P.Cancel(req.id))     # the client went away: free the slot
                except RunnerError:
                    pass

    def cancel(self, request_id: str) -> bool:
        """Ask the runner to end a request that is still streaming (generate()): its stream then ends with a
        DoneEvent whose reason is "cancelled" and whose counts are what it did. False: no such stream."""
        if request_id not in self._streams or not self.alive:
            return False
        try:
            self._send(P.Cancel(request_id))
        except RunnerError:
            return False
        return True

    async def embed(self, req: P.EmbedRequest) -> P.EmbedResult:
        res = await self._call(req.id, req)
        if res.error:
            raise RequestError(res.error)
        return res

    async def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        rid = f"tok-{next(_ids)}"
        res = await self._call(rid, P.TokenizeRequest(rid, text, add_special))
        return res.tokens

    async def count_prompt(self, req: P.GenerateRequest) -> int:
        """How many tokens a request's prompt is (its messages and tools through the chat template)."""
        return len((await self.render_prompt(req)).tokens)

    async def render_prompt(self, req: P.GenerateRequest) -> P.TokenizeResult:
        """A request's prompt as the runner would decode it: the rendered text and its tokens."""
        rid = f"tok-{next(_ids)}"
        return await self._call(rid, P.TokenizeRequest(rid, "", True, chat=req))

    async def stats(self) -> P.Stats:
        rid = f"stats-{next(_ids)}"
        return await self._call(rid, P.StatsRequest(rid))

    # ---- internals ---------------------------------------------------------------------------------------
    async def _call(self, rid: str, msg):
        if not self.alive:
            raise self._not_running()
        fut = asyncio.get_running_loop().create_future()
        self._work_starts()
        self._futures[rid] = fut
        self.in_flight += 1
        try:
            self._send(msg)
            return await fut
        finally:
            self._futures.pop(rid, None)
            self.in_flight -= 1

    def _work_starts(self) -> None:
        if not self._streams and not self._futures:
            self._work_since = time.monotonic()     # an idle runner's silence before now is not held against it

    async def _watchdog(self) -> None:
        """While requests wait, kill a runner that froze (no heartbeat for `watch.heartbeat_s`) or is stuck in one
        step (runner_watch.judge): every waiting request then fails with a message saying why (`_on_exit`; the
        service puts the model's name in front), and the scheduler's exit callback lets the next request load the
        model again. A stopped (SIGSTOP) or wedged runner, or a driver stuck in a kernel, would otherwise keep them
        waiting for ever."""
        while self.alive and not self._closing:
            await asyncio.sleep(self.watch.period_s)
            why = self._verdict()
            if why is None:
                continue
            # a verdict must still hold a moment later: after this service itself was suspended (a laptop's
            # sleep) the reader thread first catches up with the heartbeats that waited in the pipe
            await asyncio.sleep(CONFIRM_S)
            why = self._verdict()
            if why is None:
                continue
            self._stalled = why
            log.warning("the runner of %s (pid %s) %s: killing it", self.model_name, self.pid, why)
            try:
                if self._proc is not None:
                    self._proc.kill()
            except (OSError, ValueError):
                pass
            return

    def _verdict(self) -> str | None:
        """runner_watch.judge on what is known now; None while no request waits or the runner is going away.
        Once a heartbeat is late, what the kernel says the runner's threads did is measured from then on
        (runner_watch.scheduled_ns), so a runner that a busy machine keeps waiting for a CPU is told from a
        frozen one; a message waiting unread in the pipe means the runner spoke and this process is behind."""
        if not (self._streams or self._futures) or not self.alive or self._closing:
            return None
        now = time.monotonic()
        since = max(self._last_sign, self._work_since)
        silent = now - since
        progress = None
        if silent <= min(2 * P.HEARTBEAT_INTERVAL_S, self.watch.heartbeat_s / 2):
            self._quiet = None
        else:
            if self._unread():
                return None
            sched = scheduled_ns(self.pid)
            if self._quiet is None or self._quiet[0] != since:
                self._quiet = (since, now, sched)       # this silence's start as the kernel saw it
            else:
                progress = progress_between(self._quiet[2], sched, now - self._quiet[1])
        state = process_state(self.pid) if silent > self.watch.heartbeat_s else ""
        return judge(self.watch, silent, self._beat, state, progress)

    def _unread(self) -> bool:
        """Whether a message from the runner waits in the pipe (the reader thread has not taken it yet)."""
        try:
            return self._conn is not None and self._conn.poll(0)
        except (OSError, ValueError, EOFError):
            return False

    def _send(self, msg) -> None:
        if self._conn is None:
            raise RunnerError("the runner was not started")
        try:
            self._conn.send(msg)
        except (OSError, ValueError) as e:
            raise RunnerError(f"the runner is not reachable: {e}") from e
        except RecursionError:       # pickling a JSON schema hundreds of levels deep; nothing was written
            raise RequestError("the request is nested too deeply (a JSON schema hundreds of levels deep?)") from None

    def _read_loop(self):
        conn, loop = self._conn, self._loop
        ended = False
        while not ended:
            burst = []
            try:
                burst.append(conn.recv())
                while len(burst) < 256 and conn.poll(0):
                    burst.append(conn.recv())
            except (EOFError, OSError, ValueError):
                ended = True            # the process closed its end; what was read before still counts
            except Exception as e:      # a message that does not unpickle: a bug, never a silent hang
                burst.append(P.LoadFailed(f"bad message from the runner: {e}"))
                ended = True
                self._proc.kill()       # the stream is out of step: end it so requests fail instead of hanging
            if burst:
                self._last_sign = time.monotonic()      # here, not on the loop: a busy loop is not a silent runner
                try:
                    loop.call_soon_threadsafe(self._dispatch, burst)
                except RuntimeError:    # the loop is closed
                    return
        self._proc.join()
        if self._stderr is not None:
            self._stderr.wait_closed(STDERR_DRAIN_S)
        self._worker_down = self._lost_workers()
        try:
            loop.call_soon_threadsafe(self._on_exit, self._proc.exitcode)
        except RuntimeError:
            pass

    def _lost_workers(self) -> str:
        """After an unexpected exit of a runner that used RPC workers: which of them no longer answer (llama.cpp's
        RPC client aborts the runner when a worker dies or its connection breaks). Runs on the reader thread: the
        handshakes take up to a few seconds, never on the event loop."""
        endpoints = rpc.endpoints_of(self.layout.gpu_devices)
        if self._closing or not endpoints:
            return ""
        down = rpc.unreachable(endpoints)
        return "; ".join(down.values())

    def _dispatch(self, burst):
        for msg in burst:
            rid = getattr(msg, "id", None)
            if isinstance(msg, P.Heartbeat):
                self._beat = msg
                continue
            if isinstance(msg, P.PromptCacheState):
                self.prompt_cache_used, self.prompt_cache_entries = msg.bytes, msg.entries
                self.checkpoints = msg
                continue
            if isinstance(msg, P.DiskCacheState):
                self.disk_cache = msg
                continue
            if isinstance(msg, (P.TokenEvent, P.DoneEvent, P.Admitted, P.PromptProgress)) or (isinstance(msg, P.ErrorEvent)
                                                                             and rid in self._streams):
                q = self._streams.get(rid)
                if q is not None:
                    q.put_nowait(msg)
            elif isinstance(msg, (P.EmbedResult, P.Stats, P.TokenizeResult, P.ErrorEvent)):
                fut = self._futures.get(rid)
                if fut is not None and not fut.done():
                    if isinstance(msg, P.ErrorEvent):
                        fut.set_exception(RequestError(msg.message))
                    else:
                        fut.set_result(msg)
            elif isinstance(msg, P.LoadProgress):
                if self._on_progress is not None:
                    try:
                        self._on_progress(msg.progress)
                    except Exception:
                        pass
            elif isinstance(msg, P.Loaded):
                self.loaded = msg
                if not self._load_fut.done():
                    self._load_fut.set_result(msg)
            elif isinstance(msg, P.LoadFailed):
                if not self._load_fut.done():
                    self._load_fut.set_exception(LoadError(msg.message))

    def _on_exit(self, code):
        if self._exited.is_set():
            return
        self.alive = False
        self.exitcode = code
        name = self.model_name or self.layout.model_path
        lost = (f": {self._worker_down}; layers of this model were on it"
                if self._worker_down else "")
        tail = self._stderr.detail() if self._stderr is not None else ""
        said = f"; its last output: {tail}" if tail else ""
        if self._stalled:
            err = RunnerExited(f"its runner process {self._stalled}; the watchdog ended it ({describe_exit(code)}), "
                               f"and the next request loads the model again{said}", "frozen")
        elif self._closing:
            err = RunnerExited("its runner was closed", "closed")
        else:
            err = RunnerExited(f"its runner process ended unexpectedly ({describe_exit(code)}){lost}; "
                               f"the next request loads the model again{said}")
        self.exit_error = err
        if not self._closing:
            lines = self._stderr.lines() if self._stderr is not None else []
            log.warning("the runner process of %s (pid %s) ended: %s; its last %d stderr lines:%s", name, self.pid,
                        describe_exit(code), len(lines), "".join(f"\n  | {ln}" for ln in lines) or " (none)")
        if not self._load_fut.done():
            self._load_fut.set_exception(LoadError(f"its runner process ended while loading "
                                                   f"({describe_exit(code)}){lost}{said}"))
        for q in self._streams.values():
            q.put_nowait(err)
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(err)
        self._exited.set()
        if self._watchdog_task is not None:
            self._watchdog_task.cancel()
        for cb in list(self._exit_cbs):
            try:
                cb(code)
            except Exception:
                pass
