"""Context checkpoints on recurrent and hybrid models (tests/support/gguf_families.py: mamba, rwkv7, qwen3next, lfm2,
granitehybrid, plus a sliding-window gemma2), in a real runner on llama.cpp (CPU, 1 thread). Random weights: the
text is noise, but the memory paths are real. A chat's next turn continues from a checkpoint near the end of the
previous prompt (or from the slot's state itself when the reply's tokens come back unchanged); a prompt edited
inside its history continues from a checkpoint before the edit; a conversation that lost its slot comes back from
host RAM with its checkpoints. Every answer is compared with a cold run (cache_prompt=False): the same greedy
tokens, so a state restored at the wrong position (or a partial match served without a checkpoint) fails."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.gguf.model_info import read_model_info
from app.engine.planner.memory import checkpoint_bytes
from app.engine.runner.cache.prompt_cache import END_BACKOFF
from engine_util import cpu_layout
from gguf_factory import write_family

FAMILIES = ("mamba", "rwkv7", "qwen3next", "lfm2", "granitehybrid", "gemma2")
_ids = itertools.count()


def run(coro, timeout=300):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def chat(messages, **kw) -> P.GenerateRequest:
    return P.GenerateRequest(id=f"ck{next(_ids)}", messages=messages, num_predict=6,
                             sampling=P.SamplingParams(temperature=0.0, repeat_penalty=1.0), **kw)


async def ask(c, messages, **kw):
    events = [e async for e in c.generate(chat(messages, **kw))]
    return "".join(e.text for e in events if isinstance(e, P.TokenEvent)), events[-1]


async def warm_and_cold(c, messages):
    """(text, done) with the cache, then the same request cold; asserts they agree."""
    text, done = await ask(c, messages)
    cold_text, cold = await ask(c, messages, cache_prompt=False)
    assert cold.cached_tokens == 0
    assert (text, done.completion_tokens) == (cold_text, cold.completion_tokens), (text, cold_text)
    return text, done


EDIT = "An edited question about lanterns and harbours."


def user(i: int) -> str:
    return f"Message {i}: tell me about the river and the mountain number {i}, briefly."


def runner(path, num_parallel=2, cache_mib=16):
    n_layer = read_model_info(path).n_layer
    return RunnerClient(cpu_layout(path, num_ctx=1024, num_parallel=num_parallel, n_batch=64, n_layer=n_layer),
                        n_threads=1, model_name=path.stem, prompt_cache_bytes=cache_mib << 20)


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ckpt-families")


@pytest.mark.parametrize("name", FAMILIES)
def test_chat_turns_continue_from_checkpoints_and_match_cold_runs(family_dir, name):
    path = write_family(name, family_dir)

    async def go():
        c = runner(path)
        await c.start()
        try:
            msgs, turns = [], []
            for i in range(4):
                msgs.append({"role": "user", "content": user(i)})
                text, done = await warm_and_cold(c, msgs)
                turns.append(done)
                msgs.append({"role": "assistant", "content": text})
            # an edit inside the history (the second user message): back to a checkpoint before the edit
            edited = [dict(m) for m in msgs[:5]]
            edited[2]["content"] = EDIT
            _, done_edit = await warm_and_cold(c, edited)
            # where the edit ends at the latest: the conversation up to the edited message, less its text
            edit_end = await c.count_prompt(chat(edited[:3])) - len(await c.tokenize(EDIT, add_special=False))
            return turns, (done_edit, edit_end), await c.stats()
        finally:
            await c.close()

    turns, edit, st = run(go())
    if name != "gemma2":        # the planner's bytes per checkpoint: what llama.cpp really copies (+ its headers)
        info = read_model_info(path)
        one = checkpoint_bytes(info, 1024, 1, count=1)
        assert one <= st.checkpoint_bytes / st.checkpoints <= one * 1.02 + 16384, (one, st.checkpoint_bytes)
    for prev, cur in zip(turns, turns[1:]):
        # all of the previous turn but (at most) its last few prompt tokens: the reply and the new message
        # are what is processed (everything but the new message when the reply's tokens survive the round trip)
        assert cur.cached_tokens >= prev.prompt_tokens - END_BACKOFF, [(t.prompt_tokens, t.cached_tokens)
                                                                       for t in turns]
    edit, edit_end = edit
    assert 0 < edit.cached_tokens < edit_end           # a checkpoint before the edit, none after it
    assert st.checkpoints > 0 and st.checkpoint_bytes > 0
    if name != "gemma2":        # its window still holds these short prompts: the slot continues without one
        assert st.checkpoint_hits >= 1


@pytest.mark.parametrize("name", ["qwen3next", "mamba"])
def test_host_ram_cache_brings_a_conversation_back_with_its_checkpoints(family_dir, name):
    """One slot: conversation A, then B takes the slot (A's state and checkpoints go to host RAM), then A comes
    back with a reply that differs from what was generated, so only a checkpoint can continue it."""
    path = family_dir / f"{name}.gguf"
    if not path.exists():
        write_family(name, family_dir)

    async def go():
        c = runner(path, num_parallel=1, cache_mib=32)
        await c.start()
        try:
            a = [{"role": "user", "content": user(1) + " " + user(2) + " " + user(3)}]
            _, done_a = await ask(c, a)
            await ask(c, [{"role": "user", "content": "Something else entirely, about a harbour and a bridge."}])
            a2 = a + [{"role": "assistant", "content": "A reply the model did not write."},
                      {"role": "user", "content": user(4)}]
            _, warm = await warm_and_cold(c, a2)
            return done_a, warm, await c.stats()
        finally:
            await c.close()

    done_a, warm, st = run(go())
    assert done_a.prompt_tokens - END_BACKOFF <= warm.cached_tokens <= done_a.prompt_tokens
    assert st.prompt_cache_entries >= 1 and st.checkpoint_hits >= 1


def test_without_checkpoints_a_diverging_prompt_is_processed_again(family_dir):
    """Checkpoints off (count 0): a recurrent model never continues from a partial match."""
    path = family_dir / "lfm2.gguf"
    if not path.exists():
        write_family("lfm2", family_dir)
    n_layer = read_model_info(path).n_layer
    layout = cpu_layout(path, num_ctx=1024, num_parallel=1, n_batch=64, n_layer=n_layer)
    from dataclasses import replace
    layout = replace(layout, options=replace(layout.options, ctx_checkpoints=0))

    async def go():
        c = RunnerClient(layout, n_threads=1, model_name="lfm2", prompt_cache_bytes=0)
        await c.start()
        try:
            a = [{"role": "user", "content": " ".join(user(i) for i in range(1, 5))}]   # over MIN_SAVE_TOKENS
            await ask(c, a)
            a2 = a + [{"role": "assistant", "content": "A reply the model did not write."},
                      {"role": "user", "content": user(3)}]
            _, warm = await warm_and_cold(c, a2)
            return warm, await c.stats()
        finally:
            await c.close()

    warm, st = run(go())
    assert warm.cached_tokens == 0 and st.checkpoints == 0 and st.checkpoint_misses >= 1


def test_the_plan_holds_the_checkpoint_memory(family_dir):
    """The CPU plan's `checkpoints`: count x one sequence's partial memory x slots, within the per-slot bound;
    nothing for a model whose KV cache keeps every cell."""
    from app.discovery.inventory import Inventory
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions

    inv = Inventory(devices=(), host_ram_total=64 << 30, host_ram_available=32 << 30, cpu_name="test", cpu_cores=2)
    for name, expect_some in (("qwen3next", True), ("mamba", True), ("gemma2", True), ("llama", False)):
        path = family_dir / f"{name}.gguf"
        if not path.exists():
            write_family(name, family_dir)
        info = read_model_info(path)
        one = checkpoint_bytes(info, 2048, 1, count=1)
        assert (one > 0) == expect_some, name
        for count, mib in ((32, 1024), (32, 0), (4, 0), (0, 1024), (32, 1)):
            lay = plan(info, inv, PlanOptions(num_ctx=2048, num_parallel=3, ctx_checkpoints=count,
                                              checkpoint_mib=mib))
            cpu = next(d for d in lay.devices if d.device_id == "CPU")
            per_slot = count * one if not mib else min(count * one, mib << 20)
            assert cpu.checkpoints == 3 * per_slot, (name, count, mib)
            assert cpu.total >= cpu.checkpoints + cpu.kv


def test_sliding_window_model_continues_from_a_checkpoint(tmp_path):
    """A window-sized SWA cache (window 32) drops the cells older than the window as a long prompt is decoded, so
    a prompt that diverges from the slot's tokens far before their end (another long last message after the same
    history) can only continue from a checkpoint, the one taken before the last user message; and gives what a
    cold run gives."""
    path = write_family("gemma2", tmp_path, window=32)
    long_a = " ".join(user(i) for i in range(12))
    long_b = " ".join(user(i) for i in range(30, 42))

    async def go():
        c = runner(path, num_parallel=1, cache_mib=0)
        await c.start()
        try:
            head = [{"role": "user", "content": long_a}, {"role": "assistant", "content": "Noted."}]
            _, first = await ask(c, head + [{"role": "user", "content": long_b}])
            _, warm = await warm_and_cold(c, head + [{"role": "user", "content": user(50)}])
            n_head = await c.count_prompt(chat(head[:1]))
            return first, warm, n_head, await c.stats()
        finally:
            await c.close()

    first, warm, n_head, st = run(go())
    assert first.prompt_tokens > 500
    assert n_head < warm.cached_tokens < first.prompt_tokens - 200      # up to the last user message's start
    assert st.checkpoint_hits >= 1
