"""Where a new prompt's longest usable cached prefix is (context thread): the search behind PromptCache.place.

Four sources, best first (docs/prompt-cache.md):
1. the free slot whose kept cells share the longest prefix with the prompt (a conversation's next turn);
2. the host-RAM prompt cache (a conversation that had lost its slot to another);
3. another running sequence (the same long system prompt, sent by several clients at once), whose cells can be
   copied (sharing.py);
4. the prompt cache on disk (disk_cache.py): states written by this runner or an earlier one of the same model,
   build and context settings (before a reload or a restart).
A prefix counts for what the memory can continue from (continuation.py) and, with cache reuse, for the chunks after
it that can be moved (chunk_reuse.py). A source other than the slot is taken only when it saves enough more than
the slot (MIN_RESTORE_GAIN, MIN_SHARE_TOKENS): restoring or copying costs time of its own. Whatever is reused, at
least the last prompt token is decoded again: its logits start the reply.
Covered by tests/integration/engine/test_prompt_cache.py (each source in a runner), test_cache_reuse.py and
tests/unit/engine/runner/cache/test_disk_cache.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.cache.chunk_reuse import reuse_chunks
from app.engine.runner.cache.continuation import Continuation
from app.engine.runner.cache.disk_cache import MIN_DISK_TOKENS, DiskEntry, DiskPromptCache
from app.engine.runner.cache.stores import (MIN_RESTORE_GAIN, MIN_SAVE_TOKENS, Checkpoints, HostEntry,
                                            HostPromptCache, SlotCache, common_prefix)
from app.engine.runner.sequence import PREFILL, WAIT, Seq

MIN_SHARE_TOKENS = 64       # copying another sequence's cells (a whole KV stream when not unified) must save this


@dataclass
class Found:
    """The source a prompt starts from, `n` of its tokens usable (`value` with the chunks cache reuse can move):
    "slot" (`slot`, whose kept tokens share them with the prompt), "host" (`entry`), "sequence" (`src`, a running
    sequence) or "disk" (`file`)."""
    source: str
    n: int
    value: int
    slot: int = -1
    entry: HostEntry | None = None
    src: Seq | None = None
    file: DiskEntry | None = None


class PrefixSearch:
    """`cache_reuse`: the smallest chunk cache reuse moves (0 = off); `can_share`: a running sequence's cells may be
    copied (not a recurrent state, which cannot be cut back to a shorter prefix)."""

    def __init__(self, ctx, slots: SlotCache, host: HostPromptCache, checkpoints: Checkpoints,
                 cells: Continuation, disk: DiskPromptCache | None, *, cache_reuse: int, can_share: bool,
                 partial_memory: bool):
        self.ctx, self.slots, self.host, self.checkpoints, self.cells, self.disk = \
            ctx, slots, host, checkpoints, cells, disk
        self.cache_reuse, self.can_share, self.partial_memory = cache_reuse, can_share, partial_memory

    def find(self, seq: Seq, free: list[int], slot_seqs: list[Seq | None]) -> Found:
        """The best source for `seq`'s prompt among the free slots, the host-RAM entries, the running sequences and
        the files on disk; records what each offered in seq.cache_candidates (the cache report: explain.py)."""
        prompt = seq.prompt
        limit = max(0, len(prompt) - 1)
        slot, n_slot = self.slots.choose(prompt, free, self.cells.slot_usable, limit)
        entry, n_host = self.host.best(prompt, self.cells.entry_usable, limit) if self.host.entries else (None, 0)
        src, n_src = self._best_running(prompt, slot_seqs) if self.can_share else (None, 0)
        n_src = min(n_src, limit)
        self._count_checkpoint_miss(prompt, free, limit, max(n_slot, n_host))
        disk, n_disk = self._best_on_disk(prompt, limit)
        # with cache reuse, a source is worth its prefix plus the chunks it can move after it
        v_slot, v_host, v_disk = n_slot, n_host, n_disk
        if self.reuses(seq):
            slot, n_slot, v_slot = self._best_slot_with_reuse(prompt, free, limit)
            entry, n_host, v_host = self._best_entry_with_reuse(prompt, limit)
            if disk is not None:
                v_disk = n_disk + self._reuse_gain(disk.tokens, prompt, n_disk, limit)
        seq.cache_candidates = {"slot": v_slot, "host": v_host, "sequence": n_src, "disk": v_disk}
        if disk is not None and v_disk >= max(v_slot, v_host, n_src) + MIN_RESTORE_GAIN:
            return Found("disk", n_disk, v_disk, file=disk)
        if src is not None and n_src >= max(v_slot, v_host) + MIN_SHARE_TOKENS:
            return Found("sequence", n_src, n_src, src=src)
        if entry is not None and v_host >= v_slot + MIN_RESTORE_GAIN:
            return Found("host", n_host, v_host, entry=entry)
        return Found("slot", n_slot, v_slot, slot=slot)

    def reuses(self, seq: Seq) -> bool:
        """Cache reuse is on and `seq`'s prompt may use it: no images (their positions are not tokens)."""
        return self.cache_reuse > 0 and seq.media is None and len(seq.prompt) > 0 and int(seq.prompt.min()) >= 0

    def _count_checkpoint_miss(self, prompt, free, limit, n_found) -> None:
        """A checkpoint miss: a free slot's tokens share at least MIN_SAVE_TOKENS with the prompt, but no memory
        (slot or host entry) can continue any of it: the prompt is processed from the start. Counted whether
        checkpoints are on or not (with them off, the count says what they would save)."""
        if not self.partial_memory or n_found > 0:
            return
        if any(self.slots.tokens[i] and min(common_prefix(self.slots.tokens[i], prompt), limit) >= MIN_SAVE_TOKENS
               for i in free):
            self.checkpoints.misses += 1

    def _best_on_disk(self, prompt, limit: int):
        if self.disk is None or limit < MIN_DISK_TOKENS:
            return None, 0
        self.disk.rescan_if_changed()       # an earlier runner of this model may have written since (a reload)
        return self.disk.best(prompt, limit, max_len=L.llama_n_ctx_seq(self.ctx))

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

    # ---- cache reuse after a change (chunk_reuse.py): what each source is worth with the chunks it can move ----
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


def known_tokens(seq: Seq):
    """The tokens `seq` has in KV followed by the prompt tokens it has still to feed, in position order."""
    if seq.state == PREFILL and seq.todo < len(seq.prompt):
        return np.concatenate([np.asarray(seq.history, dtype=np.int32), seq.prompt[seq.todo:]])
    return seq.history
