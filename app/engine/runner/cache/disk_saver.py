"""What the prompt cache writes to disk, and when (context thread); disk_cache.py writes and reads the files.

One rule says what is worth a file (`worth`): a state whose tokens are all real (an image's positions are not named
by tokens) and that holds at least MIN_DISK_TOKENS tokens beyond what is already held: a shorter prefix is computed
again faster than it is written and read back. It is applied
- when a sequence leaves its slot (`released`): a prefix that computed that many tokens beyond what it took from
  the cache becomes due; it is not copied then (a 30k-token state is ~0.3 s to copy, which would hold back the
  reply's end and every other sequence's next step) but
- when the runner is idle (`idle`: IDLE_SAVE_AFTER_S after the last step, one state per pass, so a request that
  arrives meanwhile waits for one copy at most), or
- before the slot's cells are reused (`before_reuse`), unless the new sequence keeps all but fewer than
  MIN_DISK_TOKENS of them (it is saved when it leaves, holding them), and
- at shutdown (`save_all`: a reload, an unload, the app quitting): every slot's prefix, running sequences'
  included, then the host-RAM entries, most recent first, until a deadline.
Before the state is copied the disk is asked what it holds already (`DiskPromptCache.covered`).
Covered by tests/unit/engine/runner/cache/test_disk_cache.py and tests/integration/service/test_prompt_disk_cache.py.
"""
from __future__ import annotations

import time
from typing import Callable

from llama_cpp import llama_cpp as L

from app.engine.runner.cache.disk_cache import MIN_DISK_TOKENS, DiskPromptCache
from app.engine.runner.cache.stores import HostPromptCache, SlotCache, state_buffer
from app.engine.runner.sequence import WAIT

# A finished sequence's prefix is copied to the disk cache once the runner has been idle this long: the copy holds
# the context thread (hundreds of MiB: 0.1-0.5 s), and a client that answers at once (a chat's title request, an
# agent's next call after a quick tool) should not find its request waiting behind it.
IDLE_SAVE_AFTER_S = 1.0
IDLE_POLL_S = 0.5           # how long an idle runner with nothing due waits for work before looking again


class DiskSaver:
    """`disk` None: nothing is ever written. `flush_copies()`: make llama.cpp carry out queued KV copies before a
    state is read (sharing.Sharing.flush)."""

    def __init__(self, ctx, disk: DiskPromptCache | None, slots: SlotCache, host: HostPromptCache,
                 flush_copies: Callable[[], None]):
        self.ctx, self.disk, self.slots, self.host, self.flush_copies = ctx, disk, slots, host, flush_copies
        self.due: set[int] = set()      # free slots whose kept prefix is due on disk

    def worth(self, tokens, held: int | None = None) -> bool:
        """The one rule: `tokens` deserve a file when the disk is on, all are real tokens and they hold at least
        MIN_DISK_TOKENS beyond the first `held` ones, those held already (taken from the cache, kept by the next
        sequence); None: beyond what the disk holds (or will, once its writer gets to it), which is asked last."""
        if self.disk is None or len(tokens) - (held or 0) < MIN_DISK_TOKENS or min(tokens) < 0:
            return False
        return held is not None or len(tokens) - self.disk.covered(tokens) >= MIN_DISK_TOKENS

    def save(self, slot: int, tokens) -> bool:
        """Copy `slot`'s state (holding exactly `tokens`) to the disk cache when worth it. The copy is made here; a
        writer thread writes it."""
        if self.disk is None or not self.worth(tokens):
            return False
        self.flush_copies()
        size = L.llama_state_seq_get_size(self.ctx, slot)
        if size <= 0 or size > self.disk.limit:
            return False
        buf = state_buffer(size)
        n = L.llama_state_seq_get_data(self.ctx, buf, size, slot)
        return n > 0 and self.disk.save(tokens, buf, int(n))

    # ---- when -------------------------------------------------------------------------------------------------
    def released(self, slot: int, tokens, n_cached: int) -> None:
        """A sequence left `slot` keeping `tokens`, of which it took the first n_cached from the cache."""
        if self.worth(tokens, n_cached):
            self.due.add(slot)

    def before_reuse(self, slot: int, keep: int) -> None:
        """`slot`'s cells are about to be reused by a sequence that keeps their first `keep` tokens."""
        if slot in self.due:
            self.due.discard(slot)
            tokens = self.slots.tokens[slot]
            # a sequence that keeps all but a few of its tokens (the next turn of its conversation) is saved when it
            # is done, holding them: copying them now would only make the new request wait for the copy
            if self.worth(tokens, keep):
                self.save(slot, tokens)

    def idle(self, idle_s: float) -> float:
        """The runner has had no step for `idle_s` seconds: copy one due prefix once IDLE_SAVE_AFTER_S have passed.
        Returns how long to wait for work before calling again (0: at once, another may be due)."""
        if self.due and idle_s < IDLE_SAVE_AFTER_S:
            return IDLE_SAVE_AFTER_S - idle_s
        return 0.0 if self.save_due(limit=1) else IDLE_POLL_S

    def save_due(self, limit: int = 1 << 30) -> int:
        """Copy up to `limit` kept prefixes that are due; returns how many were copied."""
        saved = 0
        while self.due and saved < limit:
            slot = min(self.due)
            self.due.discard(slot)
            tokens = self.slots.tokens[slot]
            if tokens and self.save(slot, tokens):
                saved += 1
        return saved

    def save_all(self, slot_seqs, deadline: float) -> int:
        """At shutdown: every slot's prefix that the disk does not hold yet, running sequences' included, then the
        host-RAM cache's entries (most recent first), until `deadline` (time.monotonic). Returns how many were
        queued."""
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
            if tokens and self.save(slot, tokens):
                saved += 1
                self.disk.flush(max(0.0, deadline - time.monotonic()))
        for e in sorted(self.host.entries, key=lambda e: -e.last_used):    # conversations that lost their slot
            if time.monotonic() > deadline:
                break
            if not self.worth(e.tokens):
                continue
            if self.disk.save(e.tokens, e.buf, e.size - sum(c.size for c in e.checkpoints)):
                saved += 1
                self.disk.flush(max(0.0, deadline - time.monotonic()))
        return saved
