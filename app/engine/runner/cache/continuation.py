"""How much of a common prefix a sequence's memory can continue from, and cutting a slot back to it (context
thread).

A plain KV cache keeps every cell, so any common prefix can be continued: the cells after it are removed. A
sliding-window or recurrent memory cannot keep every cell: `llama_memory_seq_pos_min` says what is still held, and a
prefix whose needed cells are gone is continued from the latest context checkpoint at or before it
(stores.Checkpoints), or processed again from the start when there is none (llama-server's rule): a recurrent
state is never continued from a position it does not describe.
Covered by tests/integration/engine/test_prompt_cache.py (a sliding-window cache's cells below the window) and
tests/integration/engine/test_checkpoints.py (continuing from a checkpoint).
"""
from __future__ import annotations

from llama_cpp import llama_cpp as L

from app.engine.runner.cache.stores import Checkpoints, SlotCache


class Continuation:
    """`slots` and `checkpoints` are the prompt cache's own (prompt_cache.PromptCache)."""

    def __init__(self, mem, model, slots: SlotCache, checkpoints: Checkpoints):
        self.mem, self.slots, self.checkpoints = mem, slots, checkpoints
        self.n_swa = max(1, L.llama_model_n_swa(model))

    def direct(self, pos_min: int, n: int) -> bool:
        """The memory (whose oldest held position is pos_min) can continue at position n after cutting the rest:
        the cells position n attends to are all there (a recurrent state: only when n is its end)."""
        return 0 <= pos_min <= max(0, n - self.n_swa)

    def slot_usable(self, slot: int, n: int) -> int:
        """Of a common prefix of n tokens with `slot`'s kept ones, how many its memory can continue from."""
        if self.direct(L.llama_memory_seq_pos_min(self.mem, slot), n):
            return n
        cp = self.checkpoints.best(slot, n)
        return cp.n if cp else 0

    def entry_usable(self, entry, n: int) -> int:
        """The same for a host-RAM entry (stores.HostPromptCache), which carries its slot's checkpoints."""
        if n >= len(entry.tokens) or self.direct(entry.pos_min, n):
            return n
        cp = self.checkpoints.best(entry.checkpoints, n)
        return cp.n if cp else 0

    def resume(self, slot: int, n: int) -> int:
        """Make `slot`'s memory hold exactly the first n tokens of its kept ones (n from slot_usable): cut the
        cells after n, or restore the checkpoint at n first. Returns the tokens kept (0: the slot is empty)."""
        if n > 0 and not self.direct(L.llama_memory_seq_pos_min(self.mem, slot), n):
            cp = self.checkpoints.best(slot, n)
            if cp is None or cp.n != n or not self.checkpoints.restore(slot, cp):
                n = 0
            else:
                self.checkpoints.hits += 1
        n = self.trim(slot, n)
        self.checkpoints.cut(slot, n)
        return n

    def trim(self, slot: int, n: int) -> int:
        """Keep cells [0, n) of `slot` if they can continue a sequence; returns how many were kept (0 = none)."""
        if n > 0 and not self.direct(L.llama_memory_seq_pos_min(self.mem, slot), n):
            n = 0                       # the window (or recurrent state) no longer holds what position n needs
        if n == 0 or not L.llama_memory_seq_rm(self.mem, slot, n, -1):
            self.clear(slot)
            return 0
        return n

    def clear(self, slot: int) -> None:
        """`slot`'s memory holds nothing: no cells, none shared, no checkpoints."""
        L.llama_memory_seq_rm(self.mem, slot, -1, -1)
        self.slots.shared.discard(slot)
        self.checkpoints.clear(slot)
