"""Where a new sequence starts: which slot it gets and how much of its prompt is already in KV cells.

Context thread only. Three sources of a cached prefix, best first (docs/prompt-cache.md):
1. the free slot whose kept cells share the longest prefix with the prompt (a conversation's next turn);
2. the host-RAM prompt cache (a conversation that had lost its slot to another);
3. another running sequence (the same long system prompt, sent by several clients at once): its cells are copied
   with `llama_memory_seq_cp`; a sequence whose source is still prefilling that prefix waits for it (state WAIT)
   instead of computing the same tokens in parallel.
Whatever is reused, at least the last prompt token is decoded again: its logits start the reply.

Sliding-window and recurrent memories cannot keep every cell: `llama_memory_seq_pos_min` says what is still
held, and a prefix whose needed cells are gone is processed again from the start (llama-server's rule).
"""
from __future__ import annotations

import logging

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch
from app.engine.runner.prompt_cache import MIN_RESTORE_GAIN, MIN_SAVE_TOKENS, HostPromptCache, SlotCache, common_prefix
from app.engine.runner.sequence import PREFILL, WAIT, Seq

log = logging.getLogger("strata.engine")

MIN_SHARE_TOKENS = 64       # copying another sequence's cells (a whole KV stream when not unified) must save this


class Placement:
    def __init__(self, ctx, model, n_slots: int, host_cache_bytes: int = 0):
        self.ctx = ctx
        self.mem = L.llama_get_memory(ctx)
        # one KV stream for all sequences: copying a prefix only marks cells as shared. Otherwise every sequence
        # has its own stream and a copy must take the whole stream (llama.cpp asserts on a partial one).
        self.unified = n_slots > 1 and L.llama_n_ctx_seq(ctx) == L.llama_n_ctx(ctx)
        self.n_swa = max(1, L.llama_model_n_swa(model))
        # a recurrent state cannot be cut back to a shorter prefix: copying one only helps an exact continuation
        self.can_share = not (L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model))
        self.slots = SlotCache(n_slots)
        self.host = HostPromptCache(ctx, host_cache_bytes)
        self.hit_tokens = 0             # prompt tokens not decoded thanks to the cache, since load
        # slots of a cross-stream copy that llama.cpp has queued but not done yet (it copies at the next decode)
        self.pending_copy: set[int] = set()
        self._flush_batch = NpBatch(1)

    # ---- a new sequence ---------------------------------------------------------------------------------------
    def place(self, seq: Seq, slot_seqs: list[Seq | None]) -> int:
        """Pick a free slot for `seq` (there must be one), prepare its cells, set seq.todo/n_past/history."""
        self.flush_copies()
        free = [i for i, s in enumerate(slot_seqs) if s is None]
        if not seq.req.cache_prompt:
            slot = self._take(self.slots.victim(free), 0)
            self._start(seq, 0)
            return slot
        prompt = seq.prompt
        limit = max(0, len(prompt) - 1)
        slot, n_slot = self.slots.choose(prompt, free)
        n_slot = min(n_slot, limit)
        entry, n_host = self.host.best(prompt) if self.host.entries else (None, 0)
        n_host = min(n_host, limit)
        src, n_src = self._best_running(prompt, slot_seqs) if self.can_share else (None, 0)
        n_src = min(n_src, limit)
        if n_src >= max(n_slot, n_host) + MIN_SHARE_TOKENS:
            slot = self._take(self.slots.victim(free), 0)
            self._share(seq, slot, src, n_src)
            return slot
        if entry is not None and n_host >= n_slot + MIN_RESTORE_GAIN:
            slot = self._take(self.slots.victim(free), 0)
            n = self._trim(slot, n_host) if self.host.restore(entry, slot) else 0
            if n == 0:
                L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self._start(seq, n)
            return slot
        self._take(slot, n_slot)
        self._start(seq, self._trim(slot, n_slot))
        return slot

    def borrow(self, free: list[int]) -> int:
        """A free slot emptied for work that is not a sequence (a generative model's embedding, which clears its
        cells when done): the one whose cached prefix is worth least, saved to the host cache when worth it."""
        return self._take(self.slots.victim(free), 0)

    def _take(self, slot: int, keep: int) -> int:
        """Make `slot` ready for a new sequence keeping its first `keep` cached tokens; what it held beyond
        that goes to the host cache first when it is worth keeping. Returns the slot."""
        tokens = self.slots.tokens[slot]
        if len(tokens) - keep >= MIN_SAVE_TOKENS:
            self.host.save(slot, tokens)
        self.slots.tokens[slot] = []
        if keep == 0:
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self.slots.shared.discard(slot)
        return slot

    def _trim(self, slot: int, n: int) -> int:
        """Keep cells [0, n) of `slot` if they can continue a sequence; returns how many were kept (0 = none)."""
        if n > 0:
            pos_min = L.llama_memory_seq_pos_min(self.mem, slot)
            if pos_min < 0 or pos_min > max(0, n - self.n_swa):
                n = 0                   # the window (or recurrent state) no longer holds what position n needs
        if n == 0 or not L.llama_memory_seq_rm(self.mem, slot, n, -1):
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self.slots.shared.discard(slot)
            return 0
        return n

    def _start(self, seq: Seq, n: int) -> None:
        seq.todo = seq.n_past = seq.n_cached = n
        seq.history = seq.prompt[:n].tolist()
        seq.state = PREFILL
        self.hit_tokens += n

    # ---- sharing a running sequence's prefix ------------------------------------------------------------------
    def _best_running(self, prompt, slot_seqs) -> tuple[Seq | None, int]:
        best, n_best = None, 0
        for s in slot_seqs:
            if s is None or s.state == WAIT or s.cancelled:
                continue
            n = common_prefix(known_tokens(s), prompt)
            if s.n_exact is not None:     # after a context shift only the kept head matches a cold computation
                n = min(n, s.n_exact)
            if n > n_best:
                best, n_best = s, n
        return best, n_best

    def _share(self, seq: Seq, slot: int, src: Seq, n: int) -> None:
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
                self._start(seq, 0)     # the source went away before reaching the prefix: compute it here

    def _copy(self, seq: Seq, src: Seq, n: int) -> None:
        dst = seq.slot
        L.llama_memory_seq_rm(self.mem, dst, -1, -1)
        if self.unified:
            L.llama_memory_seq_cp(self.mem, src.slot, dst, 0, n)
            self.slots.shared.update((src.slot, dst))
        else:
            L.llama_memory_seq_cp(self.mem, src.slot, dst, -1, -1)
            self.pending_copy.update((src.slot, dst))
        seq.wait_src = None
        self._start(seq, self._trim(dst, n))

    # ---- a sequence leaves its slot ---------------------------------------------------------------------------
    def release(self, seq: Seq, keep: bool, slot_seqs) -> None:
        """The slot keeps the cells of `seq`'s exact prefix for the next request (keep=False: drop them).
        Sequences waiting for `seq`'s prefix copy it first, while its cells are certainly still there."""
        self.serve_waiting(slot_seqs)
        slot = seq.slot
        n = 0
        if keep and seq.state != WAIT:
            n = seq.n_past if seq.n_exact is None else min(seq.n_exact, seq.n_past)
        if n > 0 and n < seq.n_past and not L.llama_memory_seq_rm(self.mem, slot, n, -1):
            n = 0
        if n == 0:
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self.slots.forget(slot)
            return
        self.slots.keep(slot, seq.history[:n])

    def flush_copies(self) -> None:
        """Make llama.cpp do the queued cross-stream copies now. Until then the data is only promised: saving
        or restoring either slot's state, or giving it to another sequence, would see (or be overwritten by)
        the wrong bytes at the next decode. A one-token decode into the destination does it (the update runs
        first in llama_decode); the token's cell is removed again."""
        if not self.pending_copy:
            return
        dst = max(self.pending_copy)
        pos = L.llama_memory_seq_pos_max(self.mem, dst) + 1
        b = self._flush_batch
        b.clear()
        b.add(0, pos, dst, False)
        rc = L.llama_decode(self.ctx, b.struct)
        L.llama_memory_seq_rm(self.mem, dst, pos, -1)
        log.debug("flushed the KV copies into slots %s (rc %d)", sorted(self.pending_copy), rc)
        if rc == 0:
            self.pending_copy.clear()
        else:
            log.warning("flushing a KV copy: llama_decode returned %d", rc)

    def forget_all(self) -> None:
        """Every slot's cells were cleared behind our back (an embedding model decoding on the main context)."""
        self.slots.forget_all()

    def stats(self) -> dict:
        return {"prompt_cache_bytes": self.host.bytes, "prompt_cache_limit": self.host.limit,
                "prompt_cache_entries": len(self.host.entries), "cache_hit_tokens": self.hit_tokens}


def known_tokens(seq: Seq):
    """The tokens `seq` has in KV followed by the prompt tokens it has still to feed, in position order."""
    if seq.state == PREFILL and seq.todo < len(seq.prompt):
        return np.concatenate([np.asarray(seq.history, dtype=np.int32), seq.prompt[seq.todo:]])
    return seq.history
