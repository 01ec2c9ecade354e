"""Sharing a running sequence's prefix (context thread): the same long system prompt, sent by several clients at
once, is computed once. The source's cells are copied with `llama_memory_seq_cp`; a sequence whose source is still
prefilling that prefix waits for it (state WAIT) instead of computing the same tokens in parallel.

With one KV stream for all sequences (unified) a copy only marks cells as shared; otherwise every sequence has its
own stream and a copy must take the whole stream (llama.cpp asserts on a partial one), which llama.cpp queues and
carries out at the next decode (`flush`).
Covered by tests/integration/engine/test_prompt_cache.py (parallel requests sharing a long system prompt).
"""
from __future__ import annotations

import logging
from typing import Callable

from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch
from app.engine.runner.cache.continuation import Continuation
from app.engine.runner.cache.stores import SlotCache
from app.engine.runner.sequence import WAIT, Seq

log = logging.getLogger("strata.engine")


class Sharing:
    """`start(seq, slot, n)`: the sequence starts in `slot`, whose cells hold the first n tokens of its prompt
    (PromptCache._start)."""

    def __init__(self, ctx, mem, n_slots: int, slots: SlotCache, cells: Continuation,
                 start: Callable[[Seq, int, int], None]):
        self.ctx, self.mem, self.slots, self.cells, self.start = ctx, mem, slots, cells, start
        self.unified = n_slots > 1 and L.llama_n_ctx_seq(ctx) == L.llama_n_ctx(ctx)
        # slots of a cross-stream copy that llama.cpp has queued but not done yet (it copies at the next decode)
        self.pending: set[int] = set()
        self._flush_batch = NpBatch(1)

    def share(self, seq: Seq, slot: int, src: Seq, n: int) -> None:
        """`seq` (placed in the empty `slot`) starts from the first n tokens of the running `src`."""
        seq.slot = slot
        if src.n_past >= n:
            self._copy(seq, src, n)
        else:                           # src has not computed the prefix yet: wait for it, do not compute it twice
            seq.state, seq.wait_src, seq.wait_n = WAIT, src, n

    def serve_waiting(self, slot_seqs) -> None:
        """Start waiting sequences whose source has computed their prefix (or gave up on it)."""
        for seq in slot_seqs:
            if seq is None or seq.state != WAIT:
                continue
            src, n = seq.wait_src, seq.wait_n
            exact = src.n_exact is None or src.n_exact >= n
            if src.slot is not None and exact and src.n_past >= n:
                self._copy(seq, src, n)
            elif src.slot is None or src.cancelled or not exact:
                seq.wait_src = None
                self.start(seq, seq.kv_slot, 0)    # the source went away before reaching the prefix: compute it here

    def _copy(self, seq: Seq, src: Seq, n: int) -> None:
        dst, src_slot = seq.slot, src.slot
        assert dst is not None and src_slot is not None      # both placed (serve_waiting checked the source)
        L.llama_memory_seq_rm(self.mem, dst, -1, -1)
        if self.unified:
            L.llama_memory_seq_cp(self.mem, src_slot, dst, 0, n)
            self.slots.shared.update((src_slot, dst))
        else:
            L.llama_memory_seq_cp(self.mem, src_slot, dst, -1, -1)
            self.pending.update((src_slot, dst))
        seq.wait_src = None
        self.start(seq, dst, self.cells.trim(dst, n))

    def flush(self) -> None:
        """Make llama.cpp do the queued cross-stream copies now. Until then the data is only promised: saving
        or restoring either slot's state, or giving it to another sequence, would see (or be overwritten by)
        the wrong bytes at the next decode. A one-token decode into the destination does it (the update runs
        first in llama_decode); the token's cell is removed again."""
        if not self.pending:
            return
        dst = max(self.pending)
        pos = L.llama_memory_seq_pos_max(self.mem, dst) + 1
        b = self._flush_batch
        b.clear()
        b.add(0, pos, dst, False)
        rc = L.llama_decode(self.ctx, b.struct)
        L.llama_memory_seq_rm(self.mem, dst, pos, -1)
        log.debug("flushed the KV copies into slots %s (rc %d)", sorted(self.pending), rc)
        if rc == 0:
            self.pending.clear()
        else:
            log.warning("flushing a KV copy: llama_decode returned %d", rc)
