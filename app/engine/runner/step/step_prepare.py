"""Async batch preparation: the next step's host work that does not need this step's sampled tokens, done while
this step's decode is in flight (docs/architecture.md, "Runner").

What moves: `StepUpdate.advance` (each sequence's KV position and history, prefills that became generations) and
`StepScheduler.prepare` (the next plan and its batch rows, all but the tokens being sampled; `schedule` takes it
when nothing it depends on changed and nobody drafts, else builds it again, so the batch is the same either way).
Where it runs (`prepare_mode`):
- "shadow": on the context thread, after `llama_decode` returned and before the first synchronizing call (the
  executor's `llama_synchronize`, which sampling would otherwise make). On a GPU build `llama_decode` only queues
  the graph and returns, so this work runs while the device computes. On a CPU build the graph has been computed
  by then: the same work at another moment, neither gain nor loss.
- "helper": a thread of its own that works while the context thread is inside `llama_decode` (ctypes releases
  the GIL there), on a CPU build with a CPU to spare (n_threads below the CPUs this process may use). Not with a
  compute thread on every CPU: the helper would preempt one, and the others would wait for it at the next barrier.
  The decode's return code is not known yet, so `advance` keeps what `StepUpdate.undo` needs.
- "off": everything after the sampled tokens, in order (`RunnerSettings.async_prep` "off": for measuring,
  bench/bench_host_step.py).
Covered by tests/integration/engine/test_async_prep.py (the same greedy tokens in every mode, 1 to 16 streams).
"""
from __future__ import annotations

import queue
import threading
import time

from app.engine.runner.step.step_clock import HostPhases
from app.engine.runner.step.step_scheduler import StepScheduler
from app.engine.runner.step.step_update import StepUpdate
from app.engine.runner.step_plan import StepPlan


MODES = ("auto", "off", "shadow", "helper")


def prepare_mode(setting: str, gpu: bool, n_threads: int, cpus: int) -> str:
    """Where the next step's preparation runs: "off", "shadow" (context thread, between the decode's return and
    the first synchronizing call) or "helper" (a thread beside a CPU decode that leaves a CPU free). `setting`
    (RunnerSettings.async_prep): "auto" chooses by the rule above; the others force a mode."""
    if setting not in MODES:
        raise ValueError(f"async_prep must be one of {', '.join(MODES)}, got {setting!r}")
    if setting != "auto":
        return setting
    if gpu or n_threads >= cpus:
        return "shadow"
    return "helper"


class StepPrepare:
    """Runs `advance` + `prepare` for a plan in flight, where `mode` says. The executor calls `launch` just before
    `llama_decode` and `decoded` just after it; the loop calls `finish` before the update."""

    def __init__(self, mode: str, update: StepUpdate, scheduler: StepScheduler, phases: HostPhases):
        self.mode, self.update, self.scheduler, self.phases = mode, update, scheduler, phases
        self._posted = False
        self._helper: _Helper | None = None

    def _work(self, plan: StepPlan, reversible: bool) -> None:
        self.update.advance(plan, reversible)
        self.scheduler.prepare()

    def launch(self, plan: StepPlan) -> None:
        """The plan's decode starts now (context thread)."""
        if self.mode == "helper":
            if self._helper is None:
                self._helper = _Helper(lambda p: self._work(p, True))
            self._helper.jobs.put(plan)
            self._posted = True

    def decoded(self, plan: StepPlan, rc: int) -> None:
        """`llama_decode` returned `rc`; nothing has synchronized yet (context thread)."""
        if self.mode == "shadow" and rc == 0:
            self._work(plan, False)

    def finish(self, plan: StepPlan, rc: int) -> None:
        """Before the update (context thread): wait for the helper's work; after a failed decode nothing prepared
        applies (the update's `undo` puts the sequences back)."""
        if self._posted:
            self._posted = False
            assert self._helper is not None
            error, seconds = self._helper.done.get()
            self.phases.add("helper", seconds)
            if error is not None:
                raise error
        if rc != 0:
            self.scheduler.discard_prepared()

    def close(self) -> None:
        if self._helper is not None:
            self._helper.jobs.put(None)


class _Helper:
    def __init__(self, work):
        self.work = work
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name="strata-prepare", daemon=True).start()

    def _run(self) -> None:
        while True:
            plan = self.jobs.get()
            if plan is None:
                return
            t0 = time.perf_counter()
            try:
                self.work(plan)
                error = None
            except BaseException as e:  # noqa: BLE001 - handed to the context thread, which ends the process
                error = e
            self.done.put((error, time.perf_counter() - t0))
