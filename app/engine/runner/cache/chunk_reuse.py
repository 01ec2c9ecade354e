"""Cache reuse after a change: which chunks of a slot's cached tokens reappear further on in a new prompt
(llama-server's `--cache-reuse N`), and moving their KV cells there instead of computing them again.

llama-server (tools/server/server-context.cpp, `n_cache_reuse`) walks the cached tokens after the common prefix and
takes every run of at least N tokens that continues the new prompt where the reuse has got to, shifting its cells
into place (`llama_memory_seq_rm` + `llama_memory_seq_add`: a RoPE position shift of the keys). Its walk only ever
advances in the new prompt on a match, so it reuses chunks after text that was *deleted* (a dropped message), and
nothing after text that was *replaced* (a changed date: the new tokens at the change appear nowhere in the cache).

Here the walk also steps over new tokens (the "gaps": a replaced date, an inserted line), so a chunk after a
replacement is found too. The gaps still have to be computed, and llama.cpp decodes a sequence only at positions
after its last cell, so they are decoded after the moved chunks (at positions past them) and then moved back in
front of them: their cells have then attended to the moved chunks as well (text that comes after them in the
prompt). A chunk's cells were computed attending to the old text before it. Both make the result approximate,
which is why the option is off by default (docs/prompt-cache.md, "Reuse after a change").

`reuse_chunks` is pure (tests/unit/engine/runner/cache/test_chunk_reuse.py); `ChunkMover` moves the cells on the
context thread (tests/integration/engine/test_cache_reuse.py).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch

log = logging.getLogger("strata.engine")

MAX_KEY = 16            # a chunk is found by its first min(N, MAX_KEY) tokens, then extended as far as it matches
MAX_CANDIDATES = 8      # of a key's places in the cache at or after the walk's, the first few are tried


@dataclass(frozen=True)
class Chunk:
    """Cached tokens [src, src + n) reappear at [dst, dst + n) of the new prompt."""
    src: int
    dst: int
    n: int


def reuse_chunks(cached, prompt, n_prefix: int, min_chunk: int, limit: int, max_gap: int) -> list[Chunk]:
    """Chunks of `cached` (a slot's tokens, cells at positions = indices) to move into `prompt` after their common
    prefix of `n_prefix` tokens: each at least `min_chunk` tokens, in order in both, ending at or before `limit`
    (so at least the last prompt token is decoded). The new tokens between them (the gaps) may sum to at most
    `max_gap`: they are decoded in one batch. Greedy from the front: at each prompt position the longest match among
    the first candidates, otherwise the position is a gap token."""
    if min_chunk <= 0:
        return []
    old = np.asarray(cached, dtype=np.int32)
    new = np.asarray(prompt, dtype=np.int32)
    k = min(min_chunk, MAX_KEY)
    if len(old) - n_prefix < min_chunk or limit - n_prefix < min_chunk:
        return []
    # every k-token window of the cache after the prefix, by hash, sorted (positions ascending among equal hashes);
    # the walk looks each prompt position's window up there and compares the tokens themselves
    old_h = _window_hashes(old[n_prefix:], k)
    order = np.argsort(old_h, kind="stable")
    sorted_h = old_h[order]
    places = order.astype(np.int64) + n_prefix
    new_h = _window_hashes(new[:limit], k)
    chunks: list[Chunk] = []
    head_c = head_p = end = n_prefix             # next cached token, next prompt position, end of the last chunk
    gaps = 0
    while head_p + min_chunk <= limit and gaps + (head_p - end) <= max_gap:
        h = new_h[head_p]
        lo, hi = np.searchsorted(sorted_h, h, "left"), np.searchsorted(sorted_h, h, "right")
        best, best_n = -1, 0
        if hi > lo:
            found = places[lo:hi]
            first = int(np.searchsorted(found, head_c))
            for c in found[first:first + MAX_CANDIDATES]:
                n = _match(old, int(c), new, head_p, limit)
                if n > best_n:
                    best, best_n = int(c), n
        if best_n >= min_chunk:
            gaps += head_p - end
            chunks.append(Chunk(best, head_p, best_n))
            head_p += best_n
            head_c, end = best + best_n, head_p
        else:
            head_p += 1
    return chunks


def _window_hashes(tokens, k: int):
    """A 64-bit polynomial hash of every k-token window of `tokens` (len - k + 1 of them), vectorised."""
    n = len(tokens) - k + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    t = tokens.astype(np.uint64)
    h = np.zeros(n, dtype=np.uint64)
    for j in range(k):
        h = h * np.uint64(1_000_003) + t[j:j + n] + np.uint64(1)     # wraps modulo 2**64
    return h


def _match(old, c: int, new, p: int, limit: int) -> int:
    """How many tokens old[c:] and new[p:limit] share from their start."""
    n = min(len(old) - c, limit - p)
    if n <= 0:
        return 0
    diff = np.flatnonzero(old[c:c + n] != new[p:p + n])
    return int(diff[0]) if len(diff) else n


def gap_spans(chunks: list[Chunk], n_prefix: int) -> list[tuple[int, int]]:
    """The prompt ranges [start, end) between the prefix and the chunks that must be computed (empty ones left out)."""
    spans, end = [], n_prefix
    for ch in chunks:
        if ch.dst > end:
            spans.append((end, ch.dst))
        end = ch.dst + ch.n
    return spans


class ChunkMover:
    """Moves a slot's cached chunks to where a new prompt repeats them (context thread). `min_chunk`: the smallest
    chunk worth moving (the `cache_reuse` option); `trim(slot, n)`: keep the slot's first n cells if they can
    continue a sequence, returning how many were kept (continuation.Continuation.trim)."""

    def __init__(self, ctx, mem, min_chunk: int, trim):
        self.ctx, self.mem, self.min_chunk, self.trim = ctx, mem, min_chunk, trim
        self._gap_batch: NpBatch | None = None

    def move(self, slot: int, cached, prompt, n: int) -> tuple[int, int, int]:
        """`slot`'s cells hold `cached` at positions 0.. and the prompt shares their first n tokens. Keep those, move
        the chunks of the rest that the prompt repeats further on to their new positions, compute the new tokens
        between them, and drop every other cell. Returns (the prompt tokens now in the cells, how many of them came
        from the cache, how many of those were moved). Without a chunk worth moving: the plain prefix, (n, n, 0)."""
        limit = len(prompt) - 1                 # the last prompt token is decoded in the step: its logits
        chunks = reuse_chunks(cached, prompt, n, self.min_chunk, min(limit, L.llama_n_ctx_seq(self.ctx)),
                              L.llama_n_batch(self.ctx)) if n > 0 else []
        if not chunks:
            n = self.trim(slot, n)
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
