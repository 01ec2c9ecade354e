"""The slot table (context thread): which sequence holds each slot, and the slot lifecycle between steps.

Each loop iteration, before the step is scheduled, it releases the sequences that ended (`reap`), gives free
slots to admitted sequences in arrival order (`admit_ready`: the prompt cache finds their cached
prefix) and shifts the context of generating sequences that filled theirs (`shift_full`, context_shift.py: the
rows the scheduler gives them depend on it). A slot comes back on every path: every sequence that reaches a slot ends in `release` (the update calls
it too, for sequences a step finished), which hands a `Released` item to the output thread, the only place a
DoneEvent (or ErrorEvent) is sent, so a client sees "done" only after its slot is free again. Placing a sequence
and keeping a released one's cells may make llama.cpp carry out queued KV copies (a one-token decode:
sharing.Sharing.flush, behind the prompt cache's place and release); this KV work runs between steps, so
scheduling a step touches no cell.
Covered by tests/unit/engine/runner/step/test_step_cycle.py (in-process) and tests/integration/engine/test_runner.py.
"""
from __future__ import annotations

import time

from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.output.output_port import LoopInbox, Released
from app.engine.runner.sequence import GEN, Seq
from app.engine.runner.step.context_shift import context_shift
from app.engine.runner.testhooks import Hooks


class Slots:
    """`can_shift`: the memory can move cells (else a full context is processed again from its kept window)."""

    def __init__(self, n_slots: int, prompt_cache: PromptCache, inbox: LoopInbox, out_q, send, hooks: Hooks, *,
                 mem, n_ctx_seq: int, can_shift: bool):
        self.seqs: list[Seq | None] = [None] * n_slots
        self.prompt_cache, self.inbox, self.out_q, self.send, self.hooks = prompt_cache, inbox, out_q, send, hooks
        self.mem, self.n_ctx_seq, self.can_shift = mem, n_ctx_seq, can_shift
        self._cache_reported = (0, 0, 0, 0, 0, 0)

    def reap(self) -> None:
        """Release the sequences that ended between steps: cancelled, or ended by the output thread."""
        for seq in self.seqs:
            if seq is not None and (seq.finish or seq.cancelled or seq.out.reason):
                self.release(seq, seq.out.reason or seq.finish or "cancelled")

    def release(self, seq: Seq, reason: str) -> None:
        if seq.slot is not None:
            # the slot keeps the sequence's cells for the next request (prompt cache); not after a failure
            self.prompt_cache.release(seq, reason != "error", self.seqs)
            self.seqs[seq.slot] = None
            seq.slot = None
            self.report_cache()
        if seq.sampler is not None:
            seq.sampler.free()
            seq.sampler = None
        seq.free_media()
        if seq.finish is None:
            seq.finish = reason
        seq.t_done = time.perf_counter()
        self.out_q.put(Released(seq))

    def admit_ready(self) -> None:
        ready = self.inbox.ready_q
        while ready:
            if ready[0].cancelled:
                seq = ready.popleft()
                seq.take_admitted()                 # so release frees its sampler and media
                self.release(seq, "cancelled")
                continue
            if None not in self.seqs:
                return
            seq = ready.popleft()
            seq.take_admitted()
            if self.hooks.abort_marker and seq.req.prompt == self.hooks.abort_marker:
                self.hooks.abort()   # test hook: die like a GGML_ASSERT would, mid-request
            i = self.prompt_cache.place(seq, self.seqs)
            seq.slot, self.seqs[i] = i, seq
            seq.t_admit = time.perf_counter()
            self.report_cache()

    def shift_full(self) -> None:
        """A context shift for each generating sequence whose context is full (its draft, made for the positions
        before, is dropped)."""
        for seq in self.seqs:
            if seq is not None and seq.state == GEN and seq.n_past >= self.n_ctx_seq:
                seq.draft = []
                context_shift(seq, self.mem, self.can_shift, self.prompt_cache)

    def report_cache(self) -> None:
        s = self.prompt_cache.state()
        state = (s.bytes, s.entries, s.checkpoint_bytes, s.checkpoints, s.checkpoint_hits, s.checkpoint_misses)
        if state != self._cache_reported:
            self._cache_reported = state
            self.send(s)

    def free(self) -> list[int]:
        return [i for i, s in enumerate(self.seqs) if s is None]
