"""The prompt cache on disk in-process (app/engine/runner/cache/disk_cache.py), on a real llama.cpp context of a tiny
synthetic model: a state written by one cache object and read by a new one (a restart) continues exactly as the
slot it came from; damaged, truncated and foreign files are refused and deleted before llama.cpp sees them; the
folder stays within its bound (least recently used out) and its age limit; a longer state supersedes its prefixes.
tests/integration/service/test_prompt_disk_cache.py checks the whole path across a service restart."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.cache.disk_cache import SUFFIX, DiskPromptCache, file_identity, key_of, read_header, write_file
from engine_util import cleared_memory, llama_context
from engine_util import decode_logits as decode, token_prompt as prompt

FACTS = {"model": {"sha256": "ab" * 32}, "build": {"x": 1}, "type_k": "f16", "type_v": "f16", "n_seq": 2}


@pytest.fixture(scope="module")
def llama(dense_gguf):
    with llama_context(dense_gguf, n_ctx=512, n_batch=256, n_seq=2) as (_, ctx):
        yield ctx


@pytest.fixture
def mem(llama):
    return cleared_memory(llama)


def state_of(ctx, seq: int) -> bytearray:
    import ctypes
    size = L.llama_state_seq_get_size(ctx, seq)
    buf = bytearray(size)
    assert L.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(buf), size, seq) == size
    return buf


def saved(cache: DiskPromptCache, tokens, payload) -> None:
    assert cache.save(tokens, payload, len(payload))
    assert cache.flush(30)


def test_a_state_written_by_one_runner_continues_identically_in_the_next(llama, mem, tmp_path):
    toks = prompt(120)
    decode(llama, toks, 0)
    want = decode(llama, [7, 8, 9], 0, pos0=120)
    L.llama_memory_seq_rm(mem, 0, 120, -1)
    saved(DiskPromptCache(tmp_path, FACTS, 64 << 20), toks, state_of(llama, 0))
    L.llama_memory_clear(mem, True)

    again = DiskPromptCache(tmp_path, FACTS, 64 << 20)          # a new runner: it finds the file by scanning
    entry, n = again.best(toks[:100] + [1, 2, 3])
    assert n == 100 and entry.tokens.tolist() == toks
    assert again.covered(toks) == 120 and again.bytes == entry.size > 120 * 4
    assert again.best(toks, max_len=119) == (None, 0)               # longer than a sequence's cells: never loaded
    state = again.load(entry)                                        # the file's pages, mapped: no copy
    try:
        assert state is not None and L.llama_state_seq_set_data(llama, state.pointer, len(state), 1) > 0
    finally:
        state.close()
    got = decode(llama, [7, 8, 9], 1, pos0=120)
    assert np.array_equal(got, want)                                 # the same bytes: the same logits
    path = entry.path
    path.write_bytes(path.read_bytes()[:-1000])                      # cut after it was indexed: never mapped short
    assert again.load(entry) is None and not path.exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_a_damaged_file_is_refused_and_deleted(tmp_path, damage):
    cache = DiskPromptCache(tmp_path, FACTS, 64 << 20)
    saved(cache, prompt(50), bytearray(range(256)) * 40)
    (path,) = cache.dir.glob("*" + SUFFIX)
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-100] ^= 0x40                                           # a payload byte: only the checksum can tell
    elif damage == "truncate":
        raw = raw[:-10]
    elif damage == "garbage":
        raw = bytearray(b"\x00garbage" * 100)
    else:
        raw = bytearray()
    path.write_bytes(bytes(raw))
    again = DiskPromptCache(tmp_path, FACTS, 64 << 20)
    if damage == "flip":                                            # its header is whole: it is indexed ...
        (entry,) = again.entries
        assert again.load(entry) is None                            # ... and refused when read
    assert again.entries == [] and not path.exists() and again.refused == 1


def test_a_foreign_file_is_refused_and_deleted_but_other_models_files_are_left(tmp_path):
    mine = DiskPromptCache(tmp_path, FACTS, 64 << 20)
    other_facts = dict(FACTS, build={"x": 2})                       # another llama.cpp build
    other = DiskPromptCache(tmp_path, other_facts, 64 << 20)
    saved(other, prompt(50), bytearray(4000))
    (theirs,) = other.dir.glob("*" + SUFFIX)
    intruder = mine.dir / theirs.name                               # their file in this model's folder
    intruder.write_bytes(theirs.read_bytes())
    mine.scan()
    assert mine.entries == [] and not intruder.exists() and mine.refused == 1
    assert theirs.exists() and read_header(theirs, other_facts).tokens.tolist() == prompt(50)
    assert mine.dir != other.dir and mine.key == key_of(FACTS)


def test_the_folder_is_bounded_least_recently_used_out_and_by_age(tmp_path):
    a = DiskPromptCache(tmp_path, FACTS, 26_000)
    b = DiskPromptCache(tmp_path, dict(FACTS, n_seq=4), 26_000)     # another model's files count against it too
    saved(a, prompt(10, 1), bytearray(6000))
    old = a.entries[0].path
    os.utime(old, (time.time() - 100, time.time() - 100))
    saved(b, prompt(10, 2), bytearray(6000))
    saved(a, prompt(10, 3), bytearray(6000))
    saved(b, prompt(10, 4), bytearray(6000))                        # 3 files of ~6.5 KB and the next: the oldest goes
    a.rescan_if_changed()                                           # b's writer deleted a's file: a sees it
    assert not old.exists() and len(a.entries) == 1 and len(list(b.dir.glob("*" + SUFFIX))) == 2
    aged = DiskPromptCache(tmp_path, FACTS, 26_000, max_age_s=50)
    (p,) = aged.dir.glob("*" + SUFFIX)
    os.utime(p, (time.time() - 60, time.time() - 60))
    aged.evict()
    assert not p.exists() and aged.entries == []


def test_a_longer_state_supersedes_its_prefixes_and_a_covered_one_is_known(tmp_path):
    cache = DiskPromptCache(tmp_path, FACTS, 64 << 20)
    saved(cache, prompt(50), bytearray(1000))
    saved(cache, prompt(80), bytearray(1600))
    assert [len(e.tokens) for e in cache.entries] == [80]
    assert len(list(cache.dir.glob("*" + SUFFIX))) == 1
    assert cache.covered(prompt(60)) == 60 and cache.covered(prompt(90)) == 80


def test_off_when_the_limit_is_zero_and_file_identity(tmp_path, dense_gguf):
    off = DiskPromptCache(tmp_path / "off", FACTS, 0)
    assert not off.enabled and not off.save(prompt(10), bytearray(10), 10) and not (tmp_path / "off").exists()
    blob = tmp_path / ("sha256-" + "c" * 64 + ".gguf")
    blob.write_bytes(b"x")
    assert file_identity(str(blob)) == {"sha256": "c" * 64}
    ident = file_identity(str(dense_gguf))
    assert ident["size"] == os.path.getsize(dense_gguf) and "mtime_ns" in ident
    p = tmp_path / "f.pcache"
    assert write_file(p, FACTS, np.arange(5, dtype=np.int32), bytearray(7)) == p.stat().st_size


def test_at_shutdown_the_slots_and_the_host_cache_go_to_disk(dense_gguf, tmp_path):
    """PromptCache.save_all_to_disk (runner shutdown: a reload, the app quitting): a slot's kept prefix and a host-RAM
    entry (a conversation that lost its slot) are written; one the disk holds already is not written again."""
    from app.engine.runner.cache.disk_cache import MIN_DISK_TOKENS
    from app.engine.runner.cache.prompt_cache import PromptCache

    n = MIN_DISK_TOKENS + 40
    with llama_context(dense_gguf, n_ctx=2 * 1536, n_batch=512, n_seq=2) as (model, ctx):
        disk = DiskPromptCache(tmp_path, FACTS, 256 << 20)
        pl = PromptCache(ctx, model, 2, host_cache_bytes=256 << 20, disk=disk)
        a, b = prompt(n, salt=1), prompt(n, salt=2)
        for i in range(0, n, 256):
            decode(ctx, a[i:i + 256], 0, pos0=i)
            decode(ctx, b[i:i + 256], 1, pos0=i)
        assert pl.host.save(0, a)                      # a's conversation lost its slot ...
        L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, -1, -1)
        pl.slots.keep(1, b)                            # ... b's is kept in slot 1
        assert pl.save_all_to_disk([None, None], time.monotonic() + 30) == 2
        assert disk.flush(30)
        assert pl.save_all_to_disk([None, None], time.monotonic() + 30) == 0   # both on disk already
    again = DiskPromptCache(tmp_path, FACTS, 256 << 20)
    assert sorted(len(e.tokens) for e in again.entries) == [n, n]
    assert again.best(a)[1] == n and again.best(b)[1] == n


def test_a_finished_prefix_goes_to_disk_when_idle_or_before_its_slot_is_reused(dense_gguf, tmp_path):
    """A sequence that computed a long prefix leaves its slot without waiting for the state's copy (it would hold
    back the reply's end and every other sequence's next step); the copy is made when the runner is idle
    (`save_due`, the saver's idle branch) or, at the latest, before a new sequence takes the slot."""
    from app.engine import protocol as P
    from app.engine.runner.cache.disk_cache import MIN_DISK_TOKENS
    from app.engine.runner.cache.prompt_cache import PromptCache
    from app.engine.runner.sequence import GEN, Seq

    n = MIN_DISK_TOKENS + 40
    with llama_context(dense_gguf, n_ctx=2 * 1536, n_batch=512, n_seq=2) as (model, ctx):
        disk = DiskPromptCache(tmp_path, FACTS, 256 << 20)
        pl = PromptCache(ctx, model, 2, disk=disk)

        def finished(slot: int, salt: int) -> list[int]:
            tokens = prompt(n, salt=salt)
            L.llama_memory_seq_rm(L.llama_get_memory(ctx), slot, -1, -1)
            for i in range(0, n, 256):
                decode(ctx, tokens[i:i + 256], slot, pos0=i)
            seq = Seq(P.GenerateRequest(id=f"s{salt}"))
            seq.slot, seq.state, seq.n_past, seq.history = slot, GEN, n, list(tokens)
            pl.release(seq, True, [None, None])
            return tokens

        a = finished(0, salt=1)
        assert disk.flush(30) and disk.entries == [] and pl.saver.due == {0}   # nothing copied at release
        assert pl.saver.save_due() == 1 and disk.flush(30)                       # idle: copied
        assert [len(e.tokens) for e in disk.entries] == [n] and disk.best(a)[1] == n
        assert pl.saver.save_due() == 0

        b = finished(1, salt=2)
        c = finished(0, salt=3)
        assert pl.saver.due == {0, 1}
        assert pl.saver.save_due(limit=1) == 1 and pl.saver.due == {1}      # idle: one copy per pass
        running = Seq(P.GenerateRequest(id="running"))
        pl.place(Seq(P.GenerateRequest(id="next", cache_prompt=False)), [running, None])  # reuses slot 1: b first
        assert pl.saver.due == set() and disk.flush(30)
        assert disk.best(b)[1] == n and disk.best(c)[1] == n
