"""The prompt cache: which slot's KV cells to reuse for a new prompt, and a bounded host-RAM store of sequence
states for conversations that had to give up their slot (docs/prompt-cache.md).

Everything here runs on the context thread (the only thread that touches the llama context).
- `SlotCache`: per slot, the tokens whose KV cells the slot still holds (positions 0..n-1) and when it was last
  used. A finished sequence leaves its cells in place; the next request goes to the free slot with the longest
  common token prefix (ties: the least recently used), so only the new suffix is decoded.
- `HostPromptCache`: `llama_state_seq_get_data` copies of slots that were about to be overwritten, keyed by their
  tokens and bounded in bytes (least recently used out first); restored with `llama_state_seq_set_data` when a
  prompt matches one better than any slot does.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np
from llama_cpp import llama_cpp as L

MIN_SAVE_TOKENS = 64        # a shorter cached prefix is cheaper to decode again than to keep in host RAM
MIN_RESTORE_GAIN = 32       # restore from host RAM only when it saves at least this many tokens over the slot


def common_prefix(a, b) -> int:
    """Length of the longest common prefix of two token sequences (lists or int32 arrays)."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n], dtype=np.int32)
    y = np.asarray(b[:n], dtype=np.int32)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if len(diff) else n


class SlotCache:
    """What each slot's KV cells hold while no sequence runs in it."""

    def __init__(self, n_slots: int):
        self.tokens: list[list[int]] = [[] for _ in range(n_slots)]
        self.last_used = [0.0] * n_slots
        self.shared: set[int] = set()      # slots whose cells may be shared with another slot (unified KV)

    def keep(self, slot: int, tokens: list[int]) -> None:
        self.tokens[slot] = tokens
        self.last_used[slot] = time.monotonic()

    def forget(self, slot: int) -> None:
        self.tokens[slot] = []
        self.shared.discard(slot)

    def forget_all(self) -> None:
        for i in range(len(self.tokens)):
            self.forget(i)

    def choose(self, prompt, free: list[int]) -> tuple[int, int]:
        """The free slot for `prompt`: (slot, common prefix length). Longest common prefix first; among equals
        the least recently used (an empty slot counts as never used, so it goes before any cached one)."""
        best, best_key = free[0], None
        for i in free:
            n = common_prefix(self.tokens[i], prompt) if self.tokens[i] else 0
            key = (n, -self.last_used[i] if self.tokens[i] else float("inf"))
            if best_key is None or key > best_key:
                best, best_key = i, key
        return best, best_key[0]

    def victim(self, free: list[int]) -> int:
        """The free slot whose cache is least worth keeping: empty first, then the least recently used."""
        return min(free, key=lambda i: (bool(self.tokens[i]), self.last_used[i]))


class _Entry:
    __slots__ = ("tokens", "buf", "size", "last_used")

    def __init__(self, tokens: list[int], buf, size: int):
        self.tokens, self.buf, self.size, self.last_used = tokens, buf, size, time.monotonic()


class HostPromptCache:
    """Sequence states in host RAM, at most `limit` bytes in all (0 = off)."""

    def __init__(self, ctx, limit: int):
        self.ctx = ctx
        self.limit = max(0, int(limit))
        self.entries: list[_Entry] = []
        self.bytes = 0
        self.saves = self.restores = 0

    def save(self, slot: int, tokens: list[int]) -> bool:
        """Copy slot's state (holding `tokens`) into host RAM, evicting the least recently used entries."""
        if self.limit <= 0 or len(tokens) < MIN_SAVE_TOKENS:
            return False
        for e in self.entries:
            if common_prefix(e.tokens, tokens) == len(tokens):
                e.last_used = time.monotonic()     # an entry already holds all of this
                return True
        size = L.llama_state_seq_get_size(self.ctx, slot)
        if size <= 0 or size > self.limit:
            return False
        self._make_room(size)
        buf = (ctypes.c_uint8 * size)()
        n = L.llama_state_seq_get_data(self.ctx, buf, size, slot)
        if n <= 0:
            return False
        # entries that are prefixes of the new one are superseded by it
        for e in [e for e in self.entries if common_prefix(e.tokens, tokens) == len(e.tokens)]:
            self._drop(e)
        self.entries.append(_Entry(list(tokens), buf, int(n)))
        self.bytes += int(n)
        self.saves += 1
        return True

    def best(self, prompt) -> tuple[_Entry | None, int]:
        best, n_best = None, 0
        for e in self.entries:
            n = common_prefix(e.tokens, prompt)
            if n > n_best:
                best, n_best = e, n
        return best, n_best

    def restore(self, entry: _Entry, slot: int) -> bool:
        """Load `entry` into `slot` (whose cells must be empty); the entry leaves the cache (the slot holds it
        now, and is saved again if it is overwritten later)."""
        ok = L.llama_state_seq_set_data(self.ctx, entry.buf, entry.size, slot) > 0
        self._drop(entry)
        if ok:
            self.restores += 1
        return ok

    def clear(self) -> None:
        self.entries, self.bytes = [], 0

    def _make_room(self, size: int) -> None:
        self.entries.sort(key=lambda e: e.last_used)
        while self.entries and self.bytes + size > self.limit:
            self._drop(self.entries[0])

    def _drop(self, entry: _Entry) -> None:
        if entry in self.entries:
            self.entries.remove(entry)
            self.bytes -= entry.size
