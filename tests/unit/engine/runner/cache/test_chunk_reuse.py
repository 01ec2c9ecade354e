"""Which cached chunks cache reuse moves into a new prompt (app/engine/runner/cache/chunk_reuse.py), without llama.cpp:
deletions (llama-server's case), replacements and insertions (the gaps it computes), the minimum chunk, the bound on
the gaps, and the last prompt token always left to decode. tests/integration/engine/test_cache_reuse.py moves real
cells."""
from __future__ import annotations

import numpy as np

from app.engine.runner.cache.chunk_reuse import Chunk, gap_spans, reuse_chunks


def seq(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


PREFIX, A, B, C = seq(1000, 50), seq(2000, 40), seq(3000, 40), seq(4000, 40)


def test_a_deleted_block_leaves_the_rest_to_move_back():
    cached = PREFIX + A + B + C
    prompt = PREFIX + B + C + [7, 8]                   # A dropped (an old message), two new tokens at the end
    chunks = reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 512)
    assert chunks == [Chunk(src=90, dst=50, n=80)]     # B and C in one run, moved back by A's length
    assert gap_spans(chunks, 50) == []


def test_a_replaced_date_is_a_gap_and_everything_after_it_moves():
    cached = PREFIX + [11, 12, 13] + A + B
    prompt = PREFIX + [21, 22, 23, 24] + A + B + [9]   # the date changed and is one token longer
    chunks = reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 512)
    assert chunks == [Chunk(src=53, dst=54, n=80)]
    assert gap_spans(chunks, 50) == [(50, 54)]


def test_chunks_come_in_order_and_shorter_matches_than_the_minimum_are_computed():
    cached = PREFIX + A + [5] * 3 + B + C
    prompt = PREFIX + [6] + A + B[:10] + [6, 6] + C + [9]
    chunks = reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 512)
    # A moves; B's first 10 tokens are shorter than 16 (computed); C moves
    assert [(c.src, c.dst, c.n) for c in chunks] == [(50, 51, 40), (133, 103, 40)]
    assert gap_spans(chunks, 50) == [(50, 51), (91, 103)]
    # a minimum of 41 takes nothing; off (0) takes nothing
    assert reuse_chunks(cached, prompt, 50, 41, len(prompt) - 1, 512) == []
    assert reuse_chunks(cached, prompt, 50, 0, len(prompt) - 1, 512) == []


def test_a_chunk_stops_before_the_last_prompt_token():
    cached = PREFIX + [1, 2] + A
    prompt = PREFIX + [3] + A                           # A ends the prompt: its last token is decoded again
    chunks = reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 512)
    assert chunks == [Chunk(src=52, dst=51, n=39)]


def test_the_gaps_are_bounded():
    cached = PREFIX + A + B
    prompt = PREFIX + seq(9000, 30) + A + seq(9100, 30) + B + [1]
    assert len(reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 512)) == 2
    assert [c.src for c in reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 45)] == [50]   # B's gap too long
    assert reuse_chunks(cached, prompt, 50, 16, len(prompt) - 1, 20) == []


def test_nothing_after_the_prefix_or_nothing_shared():
    assert reuse_chunks(PREFIX, PREFIX + [1, 2], 50, 16, 51, 512) == []
    assert reuse_chunks(PREFIX + A, PREFIX + B + [1], 50, 16, 90, 512) == []
    big = np.arange(20000, dtype=np.int32)
    prompt = np.concatenate([big[:100], [1, 2, 3], big[103:], [7]]).astype(np.int32)
    chunks = reuse_chunks(big, prompt, 100, 256, len(prompt) - 1, 512)
    assert chunks == [Chunk(src=103, dst=103, n=19897)]   # equal-length replacement: the chunk stays in place
