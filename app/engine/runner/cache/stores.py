"""Where the prompt cache keeps prefixes (prompt_cache.PromptCache's stores): what each free slot's KV cells hold,
a bounded host-RAM store of sequence states for conversations that had to give up their slot, and context
checkpoints (docs/prompt-cache.md).

Everything here runs on the context thread (the only thread that touches the llama context).
- `SlotCache`: per slot, the tokens whose KV cells the slot still holds (positions 0..n-1) and when it was last
  used. A finished sequence leaves its cells in place; the next request goes to the free slot with the longest
  common token prefix (ties: the least recently used), so only the new suffix is decoded.
- `HostPromptCache`: `llama_state_seq_get_data` copies of slots that were about to be overwritten, keyed by their
  tokens and bounded in bytes (least recently used out first); restored with `llama_state_seq_set_data` when a
  prompt matches one better than any slot does. An entry carries its slot's context checkpoints.
- `Checkpoints`: context checkpoints (llama-server's name): copies of the part of a sequence's memory that cannot
  be cut back to a shorter prefix (recurrent state, sliding-window cells), taken with
  `llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)` at chosen points of a prompt, kept per
  slot within a count and a byte bound, and restored with `llama_state_seq_set_data_ext` when a new prompt shares
  the prefix up to one (docs/prompt-cache.md, "Context checkpoints").
"""
from __future__ import annotations

import ctypes
import time

import numpy as np
from llama_cpp import llama_cpp as L

MIN_SAVE_TOKENS = 64        # a shorter cached prefix is cheaper to decode again than to keep in host RAM
MIN_RESTORE_GAIN = 32       # restore from host RAM only when it saves at least this many tokens over the slot
CHECKPOINT_SPACING = 4096   # a long prompt gets a checkpoint at least every this many tokens (batch boundaries)
PARTIAL = L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


def state_buffer(size: int):
    """A ctypes byte array of `size` bytes for a sequence's state, left uninitialised: a ctypes array or a bytearray
    is zero-filled with the GIL held (0.6 s for the 370 MB state of a 30k-token prompt of a 0.5B model on a 2-core
    machine), and the output thread waits that long to send a finished reply's end; numpy's empty only reserves the
    pages, which llama.cpp then writes with the GIL released (or a file read fills)."""
    return (ctypes.c_uint8 * size).from_buffer(np.empty(size, dtype=np.uint8).data)


def common_prefix(a, b) -> int:
    """Length of the longest common prefix of two token sequences (lists or int32 arrays)."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n], dtype=np.int32)
    y = np.asarray(b[:n], dtype=np.int32)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if len(diff) else n


def common_prefix_chars(a: str, b: str) -> int:
    """How many leading characters `a` and `b` share (binary search over slice equality: C-speed compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


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

    def choose(self, prompt, free: list[int], usable=None, limit: int | None = None) -> tuple[int, int]:
        """The free slot for `prompt`: (slot, reusable prefix length). Longest first; among equals the least
        recently used (an empty slot counts as never used, so it goes before any cached one). `usable(slot, n)`
        says how much of a common prefix of n tokens the slot's memory can really continue from (a recurrent
        state only at its end or at a checkpoint); `limit` caps n first."""
        best, best_key = free[0], (0, float("-inf"))      # below every real key: the first slot is taken
        for i in free:
            n = common_prefix(self.tokens[i], prompt) if self.tokens[i] else 0
            if limit is not None:
                n = min(n, limit)
            if usable is not None and n > 0:
                n = usable(i, n)
            key = (n, -self.last_used[i] if self.tokens[i] else float("inf"))
            if key > best_key:
                best, best_key = i, key
        return best, best_key[0]

    def victim(self, free: list[int]) -> int:
        """The free slot whose cache is least worth keeping: empty first, then the least recently used."""
        return min(free, key=lambda i: (bool(self.tokens[i]), self.last_used[i]))


class HostEntry:
    """A slot's state in host RAM, the tokens it holds and its checkpoints."""
    __slots__ = ("tokens", "buf", "size", "last_used", "checkpoints", "pos_min")

    def __init__(self, tokens: list[int], buf, size: int, checkpoints: list | None = None, pos_min: int = 0):
        self.tokens, self.buf, self.last_used = tokens, buf, time.monotonic()
        self.checkpoints = list(checkpoints or [])     # Checkpoint objects of the slot, each at n <= len(tokens)
        self.pos_min = pos_min                         # llama_memory_seq_pos_min of the saved state
        self.size = size + sum(c.size for c in self.checkpoints)


class HostPromptCache:
    """Sequence states in host RAM, at most `limit` bytes in all (0 = off)."""

    def __init__(self, ctx, limit: int):
        self.ctx = ctx
        self.limit = max(0, int(limit))
        self.entries: list[HostEntry] = []
        self.bytes = 0

    def save(self, slot: int, tokens: list[int], checkpoints: list | None = None, pos_min: int = 0) -> bool:
        """Copy slot's state (holding `tokens`) into host RAM with the slot's `checkpoints`, evicting the least
        recently used entries."""
        if self.limit <= 0 or len(tokens) < MIN_SAVE_TOKENS:
            return False
        for e in self.entries:
            if common_prefix(e.tokens, tokens) == len(tokens):
                e.last_used = time.monotonic()     # an entry already holds all of this
                return True
        size = L.llama_state_seq_get_size(self.ctx, slot)
        extra = sum(c.size for c in checkpoints or [])
        if size <= 0 or size + extra > self.limit:
            return False
        self._make_room(size + extra)
        buf = state_buffer(size)
        n = L.llama_state_seq_get_data(self.ctx, buf, size, slot)
        if n <= 0:
            return False
        # entries that are prefixes of the new one are superseded by it
        for e in [e for e in self.entries if common_prefix(e.tokens, tokens) == len(e.tokens)]:
            self._drop(e)
        entry = HostEntry(list(tokens), buf, int(n), checkpoints, pos_min)
        self.entries.append(entry)
        self.bytes += entry.size
        return True

    def best(self, prompt, usable=None, limit: int | None = None) -> tuple[HostEntry | None, int]:
        """The entry whose state continues `prompt` furthest: (entry, tokens reusable). `usable(entry, n)` and
        `limit` as in SlotCache.choose."""
        best, n_best = None, 0
        for e in self.entries:
            n = common_prefix(e.tokens, prompt)
            if limit is not None:
                n = min(n, limit)
            if usable is not None and n > 0:
                n = usable(e, n)
            if n > n_best:
                best, n_best = e, n
        return best, n_best

    def restore(self, entry: HostEntry, slot: int) -> bool:
        """Load `entry` into `slot` (whose cells must be empty); the entry leaves the cache (the slot holds it
        now, and is saved again if it is overwritten later)."""
        ok = L.llama_state_seq_set_data(self.ctx, entry.buf, entry.size, slot) > 0
        self._drop(entry)
        return ok

    def clear(self) -> None:
        self.entries, self.bytes = [], 0

    def _make_room(self, size: int) -> None:
        self.entries.sort(key=lambda e: e.last_used)
        while self.entries and self.bytes + size > self.limit:
            self._drop(self.entries[0])

    def _drop(self, entry: HostEntry) -> None:
        if entry in self.entries:
            self.entries.remove(entry)
            self.bytes -= entry.size


class Checkpoint:
    """The non-rollback part of a sequence's memory after its first `n` tokens (a host-RAM copy)."""
    __slots__ = ("n", "buf", "size")

    def __init__(self, n: int, buf, size: int):
        self.n, self.buf, self.size = n, buf, size


class Checkpoints:
    """Context checkpoints per slot, sorted by position, at most `max_count` and `max_bytes` per slot
    (max_count 0 = off). Context thread only."""

    def __init__(self, ctx, n_slots: int, max_count: int, max_bytes: int):
        self.ctx = ctx
        self.max_count = max(0, int(max_count))
        self.max_bytes = max(0, int(max_bytes))         # 0 = no byte bound beyond the count
        self.slots: list[list[Checkpoint]] = [[] for _ in range(n_slots)]
        self.taken = self.hits = self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.max_count > 0

    def of(self, slot: int) -> list[Checkpoint]:
        return self.slots[slot]

    def has(self, slot: int, n: int) -> bool:
        return any(c.n == n for c in self.slots[slot])

    def last_n(self, slot: int) -> int:
        return self.slots[slot][-1].n if self.slots[slot] else 0

    def take(self, slot: int, n: int) -> Checkpoint | None:
        """Copy `slot`'s partial state now (it holds exactly n tokens) and keep it."""
        size = L.llama_state_seq_get_size_ext(self.ctx, slot, PARTIAL)
        if size <= 0 or (self.max_bytes and size > self.max_bytes):
            return None
        buf = state_buffer(size)
        got = L.llama_state_seq_get_data_ext(self.ctx, buf, size, slot, PARTIAL)
        if got <= 0:
            return None
        cps = [c for c in self.slots[slot] if c.n != n]
        cps.append(Checkpoint(n, buf, int(got)))
        cps.sort(key=lambda c: c.n)
        self.slots[slot] = self._bounded(cps)
        self.taken += 1
        return cps[-1]

    def _bounded(self, cps: list[Checkpoint]) -> list[Checkpoint]:
        """Within the bounds: drop the checkpoint closest to the one before it (the newest always stays), so
        those kept stay spread over the history; ties drop the older one."""
        while len(cps) > 1 and (len(cps) > self.max_count or
                                (self.max_bytes and sum(c.size for c in cps) > self.max_bytes)):
            gaps = [(cps[i].n - (cps[i - 1].n if i else 0), i) for i in range(len(cps) - 1)]
            cps.pop(min(gaps)[1])
        return cps

    def best(self, slot_or_list, n: int) -> Checkpoint | None:
        """The latest checkpoint at or before position n (of a slot, or of a list such as a host entry's)."""
        cps = self.slots[slot_or_list] if isinstance(slot_or_list, int) else slot_or_list
        found = None
        for c in cps:
            if 0 < c.n <= n:
                found = c
        return found

    def restore(self, slot: int, cp: Checkpoint) -> bool:
        """Load `cp` into `slot` (its other memory, the attention cells, stays: cut it back to cp.n after)."""
        return L.llama_state_seq_set_data_ext(self.ctx, cp.buf, cp.size, slot, PARTIAL) > 0

    def cut(self, slot: int, n: int) -> None:
        """The slot keeps only its first n tokens: checkpoints after that describe other tokens."""
        self.slots[slot] = [c for c in self.slots[slot] if c.n <= n]

    def give(self, slot: int, cps: list[Checkpoint]) -> None:
        self.slots[slot] = self._bounded(sorted(cps, key=lambda c: c.n))

    def clear(self, slot: int) -> None:
        self.slots[slot] = []

    def clear_all(self) -> None:
        for i in range(len(self.slots)):
            self.slots[i] = []

    @property
    def count(self) -> int:
        return sum(len(s) for s in self.slots)

    @property
    def bytes(self) -> int:
        return sum(c.size for s in self.slots for c in s)
