"""The prompt cache in a real runner (SmolLM2 on llama.cpp, CPU, 1 thread): a request reuses the KV cells of the
longest common token prefix (a slot's finished sequence, the host-RAM cache, or a running sequence's prefix) and
decodes only the rest, and the result is what a cold run gives: same tokens at temperature 0, logprobs equal
within float noise. Cold runs are the same requests with cache_prompt=False (nothing reused)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.runner.batch import NpBatch
from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.sequence import Seq
from engine_util import assert_greedy_agrees, cancel_stream, collect, cpu_layout, greedy, request_id, run
from gguf_families import write_gemma2, write_mamba

# Cached cells were computed in other batch shapes than a cold run's (a reply one token per step, a prompt in one
# batch): llama.cpp rounds differently per shape (engine_util.LOGPROB_NOISE), so warm and cold agree as
# assert_greedy_agrees says; a cache bug (a wrong position, a stale or missing cell) changes confident tokens or
# moves logprobs by whole nats.


def rid():
    return request_id("pc")


def chat(messages, **kw) -> P.GenerateRequest:
    kw.setdefault("num_predict", 12)
    kw.setdefault("top_logprobs", 5)
    return P.GenerateRequest(id=rid(), messages=messages, sampling=greedy(), logprobs=True, **kw)


def assert_same_as_cold(warm, cold):
    """The warm reply is the cold one: the same prompt, and the same tokens up to a near-tie (assert_greedy_agrees;
    where none came, the same text and count)."""
    (t1, d1, lp1), (t2, d2, lp2) = warm, cold
    assert d2.cached_tokens == 0 and d1.prompt_tokens == d2.prompt_tokens
    if assert_greedy_agrees(lp2, lp1) == len(lp2):
        assert t1 == t2 and d1.completion_tokens == d2.completion_tokens


def user(i: int) -> str:
    return f"Question {i}: name three things you can find in a kitchen, and say why a cook needs each of them."


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def start(loop, path, *, num_ctx=2048, num_parallel=2, cache_mib=64, n_batch=512):
    c = RunnerClient(cpu_layout(path, num_ctx=num_ctx, num_parallel=num_parallel, n_batch=n_batch), n_threads=1,
                     model_name="smollm2", prompt_cache_bytes=cache_mib << 20)
    run(loop, c.start())
    return c


@pytest.fixture(scope="module")
def runner(loop, smollm2_path):
    c = start(loop, smollm2_path)
    yield c
    run(loop, c.close())


def test_next_turn_decodes_only_the_new_suffix_and_matches_a_cold_run(loop, runner):
    msgs = [{"role": "user", "content": user(1)}]
    text1, done1, _ = run(loop, collect(runner, chat(msgs, num_predict=20)))
    assert done1.reason == "length"
    msgs2 = msgs + [{"role": "assistant", "content": text1}, {"role": "user", "content": user(2)}]
    # an embedding request in between (a side context on a generative model) must not disturb the cells
    run(loop, runner.embed(P.EmbedRequest(id=rid(), inputs=["kitchen"])))
    warm = run(loop, collect(runner, chat(msgs2)))
    done2 = warm[1]
    assert done2.cached_tokens >= done1.prompt_tokens           # the whole first turn came from the slot
    assert done2.prompt_tokens > done2.cached_tokens            # ... and the new suffix was decoded
    cold = run(loop, collect(runner, chat(msgs2, cache_prompt=False)))
    assert_same_as_cold(warm, cold)
    st = run(loop, runner.stats())
    assert st.cache_hit_tokens >= done2.cached_tokens


def test_generate_with_context_continues_from_the_cache(loop, runner):
    first = P.GenerateRequest(id=rid(), prompt="The three primary colours are", raw=True, sampling=greedy(),
                              num_predict=10)
    _, done1, _ = run(loop, collect(runner, first))
    ctx = done1.context_tokens
    # prompt + every token of the reply, the last one (sampled, never decoded: the limit ended it) included
    assert done1.reason == "length" and len(ctx) == done1.prompt_tokens + done1.completion_tokens == \
        done1.prompt_tokens + 10

    def follow(**kw):
        return P.GenerateRequest(id=rid(), prompt=" Another colour is", raw=True, context=ctx, sampling=greedy(),
                                 num_predict=10, logprobs=True, top_logprobs=5, **kw)

    warm = run(loop, collect(runner, follow()))
    assert warm[1].cached_tokens == len(ctx) - 1        # all but the reply's last token, sampled and never decoded
    assert warm[1].prompt_tokens > len(ctx)
    assert_same_as_cold(warm, run(loop, collect(runner, follow(cache_prompt=False))))
    bad = P.GenerateRequest(id=rid(), prompt="x", raw=True, context=[10 ** 9], sampling=greedy())
    with pytest.raises(Exception, match="context"):
        run(loop, collect(runner, bad))


def test_grammar_and_logprobs_requests_on_a_cached_prefix(loop, runner):
    msgs = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": user(3)}]
    run(loop, collect(runner, chat(msgs, num_predict=8)))
    warm = run(loop, collect(runner, chat(msgs, json_mode=True, top_logprobs=3)))
    assert warm[1].cached_tokens > 0
    assert_same_as_cold(warm, run(loop, collect(runner, chat(msgs, json_mode=True, top_logprobs=3,
                                                             cache_prompt=False))))


def test_a_cancelled_request_leaves_reusable_cells(loop, runner):
    msgs = [{"role": "user", "content": user(4) + " Take your time and write a lot."}]

    async def cancel_after_tokens():
        agen = runner.generate(chat(msgs, num_predict=200))
        n = 0
        while n < 3:
            ev = await agen.__anext__()
            n += isinstance(ev, P.TokenEvent)
        await cancel_stream(agen, asyncio.ensure_future(agen.__anext__()))

    run(loop, cancel_after_tokens())
    warm = run(loop, collect(runner, chat(msgs)))
    assert warm[1].cached_tokens > 0
    assert_same_as_cold(warm, run(loop, collect(runner, chat(msgs, cache_prompt=False))))


def test_parallel_requests_share_a_long_system_prompt(loop, smollm2_path):
    c = start(loop, smollm2_path, num_ctx=1024, num_parallel=4)
    try:
        system = " ".join(f"Rule {i}: always mention the number {i * 7} when asked about rule {i}." for i in range(30))
        convs = [[{"role": "system", "content": system}, {"role": "user", "content": user(10 + k)}] for k in range(4)]

        async def together():
            return await asyncio.gather(*(collect(c, chat(m)) for m in convs))

        warm = run(loop, together())
        shared = [r[1].cached_tokens for r in warm]
        n_system = min(r[1].prompt_tokens for r in warm) - 40       # the system prompt: most of each prompt
        assert sum(n >= n_system for n in shared) >= 3, shared      # computed once, copied to the others
        for w, m in zip(warm, convs):
            assert_same_as_cold(w, run(loop, collect(c, chat(m, cache_prompt=False))))
    finally:
        run(loop, c.close())


def test_requests_arriving_together_copy_a_running_sequences_prefix(loop, smollm2_path):
    """Two requests reach the runner together while a third, with the same system prompt, is generating: both
    copy its cells in the same scheduling round (the second copy waits for llama.cpp to do the first)."""
    c = start(loop, smollm2_path, num_ctx=1024, num_parallel=3)
    try:
        system = " ".join(f"Fact {i}: the {i}th lantern is painted {['red', 'blue', 'green'][i % 3]}." for i in range(25))
        convs = [[{"role": "system", "content": system}, {"role": "user", "content": user(30 + k)}] for k in range(3)]

        async def scenario():
            agen = c.generate(chat(convs[0], num_predict=60))
            first = [await agen.__anext__()]                     # the running sequence has computed the prefix
            both = asyncio.gather(*(collect(c, chat(m)) for m in convs[1:]))
            rest = [ev async for ev in agen]
            return first + rest, await both

        _, warm = run(loop, scenario())
        assert all(w[1].cached_tokens > 100 for w in warm), [w[1].cached_tokens for w in warm]
        for w, m in zip(warm, convs[1:]):
            assert_same_as_cold(w, run(loop, collect(c, chat(m, cache_prompt=False))))
    finally:
        run(loop, c.close())


@pytest.mark.parametrize("cache_mib", [64, 0], ids=["host-cache", "no-host-cache"])
def test_host_ram_cache_restores_a_conversation_that_lost_its_slot(loop, smollm2_path, cache_mib):
    c = start(loop, smollm2_path, num_ctx=1024, num_parallel=1, cache_mib=cache_mib)
    try:
        a = [{"role": "user", "content": user(20) + " First conversation."}]
        b = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": user(21) + user(23)}]
        text_a, done_a, _ = run(loop, collect(c, chat(a)))
        run(loop, collect(c, chat(b)))                               # takes the only slot
        a2 = a + [{"role": "assistant", "content": text_a}, {"role": "user", "content": user(22)}]
        warm = run(loop, collect(c, chat(a2)))
        st = run(loop, c.stats())
        if cache_mib:
            assert warm[1].cached_tokens >= done_a.prompt_tokens    # restored from host RAM
            assert st.prompt_cache_entries >= 1 and 0 < st.prompt_cache_bytes <= st.prompt_cache_limit
        else:
            assert warm[1].cached_tokens < done_a.prompt_tokens
            assert st.prompt_cache_bytes == 0 and st.prompt_cache_limit == 0
        assert_same_as_cold(warm, run(loop, collect(c, chat(a2, cache_prompt=False))))
    finally:
        run(loop, c.close())


@pytest.mark.parametrize("env", [{}, {"STRATA_TEST_NO_SHIFT": "1"}], ids=["shift", "reprocess"])
def test_after_a_context_shift_only_exact_cells_are_reused(loop, smollm2_path, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    c = start(loop, smollm2_path, num_ctx=128, num_parallel=1, n_batch=64)
    try:
        long = P.GenerateRequest(id=rid(), prompt="Tell me a long story about a dragon.", raw=True,
                                 sampling=greedy(), num_predict=300, ignore_eos=True)
        _, done, _ = run(loop, collect(c, long))
        assert done.reason == "length"

        def follow(**kw):
            return P.GenerateRequest(id=rid(), prompt=" The end.", raw=True, context=done.context_tokens[-60:],
                                     sampling=greedy(), num_predict=8, logprobs=True, top_logprobs=5, **kw)

        warm = run(loop, collect(c, follow()))
        assert_same_as_cold(warm, run(loop, collect(c, follow(cache_prompt=False))))
    finally:
        run(loop, c.close())


def write_swa_gemma2(path, window=32):
    return write_gemma2(path, n_layer=2, window=window)


def write_recurrent_mamba(path):
    return write_mamba(path, n_layer=2)


@pytest.mark.parametrize("writer", [write_swa_gemma2, write_recurrent_mamba], ids=["swa", "recurrent"])
def test_sliding_window_and_recurrent_models(loop, tmp_path, writer):
    """Random weights (the text is noise; the memory paths are real). A recurrent state holds only the end of
    its sequence: it is reused for an exact continuation, and a prompt that diverges continues from the context
    checkpoint taken near the end of the first prompt. The first token's distribution (cached cells only, no
    sampling cascade) is compared with a cold run."""
    path = writer(tmp_path / "m.gguf")
    c = RunnerClient(cpu_layout(path, num_ctx=512, num_parallel=2, n_batch=64, n_layer=2), n_threads=1,
                     model_name=path.stem, prompt_cache_bytes=16 << 20)
    run(loop, c.start())
    text = "one two three four five six seven eight nine ten " * 5
    try:
        _, first, _ = run(loop, collect(c, P.GenerateRequest(id=rid(), prompt=text, raw=True, sampling=greedy(),
                                                             num_predict=4)))
        for extra, reused in (({"context": first.context_tokens, "prompt": " eleven"}, len(first.context_tokens) - 1),
                              ({"prompt": text + "eleven"}, None)):
            def req(**kw):
                return P.GenerateRequest(id=rid(), raw=True, sampling=greedy(), num_predict=1, logprobs=True,
                                         top_logprobs=5, **extra, **kw)

            warm = run(loop, _first_token(c, req()))
            cold = run(loop, _first_token(c, req(cache_prompt=False)))
            if reused is not None:
                assert warm[0] == reused              # an exact continuation: all reused but the undecoded last token
            else:   # the common prefix of the prompt (SWA), or the checkpoint before the divergence (recurrent)
                assert 0 < warm[0] < first.prompt_tokens
            assert max(abs(a - b) for a, b in zip(warm[1], cold[1])) < 1e-3
    finally:
        run(loop, c.close())


async def _first_token(c, req):
    """-> (cached tokens, the top-5 logprobs of the first generated token)."""
    events = [ev async for ev in c.generate(req)]
    top = [t[1] for e in events if isinstance(e, P.TokenEvent) for lp in (e.logprobs or []) for t in lp.top]
    return events[-1].cached_tokens, top


def test_swa_cells_below_the_window_are_processed_again(tmp_path):
    """With a window-sized SWA cache (swa_full off, llama-server's default) the cells older than the window are
    gone: a prefix is reusable only where llama_memory_seq_pos_min says the window it needs is still held."""
    path = write_swa_gemma2(tmp_path / "swa.gguf", window=32)
    N = 600                 # tokens in the slot: more than a window-sized SWA cache holds
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    assert model
    try:
        for swa_full, partial_expected in ((False, 0), (True, 100)):
            cp = L.llama_context_default_params()
            cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.n_threads, cp.n_threads_batch = 2048, 64, 64, 2, 1, 1
            cp.swa_full = swa_full
            ctx = L.llama_init_from_model(model, cp)
            assert ctx
            try:
                toks = [100 + (i * 37) % 5000 for i in range(N)]
                b = NpBatch(64)
                for p0 in range(0, N, 50):                            # many steps, so old SWA cells are pruned
                    b.clear()
                    b.add_span(np.asarray(toks[p0:p0 + 50], dtype=np.int32), p0, 0, logits_last=True)
                    assert L.llama_decode(ctx, b.struct) == 0
                placement = PromptCache(ctx, model, 2, 0)

                def place(prompt):
                    placement.slots.keep(0, toks)
                    placement.slots.last_used[1] = -1.0
                    seq = Seq(P.GenerateRequest(id=rid()))
                    seq.prompt = np.asarray(prompt, dtype=np.int32)
                    slot = placement.place(seq, [None, None])
                    assert slot == 0 or seq.n_cached == 0     # nothing reusable: the empty slot is as good
                    return seq.n_cached

                assert place(toks + [7, 8]) == N                      # a continuation needs only the last window
                for p0 in range(0, N, 50):                            # the slot holds all N again
                    b.clear()
                    b.add_span(np.asarray(toks[p0:p0 + 50], dtype=np.int32), p0, 0, logits_last=True)
                    L.llama_memory_seq_rm(L.llama_get_memory(ctx), 0, p0, -1)
                    assert L.llama_decode(ctx, b.struct) == 0
                assert place(toks[:100] + [9, 9, 9]) == partial_expected
            finally:
                L.llama_free(ctx)
    finally:
        L.llama_model_free(model)
