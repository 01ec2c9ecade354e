"""The runner's continuous-batching loop: the context thread's `plan = schedule(); result = execute(plan);
update(plan, result)`, the output thread beside it, and the reader thread's entry points (submit, cancel, stats).

Threads (docs/architecture.md, "Process model" and "Runner"):
- the CONTEXT thread owns the llama context. Each iteration it reaps ended sequences, admits ready ones into free
  slots and shifts full contexts (slots.py), runs a waiting embedding job, then one step: the scheduler decides
  (step_scheduler.py: which proposed drafts fit, prefill grants, the batch), the executor runs the plan (step_executor.py: image,
  llama_decode, sampling with draft verification, end reasons, then the next step's drafts) and the update
  applies the result (step_update.py). Nothing else touches the context.
- the OUTPUT thread (output_thread.py) does everything else while the context thread decodes: admission
  (admission.py), and the outputs of the last step (detokenize, stop strings, logprobs, events to the parent).
  It reaches the loop only through its port (output_port.py: ready, enqueue, wake, forget).
- the READER thread (main.py) calls `submit`, `submit_embed`, `cancel` and `stats` here.
Per-request state is split by the thread that writes it (sequence.py).
Covered by tests/integration/engine/test_runner.py (a real runner process).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time

from llama_cpp import llama_cpp as L

from app.discovery.host import cpu_cores
from app.engine import protocol as P
from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.decode_abort import DecodeAbort
from app.engine.runner.embedding.embed_job import run_embed_job
from app.engine.runner.heartbeat import StepState
from app.engine.runner.output.output_port import Admit, EmbedInputs, LoopInbox, Quit
from app.engine.runner.output.output_thread import OutputThread
from app.engine.runner.sequence import Seq
from app.engine.runner.speculation.drafting import Drafting
from app.engine.runner.step.slots import Slots
from app.engine.runner.step.step_budget import DEFAULT_FACTOR
from app.engine.runner.step.step_clock import StepClock
from app.engine.runner.step.step_executor import StepExecutor
from app.engine.runner.step.step_prepare import StepPrepare, prepare_mode
from app.engine.runner.step.step_scheduler import StepScheduler
from app.engine.runner.step.step_update import StepUpdate
from app.engine.runner.testhooks import Hooks

log = logging.getLogger("strata.engine")


class StepLoop:
    def __init__(self, model, ctx, send, *, vocab_out, embedder=None, admit=None, hooks: Hooks | None = None,
                 prompt_cache_bytes: int = 0, disk_cache=None, stream_interval: float = 0.0, checkpoints: int = 0,
                 checkpoint_bytes: int = 0, cache_reuse: int = 0, warmup_s: float = 0.0,
                 speculative: str | None = None, media=None, draft=None, async_prep: str = "auto",
                 gpu: bool = False, latency_factor: float = DEFAULT_FACTOR):
        self.send = send
        self.embedder = embedder
        self.hooks = hooks or Hooks()
        n_slots, n_ctx_seq = L.llama_n_seq_max(ctx), L.llama_n_ctx_seq(ctx)
        mem = L.llama_get_memory(ctx)
        can_shift = bool(mem) and bool(L.llama_memory_can_shift(mem)) and not self.hooks.no_shift
        self.inbox = LoopInbox()
        self.out_q: queue.SimpleQueue = queue.SimpleQueue()     # output_port.OutputItem
        self.stopping = False
        self.clock = StepClock(warmup_s)
        self.prompt_cache = PromptCache(ctx, model, n_slots, prompt_cache_bytes, checkpoints, checkpoint_bytes,
                                        disk_cache, cache_reuse=cache_reuse, can_shift=can_shift)
        self.abort = DecodeAbort(model)
        self.drafting = Drafting(model, n_ctx_seq, self.abort, speculative, draft)   # draft: draft_model.DraftModel
        self.slots = Slots(n_slots, self.prompt_cache, self.inbox, self.out_q, send, self.hooks, mem=mem,
                           n_ctx_seq=n_ctx_seq, can_shift=can_shift)
        self.scheduler = StepScheduler(slots=self.slots.seqs, n_batch=L.llama_n_batch(ctx), n_ctx_seq=n_ctx_seq,
                                       prompt_cache=self.prompt_cache, latency_factor=latency_factor)
        self.executor = StepExecutor(model, ctx, vocab_out=vocab_out, clock=self.clock, abort=self.abort,
                                     drafting=self.drafting, hooks=self.hooks, media=media)
        self.update = StepUpdate(self.slots.release, self.prompt_cache, self.clock, self.out_q)
        # async batch preparation (step_prepare.py): where the next step's token-free host work runs
        self.prepare = StepPrepare(prepare_mode(async_prep, gpu, L.llama_n_threads(ctx), cpu_cores()),
                                   self.update, self.scheduler, self.clock.phases)
        self.output = OutputThread(self.inbox, send=send, out_q=self.out_q, interval=stream_interval, admit=admit,
                                   hooks=self.hooks, n_ctx_seq=n_ctx_seq, vocab_out=vocab_out, embedder=embedder)
        self.threads = [threading.Thread(target=self._context_loop, name="strata-context", daemon=True),
                        threading.Thread(target=self.output.run, name="strata-output", daemon=True)]

    # ---- called from the reader thread -------------------------------------------------------------------
    def start(self):
        for t in self.threads:
            t.start()

    def submit(self, req: P.GenerateRequest) -> None:
        seq = Seq(req)
        if req.id in self.inbox.seqs:
            self.send(P.ErrorEvent(req.id, f"duplicate request id {req.id!r}", kind="invalid"))
            return
        self.inbox.seqs[req.id] = seq
        self.out_q.put(Admit(seq))

    def submit_embed(self, req: P.EmbedRequest) -> None:
        self.out_q.put(EmbedInputs(req))

    def cancel(self, req_id: str) -> None:
        seq = self.inbox.seqs.get(req_id)
        if seq is None:
            return
        seq.cancelled = True
        self.abort.cancel(req_id)
        self.inbox.wake()

    def stats(self, req_id: str = "") -> P.Stats:
        d = self.drafting
        return P.Stats(slots_total=len(self.slots.seqs),
                       slots_busy=sum(s is not None for s in self.slots.seqs),
                       queued=len(self.inbox.ready_q), decode_fraction=self.clock.decode_fraction(),
                       id=req_id, steps=self.clock.steps, draft_tokens=d.drafted_total,
                       draft_accepted=d.accepted_total, host_phases=self.clock.phases.snapshot(),
                       **self.prompt_cache.stats())

    def step_state(self) -> StepState:
        """For the heartbeat thread (heartbeat.py)."""
        return self.clock.state()

    def stop(self, timeout: float = 10.0) -> None:
        self.abort.close()
        self.prepare.close()
        self.stopping = True
        self.inbox.wake()
        self.out_q.put(Quit())
        for t in self.threads:
            if t.is_alive():
                t.join(timeout)

    # ---- context thread -----------------------------------------------------------------------------------
    def _context_loop(self):
        t_busy = 0.0                        # when the last step ran
        try:
            while not self.stopping:
                t_loop, c_loop = time.perf_counter(), time.thread_time()
                self.inbox.event.clear()
                self.slots.reap()
                self.slots.admit_ready()
                self.prompt_cache.serve_waiting(self.slots.seqs)
                self.slots.shift_full()
                jobs = self.inbox.embed_jobs
                if jobs and run_embed_job(jobs[0], self.embedder, self.prompt_cache, self.slots.free(),
                                          self.clock, self.send):
                    jobs.popleft()
                    continue
                if self._step(t_loop, c_loop):
                    t_busy = time.perf_counter()
                    continue
                wait = self.prompt_cache.idle(time.perf_counter() - t_busy)    # idle: a prefix due on disk may go
                if wait > 0:
                    self.inbox.event.wait(wait)
        except BaseException:  # an engine bug: end the process so the parent fails requests instead of hanging
            log.exception("context thread crashed")
            os._exit(70)

    def _step(self, t_loop: float, c_loop: float) -> bool:
        """One step; False when there was nothing to run. `t_loop`, `c_loop`: when this loop iteration began, by
        the clock and by this thread's CPU time."""
        plan = self.scheduler.schedule()
        if plan.empty:
            return False
        t_planned = time.perf_counter()
        prepare = self.prepare if self.prepare.mode != "off" else None
        try:
            result = self.executor.execute(plan, prepare)
            t_executed = time.perf_counter()
            self.update(plan, result)
        finally:
            self.clock.end()
        if plan.batch.n and result.rc == 0:
            t_end = time.perf_counter()
            self.clock.record(result.t_decode, t_end - plan.t_start, plan.batch.n)
            if plan.image is None:          # what steps cost, for the next steps' prompt budgets (step_budget.py)
                n_prompt = sum(s.n for s in plan.spans if s.prefill)
                writers = len(plan.spans) - sum(s.prefill for s in plan.spans)
                self.scheduler.costs.observe(n_prompt, writers, t_end - plan.t_start, plan.allowance)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("step prompt=%d writers=%d s=%.3f", n_prompt, writers, t_end - plan.t_start)
            ph = self.clock.phases
            ph.steps += 1
            ph.rows += plan.batch.n
            ph.add("loop", plan.t_start - t_loop)
            ph.add("schedule", t_planned - plan.t_start)
            ph.add("draft", result.t_draft)
            ph.add("update", t_end - t_executed - result.t_handoff)
            ph.add("host_cpu", time.thread_time() - c_loop - result.c_decode)
        return True
