"""The prompt cache's one door (context thread), shaped like vLLM v1's KVCacheManager: the runner asks it where a new
sequence starts (`place`), gives a slot back (`release`), reports a decoded prefill chunk (`after_prefill`) and
asks where a chunk must end for a context checkpoint (`checkpoint_stops`); `stats` and `state` say what it holds.
Nothing outside runner/cache/ reads its parts (tests/unit/test_cache_facade.py checks it).

Its parts (docs/prompt-cache.md): what the free slots, the host RAM and the checkpoints hold (stores.py), the
search for a prompt's best cached prefix over slots, host RAM, running sequences and disk (prefix_search.py), what
a memory can continue from (continuation.py), copying a running sequence's cells (sharing.py), moving cached chunks
after a change (chunk_reuse.py), and what goes to disk and when (disk_saver.py).
Covered by tests/unit/engine/runner/cache/test_disk_cache.py and tests/integration/engine/test_prompt_cache.py.
"""
from __future__ import annotations

import logging
import time

from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.cache.chunk_reuse import ChunkMover
from app.engine.runner.cache.continuation import Continuation
from app.engine.runner.cache.disk_cache import DiskEntry, DiskPromptCache
from app.engine.runner.cache.disk_saver import DiskSaver
from app.engine.runner.cache.prefix_search import PrefixSearch
from app.engine.runner.cache.sharing import Sharing
from app.engine.runner.cache.stores import (CHECKPOINT_SPACING, MIN_SAVE_TOKENS, Checkpoints, HostEntry,
                                            HostPromptCache, SlotCache)
from app.engine.runner.sequence import PREFILL, WAIT, Seq

log = logging.getLogger("strata.engine")

# A checkpoint also goes this many tokens before the end of a prompt (llama-server's offset): the next turn's
# history often differs from the prompt in its last tokens (a generation prompt the template renders otherwise in
# the history, such as Qwen3's empty think block, or a newline that merges with the reply's first token).
END_BACKOFF = 4


class PromptCache:
    def __init__(self, ctx, model, n_slots: int, host_cache_bytes: int = 0, checkpoints: int = 0,
                 checkpoint_bytes: int = 0, disk: DiskPromptCache | None = None, cache_reuse: int = 0,
                 can_shift: bool = True):
        self.ctx = ctx
        self.mem = L.llama_get_memory(ctx)
        recurrent = bool(L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model))
        # memories that cannot be cut back to any prefix (recurrent state, a window-sized SWA cache) get context
        # checkpoints; a plain KV cache keeps every cell and needs none
        partial = recurrent or L.llama_model_n_swa(model) > 0
        self.slots = SlotCache(n_slots)
        self.host = HostPromptCache(ctx, host_cache_bytes)
        self.checkpoints = Checkpoints(ctx, n_slots, checkpoints if partial else 0, checkpoint_bytes)
        # states on disk, for a plain KV cache only: a window-sized SWA cache or a recurrent state would need its
        # checkpoints saved along, which the disk format does not carry yet
        self.disk = disk if disk is not None and disk.enabled and not partial else None
        # cache reuse after a change (chunk_reuse.py): chunks of at least this many cached tokens are moved to where
        # they reappear in a new prompt (0 = off, llama-server's default). Only where cells can be moved by
        # position: not a window-sized SWA cache or a recurrent state (partial memories), not M-RoPE (no shift)
        cache_reuse = max(0, int(cache_reuse)) if can_shift and not partial else 0
        self.cells = Continuation(self.mem, model, self.slots, self.checkpoints)
        # a recurrent state cannot be cut back to a shorter prefix: copying one only helps an exact continuation
        self.search = PrefixSearch(ctx, self.slots, self.host, self.checkpoints, self.cells, self.disk,
                                   cache_reuse=cache_reuse, can_share=not recurrent, partial_memory=partial)
        self.sharing = Sharing(ctx, self.mem, n_slots, self.slots, self.cells, self._start)
        self.mover = ChunkMover(ctx, self.mem, cache_reuse, self.cells.trim)
        self.saver = DiskSaver(ctx, self.disk, self.slots, self.host, self.sharing.flush)
        self.hit_tokens = 0             # prompt tokens not decoded thanks to the cache, since load
        self.reused_tokens = 0          # of hit_tokens, those moved from other positions, since load

    # ---- a new sequence ---------------------------------------------------------------------------------------
    def place(self, seq: Seq, slot_seqs: list[Seq | None]) -> int:
        """Pick a free slot for `seq` (there must be one), prepare its cells, set seq.todo/n_past/history."""
        self.sharing.flush()
        free = [i for i, s in enumerate(slot_seqs) if s is None]
        if not seq.req.cache_prompt:
            slot = self._take(self.slots.victim(free), 0)
            self._start(seq, slot, 0)
            return slot
        found = self.search.find(seq, free, slot_seqs)
        seq.cache_source = found.source
        if found.source == "slot":
            slot, cached = found.slot, self.slots.tokens[found.slot]
            self._take(slot, found.n)
            if found.value > found.n and self._reusable(seq, slot):
                self._start(seq, slot, *self.mover.move(slot, cached, seq.prompt, found.n))
            else:
                self._start(seq, slot, self.cells.resume(slot, found.n))
            return slot
        slot = self._take(self.slots.victim(free), 0)     # another source: the slot worth least takes it
        if found.file is not None:
            self._start(seq, slot, *self._restore_disk(found.file, slot, found.n, seq))
        elif found.src is not None:
            self.sharing.share(seq, slot, found.src, found.n)
        elif found.entry is not None:
            self._start(seq, slot, *self._restore_entry(found.entry, slot, found.n, seq))
        return slot

    def serve_waiting(self, slot_seqs) -> None:
        """Start waiting sequences whose source has computed their prefix (or gave up on it)."""
        self.sharing.serve_waiting(slot_seqs)

    def decoded(self) -> None:
        """A decode ran: llama.cpp did the queued KV copies first."""
        self.sharing.pending.clear()

    def _reusable(self, seq: Seq, slot: int) -> bool:
        """Cache reuse may move `slot`'s cells for `seq`: the slot shares no cells with another (moving a shared
        cell moves it for both)."""
        return self.search.reuses(seq) and slot not in self.slots.shared

    def _restore_entry(self, entry: HostEntry, slot: int, n: int, seq: Seq) -> tuple[int, int, int]:
        """Load a host-cache entry into the empty `slot` and resume it at n (from Continuation.entry_usable), its
        checkpoints coming along. Returns what ChunkMover.move returns."""
        tokens = entry.tokens
        if not self.host.restore(entry, slot):
            L.llama_memory_seq_rm(self.mem, slot, -1, -1)
            return 0, 0, 0
        self.checkpoints.give(slot, entry.checkpoints)
        if self._reusable(seq, slot):
            return self.mover.move(slot, tokens, seq.prompt, n)
        n = self.cells.resume(slot, n)
        return n, n, 0

    def _restore_disk(self, entry: DiskEntry, slot: int, n: int, seq: Seq) -> tuple[int, int, int]:
        """Load a state from disk into the empty `slot` and keep its first n tokens (and, with cache reuse, the
        chunks of the rest that the prompt repeats further on). Returns what ChunkMover.move returns."""
        disk = self.disk
        assert disk is not None                 # the search found the entry there
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
            n_past, n_cached, n_reused = self.mover.move(slot, entry.tokens, seq.prompt, n)
        else:
            n_past = n_cached = self.cells.trim(slot, n)
            n_reused = 0
        disk.record_hit(n_cached, time.perf_counter() - t0)
        log.info("prompt cache: %d tokens restored from disk in %.2f s", n_cached, disk.restore_s)
        return n_past, n_cached, n_reused

    def _take(self, slot: int, keep: int) -> int:
        """Make `slot` ready for a new sequence keeping its first `keep` cached tokens; what it held beyond
        that goes to the host cache first when it is worth keeping, and to disk when it is due there (the one path
        by which a free slot's cells are reused). Returns the slot."""
        self.saver.before_reuse(slot, keep)
        tokens = self.slots.tokens[slot]
        if len(tokens) - keep >= MIN_SAVE_TOKENS:
            self.host.save(slot, tokens, self.checkpoints.of(slot), L.llama_memory_seq_pos_min(self.mem, slot))
        self.slots.tokens[slot] = []
        if keep == 0:
            self.cells.clear(slot)
        return slot

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
            self.cells.clear(slot)
            self.slots.forget(slot)
            return
        tokens = seq.history[:n]
        self.slots.keep(slot, tokens)
        self.checkpoints.cut(slot, n)
        self.saver.released(slot, tokens, seq.n_cached)

    def borrow(self, free: list[int]) -> int:
        """A free slot emptied for work that is not a sequence (a generative model's embedding, which clears its
        cells when done): the one whose cached prefix is worth least, saved to the host cache when worth it."""
        return self._take(self.slots.victim(free), 0)

    def forget_all(self) -> None:
        """Every slot's cells were cleared behind our back (an embedding model decoding on the main context)."""
        self.saver.due.clear()
        self.slots.forget_all()
        self.checkpoints.clear_all()

    # ---- the disk (disk_saver.py) -----------------------------------------------------------------------------
    def idle(self, idle_s: float) -> float:
        """The runner has had no step for `idle_s` seconds: a prefix due on disk may be copied now. Returns how long
        to wait for work before calling again."""
        return self.saver.idle(idle_s)

    def save_all_to_disk(self, slot_seqs, deadline: float) -> int:
        """At shutdown (a reload, an unload, the app quitting): what the disk does not hold yet, until `deadline`
        (time.monotonic). Returns how many states were queued."""
        return self.saver.save_all(slot_seqs, deadline)

    # ---- context checkpoints and context shifts ---------------------------------------------------------------
    def checkpoints_enabled(self) -> bool:
        return self.checkpoints.enabled

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

    def shares_cells(self, slot: int) -> bool:
        """`slot`'s cells may be shared with another slot's (a shift would move them for both)."""
        return slot in self.slots.shared

    def shifted(self, seq: Seq, cleared: bool = False) -> None:
        """`seq` had a context shift: its slot's checkpoints describe positions that no longer exist. `cleared`: its
        cells were all removed (to process its kept window again), so it shares none any more."""
        assert seq.slot is not None             # a shifted sequence is decoding in its slot
        if cleared:
            self.slots.shared.discard(seq.slot)
        self.checkpoints.clear(seq.slot)
        seq.checkpoint_at = []

    # ---- what it holds ----------------------------------------------------------------------------------------
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

    def state(self) -> P.PromptCacheState:
        """The host-RAM cache and the checkpoints, as the runner reports them to the parent."""
        host, cps = self.host, self.checkpoints
        return P.PromptCacheState(bytes=host.bytes, entries=len(host.entries), limit=host.limit,
                                  checkpoint_bytes=cps.bytes, checkpoints=cps.count, checkpoint_hits=cps.hits,
                                  checkpoint_misses=cps.misses)
