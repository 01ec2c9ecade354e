"""The prompt cache's parts in-process (app/engine/runner/cache/stores.py): which free slot a prompt goes to, which
slot to give up, the context checkpoints' bounds and lookup, and the host-RAM store of sequence states on a real
llama.cpp context of a tiny synthetic model (no runner process): a saved state, restored into another slot, gives
the same next-token logits as the slot it came from. tests/integration/engine/test_prompt_cache.py checks the
whole path in a runner."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from engine_util import cleared_memory, llama_context
from engine_util import decode_logits as decode, token_prompt as prompt
from app.engine.runner.cache.stores import (MIN_SAVE_TOKENS, Checkpoint, Checkpoints, HostPromptCache, SlotCache,
                                            common_prefix)

N_SEQ = 3


def test_common_prefix_of_lists_and_arrays():
    assert common_prefix([1, 2, 3, 4], [1, 2, 9]) == 2
    assert common_prefix(np.array([1, 2, 3], dtype=np.int32), [1, 2, 3, 4]) == 3
    assert common_prefix([5, 2], [1, 2]) == 0
    assert common_prefix([], [1]) == common_prefix([1], []) == 0
    assert common_prefix(list(range(1000)), list(range(1000))) == 1000


# ---- SlotCache: which slot a prompt goes to ---------------------------------------------------------------------

def cache_with(*contents, last_used=None) -> SlotCache:
    c = SlotCache(len(contents))
    for i, toks in enumerate(contents):
        c.tokens[i] = list(toks)
        c.last_used[i] = (last_used or [float(i)] * len(contents))[i]
    return c


def test_the_longest_common_prefix_wins():
    c = cache_with([1, 2, 3], [1, 2, 3, 4, 5], [1, 9])
    assert c.choose([1, 2, 3, 4, 7], [0, 1, 2]) == (1, 4)
    assert c.choose([1, 2, 3, 4, 7], [0, 2]) == (0, 3)          # only free slots count


def test_among_equals_the_least_recently_used_and_an_empty_slot_before_any_cached_one():
    c = cache_with([1, 2, 8], [1, 2, 9], [], last_used=[20.0, 10.0, 0.0])
    assert c.choose([1, 2, 3], [0, 1]) == (1, 2)                # same prefix: slot 1 was used longer ago
    assert c.choose([7, 7], [0, 1, 2]) == (2, 0)                # nothing shared: the empty slot, keeping the others
    assert c.choose([7, 7], [0, 1]) == (1, 0)


def test_limit_and_usable_bound_the_reuse():
    c = cache_with([1, 2, 3, 4, 5, 6], [1, 2, 3, 4])
    assert c.choose([1, 2, 3, 4, 5, 6, 7], [0, 1], limit=3) == (0, 3)   # capped equal: slot 0, used longer ago
    # a recurrent state continues only from its end or a checkpoint: slot 0 from 2 tokens, slot 1 from all 4
    assert c.choose([1, 2, 3, 4, 5, 6, 7], [0, 1], usable=lambda slot, n: 2 if slot == 0 else n) == (1, 4)


def test_victim_is_an_empty_slot_else_the_least_recently_used():
    c = cache_with([1], [], [2], last_used=[5.0, 0.0, 3.0])
    assert c.victim([0, 1, 2]) == 1
    assert c.victim([0, 2]) == 2
    c.keep(1, [4, 4])                                           # now the most recently used
    assert c.tokens[1] == [4, 4] and c.victim([0, 1, 2]) == 2


def test_forget_empties_a_slot_and_its_sharing():
    c = cache_with([1], [2])
    c.shared.update({0, 1})
    c.forget(0)
    assert c.tokens == [[], [2]] and c.shared == {1}
    c.forget_all()
    assert c.tokens == [[], []] and c.shared == set()


# ---- Checkpoints: bounds and lookup (the copies themselves are bytes llama.cpp made; here, any bytes) --------------

def cp(n: int, size: int = 10) -> Checkpoint:
    return Checkpoint(n, bytes(size), size)


def test_checkpoints_are_sorted_and_the_latest_before_a_position_is_used():
    c = Checkpoints(None, 2, max_count=8, max_bytes=0)
    assert c.enabled and not Checkpoints(None, 1, 0, 0).enabled
    c.give(0, [cp(300), cp(100), cp(200)])
    assert [x.n for x in c.of(0)] == [100, 200, 300] and c.last_n(0) == 300 and c.last_n(1) == 0
    assert c.best(0, 250).n == 200 and c.best(0, 300).n == 300 and c.best(0, 99) is None
    assert c.best([cp(0), cp(50)], 60).n == 50 and c.best([cp(0)], 10) is None   # position 0 is no checkpoint
    assert c.has(0, 200) and not c.has(1, 200)
    assert (c.count, c.bytes) == (3, 30)
    c.cut(0, 250)
    assert [x.n for x in c.of(0)] == [100, 200]
    c.clear(0)
    assert c.count == 0


def test_the_count_bound_keeps_the_newest_and_spreads_the_rest():
    c = Checkpoints(None, 1, max_count=3, max_bytes=0)
    c.give(0, [cp(n) for n in (100, 200, 210, 400, 800)])
    kept = [x.n for x in c.of(0)]
    assert len(kept) == 3 and kept[-1] == 800, kept
    assert kept == [200, 400, 800], kept            # 210 (10 after 200) then 100 (100 after 0) were the closest


def test_the_byte_bound_drops_checkpoints_but_never_the_newest():
    c = Checkpoints(None, 1, max_count=10, max_bytes=25)
    c.give(0, [cp(100, 10), cp(200, 10), cp(300, 10)])
    assert [x.n for x in c.of(0)] == [200, 300] and c.bytes == 20
    c.give(0, [cp(100, 10), cp(500, 40)])            # one alone over the bound: the newest stays anyway
    assert [x.n for x in c.of(0)] == [500]
    c.clear_all()
    assert c.count == 0


# ---- HostPromptCache on a real context ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama(dense_gguf):
    with llama_context(dense_gguf, n_ctx=256 * N_SEQ, n_batch=256, n_seq=N_SEQ) as (_, ctx):
        yield ctx


@pytest.fixture
def mem(llama):
    return cleared_memory(llama)


def test_a_saved_state_restored_into_another_slot_continues_identically(llama, mem):
    toks = prompt(80)
    decode(llama, toks, 0)
    host = HostPromptCache(llama, limit=64 << 20)
    assert host.save(0, toks)
    (entry,) = host.entries
    assert host.bytes == entry.size > 0
    assert host.best(toks[:50] + [1, 2]) == (entry, 50)
    assert host.best(toks, limit=40) == (entry, 40)
    assert host.best(prompt(80, salt=1))[1] < 5

    assert L.llama_memory_seq_pos_max(mem, 1) == -1            # slot 1 is empty
    assert host.restore(entry, 1)
    assert host.entries == [] and host.bytes == 0              # the slot holds it now
    assert L.llama_memory_seq_pos_max(mem, 1) == 79
    a, b = decode(llama, [42], 0, 80), decode(llama, [42], 1, 80)
    assert np.allclose(a, b, atol=1e-4), float(np.abs(a - b).max())


def test_short_prompts_and_a_zero_limit_are_not_saved(llama, mem):
    toks = prompt(MIN_SAVE_TOKENS)
    decode(llama, toks, 0)
    assert not HostPromptCache(llama, limit=0).save(0, toks)
    assert not HostPromptCache(llama, limit=64 << 20).save(0, toks[:-1])
    assert not HostPromptCache(llama, limit=1000).save(0, toks)   # the state alone is over the bound
    assert HostPromptCache(llama, limit=64 << 20).save(0, toks)


def test_a_longer_state_supersedes_its_prefix_and_a_covered_one_is_not_saved_twice(llama, mem):
    toks = prompt(120)
    decode(llama, toks[:70], 0)
    host = HostPromptCache(llama, limit=64 << 20)
    assert host.save(0, toks[:70])
    decode(llama, toks[70:], 0, 70)
    assert host.save(0, toks)
    assert [len(e.tokens) for e in host.entries] == [120]
    assert host.save(0, toks[:100])                            # already held by the 120-token entry
    assert [len(e.tokens) for e in host.entries] == [120]


def test_the_byte_bound_evicts_the_least_recently_used(llama, mem):
    a, b = prompt(80, salt=3), prompt(80, salt=4)
    decode(llama, a, 0)
    decode(llama, b, 1)
    one = L.llama_state_seq_get_size(llama, 0)
    host = HostPromptCache(llama, limit=int(one * 1.5))        # room for one state
    assert host.save(0, a) and host.save(1, b)
    assert [e.tokens for e in host.entries] == [b] and host.bytes <= host.limit
    host.clear()
    assert (host.entries, host.bytes) == ([], 0)
