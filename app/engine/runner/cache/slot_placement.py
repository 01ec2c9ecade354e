"""Where a new sequence starts: which slot it gets and how much of its prompt is already in KV cells.

Context thread only. Three sources of a cached prefix, best first (docs/prompt-cache.md):
1. the free slot whose kept cells share the longest prefix with the prompt (a conversation's next turn);
2. the host-RAM prompt cache (a conversation that had lost its slot to another);
3. another running sequence (the same long system prompt, sent by several clients at once): its cells are copied
   with `llama_memory_seq_cp`; a sequence whose source is still prefilling that prefix waits for it (state WAIT)
   instead of computing the same tokens in parallel.
4. the prompt cache on disk (disk_cache.py): states written by this runner or an earlier one of the same model,
   build and context settings (before a reload or a restart), restored when they share the most.
Whatever is reused, at least the last prompt token is decoded again: its logits start the reply.

Sliding-window and recurrent memories cannot keep every cell: `llama_memory_seq_pos_min` says what is still
held, and a prefix whose needed cells are gone is continued from the latest context checkpoint at or before it
(prompt_cache.Checkpoints), or processed again from the start when there is none (llama-server's rule): a
recurrent state is never continued from a position it does not describe.
"""
from __future__ import annotations

import logging
import time

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch
from app.engine.runner.cache.chunk_reuse import gap_spans, reuse_chunks
from app.engine.runner.cache.disk_cache import MIN_DISK_TOKENS, DiskPromptCache
from app.engine.runner.cache.stores import (CHECKPOINT_SPACING, MIN_RESTORE_GAIN, MIN_SAVE_TOKENS, Checkpoints,
                                            HostPromptCache, SlotCache, common_prefix, state_buffer)
from app.engine.runner.sequence import PREFILL, WAIT, Seq

log = logging.getLogger("strata.engine")

MIN_SHARE_TOKENS = 64       # copying another sequence's cells (a whole KV stream when not unified) must save this
# A checkpoint also goes this many tokens before the end of a prompt (llama-server's offset): the next turn's
# history often differs from the prompt in its last tokens (a generation prompt the template renders otherwise in
# the history, such as Qwen3's empty think block, or a newline that merges with the reply's first token).
END_BACKOFF = 4


class Placement:
    def __init__(self, ctx, model, n_slots: int, host_cache_bytes: int = 0, checkpoints: int = 0,
                 checkpoint_bytes: int = 0, disk: DiskPromptCache | None = None, cache_reuse: int = 0,
                 can_shift: bool = True):
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
        # memories that cannot be cut back to any prefix (recurrent state, a window-sized SWA cache) get context
        # checkpoints; a plain KV cache keeps every cell and needs none
        self.partial_memory = bool(L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model) or
                                   L.llama_model_n_swa(model) > 0)
        self.checkpoints = Checkpoints(ctx, n_slots, checkpoints if self.partial_memory else 0, checkpoint_bytes)
        self.hit_tokens = 0             # prompt tokens not decoded thanks to the cache, since load
        # states on disk, for a plain KV cache only: a window-sized SWA cache or a recurrent state would need its
        # checkpoints saved along, which the disk format does not carry yet
        self.disk = disk if disk is not None and disk.enabled and not self.partial_memory else None
        # cache reuse after a change (chunk_reuse.py): chunks of at least this many cached tokens are moved to where
        # they reappear in a new prompt (0 = off, llama-server's default). Only where cells can be moved by
        # position: not a window-sized SWA cache or a recurrent state (partial memories), not M-RoPE (no shift)
        self.cache_reuse = max(0, int(cache_reuse)) if can_shift and not self.partial_memory else 0
        self.reused_tokens = 0          # of hit_tokens, those moved from other positions, since load
        self._gap_batch: NpBatch | None = None
        # slots of a cross-stream copy that llama.cpp has queued but not done yet (it copies at the next decode)
        self.pending_copy: set[int] = set()
        # free slots whose kept prefix is due on disk: copied when the runner is idle or before the slot is reused,
        # not when the sequence ends (a 30k-token state is ~0.3 s to copy, which would hold back the reply's end and
        # every other sequence's next step)
        self.disk_due: set[int] = set()
        self._flush_batch = NpBatch(1)

    # ---- a new sequence ---------------------------------------------------------------------------------------
    def place(self, seq: Seq, slot_seqs: list[Seq | None]) -> int:
        """Pick a free slot for `seq` (there must be one), prepare its cells, set seq.todo/n_past/history."""
        self.flush_copies()
        free = [i for i, s in enumerate(slot_seqs) if s is None]
        if not seq.req.cache_prompt:
            slot = self._take(self.slots.victim(free), 0)
            self._start(seq, slot, 0)
            return slot
        prompt = seq.prompt
        limit = max(0, len(prompt) - 1)
        slot, n_slot = self.slots.choose(prompt, free, self._slot_usable, limit)
        entry, n_host = self.host.best(prompt, self._entry_usable, limit) if self.host.entries else (None, 0)
        src, n_src = self._best_running(prompt, slot_seqs) if self.can_share else (None, 0)
        n_src = min(n_src, limit)
        self._count_checkpoint_miss(prompt, free, limit, max(n_slot, n_host))
        disk, n_disk = self._best_on_disk(prompt, limit)
        # with cache reuse, a source is worth its prefix plus the chunks it can move after it
        v_slot, v_host, v_disk = n_slot, n_host, n_disk
        if self._reuse_prompt(seq):
            slot, n_slot, v_slot = self._best_slot_with_reuse(prompt, free, limit)
            entry, n_host, v_host = self._best_entry_with_reuse(prompt, limit)
            if disk is not None:
                v_disk = n_disk + self._reuse_gain(disk.tokens, prompt, n_disk, limit)
        # what each source offered (the cache report: cache/explain.py)
        seq.cache_candidates = {"slot": v_slot, "host": v_host, "sequence": n_src, "disk": v_disk}
        if disk is not None and v_disk >= max(v_slot, v_host, n_src) + MIN_RESTORE_GAIN:
            slot = self._take(self.slots.victim(free), 0)
            seq.cache_source = "disk"
            self._start(seq, slot, *self._restore_disk(disk, slot, n_disk, seq))
            return slot
        if src is not None and n_src >= max(v_slot, v_host) + MIN_SHARE_TOKENS:
            slot = self._take(self.slots.victim(free), 0)
            seq.cache_source = "sequence"
            self._share(seq, slot, src, n_src)
            return slot
        if entry is not None and v_host >= v_slot + MIN_RESTORE_GAIN:
            slot = self._take(self.slots.victim(free), 0)
            seq.cache_source = "host"
            self._start(seq, slot, *self._restore_entry(entry, slot, n_host, seq))
            return slot
        seq.cache_source = "slot"
        cached = self.slots.tokens[slot]
        self._take(slot, n_slot)
        if v_slot > n_slot and self._reusable(seq, slot):
            self._start(seq, slot, *self._reuse(slot, cached, prompt, n_slot))
        else:
            self._start(seq, slot, self._resume(slot, n_slot))
        return slot

    # ---- how much of a common prefix a memory can continue from ----------------------------------------------
    def _direct(self, pos_min: int, n: int) -> bool:
        """The memory (whose oldest held position is pos_min) can continue at position n after cutting the rest:
        the cells position n attends to are all there (a recurrent state: only when n is its end)."""
        return 0 <= pos_min <= max(0, n - self.n_swa)

    def _slot_usable(self, slot: int, n: int) -> int:
        if self._direct(L.llama_memory_seq_pos_min(self.mem, slot), n):
            return n
        cp = self.checkpoints.best(slot, n)
        return cp.n if cp else 0

    def _entry_usable(self, entry, n: int) -> int:
        if n >= len(entry.tokens) or self._direct(entry.pos_min, n):
            return n
        cp = self.checkpoints.best(entry.checkpoints, n)
        return cp.n if cp else 0

    def _count_checkpoint_miss(self, prompt, free, limit, n_found) -> None:
        """A checkpoint miss: a free slot's tokens share at least MIN_SAVE_TOKENS with the prompt, but no memory
        (slot or host entry) can continue any of it: the prompt is processed from the start. Counted whether
        checkpoints are on or not (with them off, the count says what they would save)."""
        if not self.partial_memory or n_found > 0:
            return
        if any(self.slots.tokens[i] and min(common_prefix(self.slots.tokens[i], prompt), limit) >= MIN_SAVE_TOKENS
               for i in free):
            self.checkpoints.misses += 1

    def _resume(self, slot: int, n: int) -> int:
        """Make `slot`'s memory hold exactly the first n tokens of its kept ones (n from _slot_usable): cut the
        cells after n, or restore the checkpoint at n first. Returns the tokens kept (0: the slot is empty)."""
        if n > 0 and not self._direct(L.llama_memory_seq_pos_min(self.mem, slot), n):
            cp = self.checkpoints.best(slot, n)
            if cp is None or cp.n != n or not self.checkpoints.restore(slot, cp):
                n = 0
            else:
                self.checkpoints.hits += 1
        n = self._trim(slot, n)
        self.checkpoints.cut(slot, n)
        return n

    def _restore_entry(self, entry, slot: int, n: int, seq: Seq) -> tuple[int, int, int]:
        """Load a host-cache entry into the empty `slot` and resume it at n (from _entry_usable), its
        checkpoints coming along. Returns what _reuse returns."""
        tokens = entry.tokens
        if not self.host.restore(entry, slot):
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            return 0, 0, 0
        self.checkpoints.give(slot, entry.checkpoints)
        if self._reusable(seq, slot):
            return self._reuse(slot, tokens, seq.prompt, n)
        n = self._resume(slot, n)
        return n, n, 0

    def _best_on_disk(self, prompt, limit: int):
        if self.disk is None or limit < MIN_DISK_TOKENS:
            return None, 0
        self.disk.rescan_if_changed()       # an earlier runner of this model may have written since (a reload)
        return self.disk.best(prompt, limit, max_len=L.llama_n_ctx_seq(self.ctx))

    def _restore_disk(self, entry, slot: int, n: int, seq: Seq) -> tuple[int, int, int]:
        """Load a state from disk into the empty `slot` and keep its first n tokens (and, with cache reuse, the
        chunks of the rest that the prompt repeats further on). Returns what _reuse returns."""
        disk = self.disk
        assert disk is not None                 # _best_on_disk found the entry there
        t0 = time.perf_counter()
        state = disk.load(entry)
        try:
            ok = state is not None and L.llama_state_seq_set_data(self.ctx, state.pointer, len(state), slot) > 0
        finally:
            if state is not None:
                state.close()
        if state is not None and not ok:
            disk.refuse(entry, "llama.cpp did not accept the state")
        if not ok:
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            return 0, 0, 0
        if self._reusable(seq, slot):
            n_past, n_cached, n_reused = self._reuse(slot, entry.tokens, seq.prompt, n)
        else:
            n_past = n_cached = self._trim(slot, n)
            n_reused = 0
        disk.record_hit(n_cached, time.perf_counter() - t0)
        log.info("prompt cache: %d tokens restored from disk in %.2f s", n_cached, disk.restore_s)
        return n_past, n_cached, n_reused

    def save_to_disk(self, slot: int, tokens) -> bool:
        """Copy `slot`'s state (holding exactly `tokens`) to the disk cache when it holds at least MIN_DISK_TOKENS
        more than any file there. The copy is made here; a writer thread writes it."""
        if self.disk is None or len(tokens) < MIN_DISK_TOKENS or min(tokens) < 0:
            return False                    # (negative pseudo-tokens: image positions, not named by tokens)
        if len(tokens) - self.disk.covered(tokens) < MIN_DISK_TOKENS:
            return False
        self.flush_copies()
        size = L.llama_state_seq_get_size(self.ctx, slot)
        if size <= 0 or size > self.disk.limit:
            return False
        buf = state_buffer(size)
        n = L.llama_state_seq_get_data(self.ctx, buf, size, slot)
        return n > 0 and self.disk.save(tokens, buf, int(n))

    def save_due(self, limit: int = 1 << 30) -> int:
        """Copy up to `limit` kept prefixes that are due on disk (`release`) now; returns how many were copied. The
        idle loop copies one at a time, so a request that arrives meanwhile waits for one copy at most."""
        saved = 0
        while self.disk_due and saved < limit:
            slot = min(self.disk_due)
            self.disk_due.discard(slot)
            tokens = self.slots.tokens[slot]
            if tokens and self.save_to_disk(slot, tokens):
                saved += 1
        return saved

    def save_all_to_disk(self, slot_seqs, deadline: float) -> int:
        """At shutdown (a reload, an unload, the app quitting): every slot's prefix that the disk does not hold
        yet, running sequences' included, then the host-RAM cache's entries (most recent first), until `deadline`
        (time.monotonic). Returns how many were queued."""
        if self.disk is None:
            return 0
        saved = 0
        for slot in range(len(self.slots.tokens)):
            seq = slot_seqs[slot] if slot < len(slot_seqs) else None
            if seq is not None:
                n = seq.n_past if seq.n_exact is None else min(seq.n_exact, seq.n_past)
                tokens = seq.history[:n] if seq.state != WAIT else []
            else:
                tokens = self.slots.tokens[slot]
            if time.monotonic() > deadline:
                break
            if tokens and self.save_to_disk(slot, tokens):
                saved += 1
                self.disk.flush(max(0.0, deadline - time.monotonic()))
        for e in sorted(self.host.entries, key=lambda e: -e.last_used):    # conversations that lost their slot
            if time.monotonic() > deadline:
                break
            if len(e.tokens) < MIN_DISK_TOKENS or min(e.tokens) < 0 or \
                    len(e.tokens) - self.disk.covered(e.tokens) < MIN_DISK_TOKENS:
                continue
            if self.disk.save(e.tokens, e.buf, e.size - sum(c.size for c in e.checkpoints)):
                saved += 1
                self.disk.flush(max(0.0, deadline - time.monotonic()))
        return saved

    def borrow(self, free: list[int]) -> int:
        """A free slot emptied for work that is not a sequence (a generative model's embedding, which clears its
        cells when done): the one whose cached prefix is worth least, saved to the host cache when worth it."""
        return self._take(self.slots.victim(free), 0)

    def _take(self, slot: int, keep: int) -> int:
        """Make `slot` ready for a new sequence keeping its first `keep` cached tokens; what it held beyond
        that goes to the host cache first when it is worth keeping; a prefix due on disk is copied there first (the
        one path by which a free slot's cells are reused) unless the new sequence keeps all but fewer than
        MIN_DISK_TOKENS of it. Returns the slot."""
        if slot in self.disk_due:
            self.disk_due.discard(slot)
            # a sequence that keeps all but a few of its tokens (the next turn of its conversation) is saved when it
            # is done, holding them: copying them now would only make the new request wait for the copy
            if len(self.slots.tokens[slot]) - keep >= MIN_DISK_TOKENS:
                self.save_to_disk(slot, self.slots.tokens[slot])
        tokens = self.slots.tokens[slot]
        if len(tokens) - keep >= MIN_SAVE_TOKENS:
            self.host.save(slot, tokens, self.checkpoints.of(slot), L.llama_memory_seq_pos_min(self.mem, slot))
        self.slots.tokens[slot] = []
        if keep == 0:
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self.slots.shared.discard(slot)
            self.checkpoints.clear(slot)
        return slot

    def _trim(self, slot: int, n: int) -> int:
        """Keep cells [0, n) of `slot` if they can continue a sequence; returns how many were kept (0 = none)."""
        if n > 0 and not self._direct(L.llama_memory_seq_pos_min(self.mem, slot), n):
            n = 0                       # the window (or recurrent state) no longer holds what position n needs
        if n == 0 or not L.llama_memory_seq_rm(self.mem, slot, n, -1):
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self.slots.shared.discard(slot)
            self.checkpoints.clear(slot)
            return 0
        return n

    # ---- cache reuse after a change (chunk_reuse.py) ----------------------------------------------------------
    def _reuse_prompt(self, seq: Seq) -> bool:
        """Cache reuse is on and `seq`'s prompt may use it: no images (their positions are not tokens)."""
        return self.cache_reuse > 0 and seq.media is None and len(seq.prompt) > 0 and int(seq.prompt.min()) >= 0

    def _reusable(self, seq: Seq, slot: int) -> bool:
        """Cache reuse may move `slot`'s cells for `seq`: the slot shares no cells with another (moving a shared
        cell moves it for both)."""
        return self._reuse_prompt(seq) and slot not in self.slots.shared

    def _reuse_gain(self, cached, prompt, n: int, limit: int) -> int:
        """Tokens cache reuse would move from `cached` into `prompt` after their common prefix of n."""
        if n <= 0:
            return 0
        return sum(ch.n for ch in reuse_chunks(cached, prompt, n, self.cache_reuse,
                                               min(limit, L.llama_n_ctx_seq(self.ctx)), L.llama_n_batch(self.ctx)))

    def _best_slot_with_reuse(self, prompt, free: list[int], limit: int) -> tuple[int, int, int]:
        """The free slot whose cells give `prompt` the most with cache reuse: (slot, common prefix, prefix + moved
        tokens); among equals the least recently used, an empty slot first (as SlotCache.choose)."""
        best, best_key = (free[0], 0, 0), (0, float("-inf"))
        for i in free:
            tokens = self.slots.tokens[i]
            n = min(common_prefix(tokens, prompt), limit) if tokens else 0
            v = n + (self._reuse_gain(tokens, prompt, n, limit) if i not in self.slots.shared else 0)
            key = (v, -self.slots.last_used[i] if tokens else float("inf"))
            if key > best_key:
                best, best_key = (i, n, v), key
        return best

    def _best_entry_with_reuse(self, prompt, limit: int):
        """The host-RAM entry that gives `prompt` the most with cache reuse: (entry, common prefix, prefix + moved)."""
        best, n_best, v_best = None, 0, 0
        for e in self.host.entries:
            n = min(common_prefix(e.tokens, prompt), limit)
            v = n + self._reuse_gain(e.tokens, prompt, n, limit)
            if v > v_best:
                best, n_best, v_best = e, n, v
        return best, n_best, v_best

    def _reuse(self, slot: int, cached, prompt, n: int) -> tuple[int, int, int]:
        """`slot`'s cells hold `cached` at positions 0.. and the prompt shares their first n tokens. Keep those, move
        the chunks of the rest that the prompt repeats further on to their new positions, compute the new tokens
        between them, and drop every other cell. Returns (the prompt tokens now in the cells, how many of them came
        from the cache, how many of those were moved). Without a chunk worth moving: the plain prefix, (n, n, 0)."""
        limit = len(prompt) - 1                 # the last prompt token is decoded in the step: its logits
        chunks = reuse_chunks(cached, prompt, n, self.cache_reuse, min(limit, L.llama_n_ctx_seq(self.ctx)),
                              L.llama_n_batch(self.ctx)) if n > 0 else []
        if not chunks:
            n = self._trim(slot, n)
            return n, n, 0
        mem = self.mem
        # drop every cell that is neither in the prefix nor in a chunk
        end = n
        for ch in chunks:
            L.llama_memory_seq_rm(mem, slot, end, ch.src)
            end = ch.src + ch.n
        L.llama_memory_seq_rm(mem, slot, end, -1)
        # move each chunk to its place: first all of them beyond every position in use (from the last, so none
        # lands on one not moved yet), then each to its place (all below that). llama.cpp adds the shifts up per
        # cell and rotates the keys once, at the next decode.
        park = max(len(cached), len(prompt)) + 1
        moving = [ch for ch in chunks if ch.dst != ch.src]
        for ch in reversed(moving):
            L.llama_memory_seq_add(mem, slot, ch.src, ch.src + ch.n, park)
        for ch in moving:
            L.llama_memory_seq_add(mem, slot, park + ch.src, park + ch.src + ch.n, ch.dst - ch.src - park)
        filled = chunks[-1].dst + chunks[-1].n
        gaps = gap_spans(chunks, n)
        if gaps and not self._decode_gaps(slot, prompt, gaps, filled):
            L.llama_memory_seq_rm(mem, slot, n, -1)           # the gaps could not be computed: the prefix alone
            return n, n, 0
        reused = sum(ch.n for ch in chunks)
        log.info("cache reuse: %d of %d cached tokens kept (%d moved in %d chunks), %d new tokens between them",
                 n + reused, len(cached), reused, len(chunks), sum(b - a for a, b in gaps))
        return filled, n + reused, reused

    def _decode_gaps(self, slot: int, prompt, gaps: list[tuple[int, int]], filled: int) -> bool:
        """Compute the prompt's new tokens between the moved chunks. llama.cpp decodes a sequence only after its
        last cell, so they go in one batch at positions `filled`.. (after the chunks) and are then moved back to
        their places. One decode of at most n_batch tokens, between steps (as a prompt chunk would take)."""
        total = sum(b - a for a, b in gaps)
        if self._gap_batch is None or self._gap_batch.capacity < total:
            self._gap_batch = NpBatch(max(total, L.llama_n_batch(self.ctx)))
        b = self._gap_batch
        b.clear()
        pos = filled
        for a, e in gaps:
            b.add_span(prompt[a:e], pos, slot, False)
            pos += e - a
        rc = L.llama_decode(self.ctx, b.struct)
        if rc != 0:
            log.warning("cache reuse: computing %d new tokens between the moved chunks failed (llama_decode %d)",
                        total, rc)
            return False
        pos = filled
        for a, e in gaps:
            L.llama_memory_seq_add(self.mem, slot, pos, pos + (e - a), a - pos)
            pos += e - a
        return True

    def _start(self, seq: Seq, slot: int, n: int, n_cached: int | None = None, n_reused: int = 0) -> None:
        """`seq` starts in `slot`, whose cells hold the first n tokens of its prompt, `n_cached` of them (default
        all) from the cache, `n_reused` of those moved there by cache reuse (the rest of n: gaps it computed). A
        prefix must not end inside an image (its embeddings come whole): then the cells go back to the image's
        start (never with cache reuse, which prompts with images do not use)."""
        if n_cached is None:
            n_cached = n
        if n > 0 and seq.media is not None:
            start = seq.media.inside(n)
            if start is not None:
                if not L.llama_memory_seq_rm(self.mem, slot, start, -1):
                    L.llama_memory_seq_rm(self.mem, slot, -1, -1)
                    start = 0
                n = n_cached = start
        seq.todo = seq.n_past = n
        seq.n_cached, seq.n_reused = n_cached, n_reused
        seq.history = seq.prompt[:n].tolist()
        seq.state = PREFILL
        self.hit_tokens += n_cached
        self.reused_tokens += n_reused

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
                self._start(seq, seq.kv_slot, 0)    # the source went away before reaching the prefix: compute it here

    def _copy(self, seq: Seq, src: Seq, n: int) -> None:
        dst, src_slot = seq.slot, src.slot
        assert dst is not None and src_slot is not None      # both placed (serve_waiting checked the source)
        L.llama_memory_seq_rm(self.mem, dst, -1, -1)
        if self.unified:
            L.llama_memory_seq_cp(self.mem, src_slot, dst, 0, n)
            self.slots.shared.update((src_slot, dst))
        else:
            L.llama_memory_seq_cp(self.mem, src_slot, dst, -1, -1)
            self.pending_copy.update((src_slot, dst))
        seq.wait_src = None
        self._start(seq, dst, self._trim(dst, n))

    # ---- a sequence leaves its slot ---------------------------------------------------------------------------
    def release(self, seq: Seq, keep: bool, slot_seqs) -> None:
        """The slot keeps the cells of `seq`'s exact prefix for the next request (keep=False: drop them).
        Sequences waiting for `seq`'s prefix copy it first, while its cells are certainly still there."""
        self.serve_waiting(slot_seqs)
        slot = seq.slot
        assert slot is not None                 # only a placed sequence leaves a slot
        n = 0
        if keep and seq.state != WAIT:
            n = seq.n_past if seq.n_exact is None else min(seq.n_exact, seq.n_past)
        if n > 0 and n < seq.n_past and not L.llama_memory_seq_rm(self.mem, slot, n, -1):
            n = 0
        if n == 0:
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            self.slots.forget(slot)
            self.checkpoints.clear(slot)
            return
        self.slots.keep(slot, seq.history[:n])
        self.checkpoints.cut(slot, n)
        if n - seq.n_cached >= MIN_DISK_TOKENS and self.disk is not None:   # a long prefix computed: worth
            self.disk_due.add(slot)                                           # keeping past this runner

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
        self.disk_due.clear()
        self.slots.forget_all()
        self.checkpoints.clear_all()

    # ---- context checkpoints while a prompt is processed ------------------------------------------------------
    def checkpoint_stops(self, seq: Seq) -> list[int]:
        """Prompt positions a prefill chunk must end at so a checkpoint can be taken there, in order."""
        if not self.checkpoints.enabled or seq.n_exact is not None:
            return []
        n = len(seq.prompt)
        return sorted(p for p in {*seq.checkpoint_at, n - END_BACKOFF} if seq.todo < p < n)

    def after_prefill(self, seq: Seq) -> None:
        """A prefill chunk of `seq` was decoded (its memory holds seq.n_past tokens): take a checkpoint at the end
        of the prompt (the start of the reply) and END_BACKOFF tokens before it, before the last user message,
        and every CHECKPOINT_SPACING tokens of a long prompt. Not after a context shift (positions moved) nor
        while cells are shared."""
        cps = self.checkpoints
        if not cps.enabled or seq.n_exact is not None or seq.slot is None or seq.slot in self.slots.shared:
            return
        if seq.n_past != seq.todo:      # positions no longer equal token indices (an image chunk's positions):
            return                      # a checkpoint's n would not say which tokens it holds
        n = seq.n_past
        if n <= 0 or cps.has(seq.slot, n):
            return
        if seq.todo == len(seq.prompt) or seq.todo == len(seq.prompt) - END_BACKOFF or n in seq.checkpoint_at \
                or n - cps.last_n(seq.slot) >= CHECKPOINT_SPACING:
            cps.take(seq.slot, n)

    def shifted(self, seq: Seq) -> None:
        """`seq` had a context shift: its slot's checkpoints describe positions that no longer exist."""
        assert seq.slot is not None             # a shifted sequence is decoding in its slot
        self.checkpoints.clear(seq.slot)
        seq.checkpoint_at = []

    def stats(self) -> dict:
        cps = self.checkpoints
        d = self.disk
        return {"prompt_cache_bytes": self.host.bytes, "prompt_cache_limit": self.host.limit,
                "prompt_cache_entries": len(self.host.entries), "cache_hit_tokens": self.hit_tokens,
                "disk_cache_bytes": d.bytes if d else 0, "disk_cache_limit": d.limit if d else 0,
                "disk_cache_entries": len(d.entries) if d else 0, "disk_cache_hits": d.hits if d else 0,
                "disk_cache_hit_tokens": d.hit_tokens if d else 0, "cache_reused_tokens": self.reused_tokens,
                "checkpoint_bytes": cps.bytes, "checkpoints": cps.count, "checkpoint_hits": cps.hits,
                "checkpoint_misses": cps.misses}


def known_tokens(seq: Seq):
    """The tokens `seq` has in KV followed by the prompt tokens it has still to feed, in position order."""
    if seq.state == PREFILL and seq.todo < len(seq.prompt):
        return np.concatenate([np.asarray(seq.history, dtype=np.int32), seq.prompt[seq.todo:]])
    return seq.history
