"""The inference engine end to end: a real runner process with SmolLM2 on llama.cpp (CPU, 1 thread).

One runner is shared by the module (4 slots x 2048 tokens) to keep the suite fast; tests that need special
settings (tiny context, injected failures, aborts) start their own small runner.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from dataclasses import replace

import pytest

from app.discovery.host import huge_pages_usable
from app.engine import protocol as P
from app.engine.client import LoadError, RequestError, RunnerClient, RunnerError
from app.engine.runner_settings import RunnerSettings
from engine_util import assert_greedy_agrees, cancel_stream, cpu_layout

_ids = itertools.count()


def rid(prefix="r"):
    return f"{prefix}{next(_ids)}"


def greedy(**kw) -> P.SamplingParams:
    return P.SamplingParams(temperature=0.0, repeat_penalty=1.0, **kw)


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def runner(loop, smollm2_path):
    c = RunnerClient(cpu_layout(smollm2_path, num_ctx=2048, num_parallel=4, n_batch=512), n_threads=1,
                     model_name="smollm2")
    progress = []
    loop.run_until_complete(c.start(progress.append))
    c.test_progress = progress
    yield c
    loop.run_until_complete(c.close())


def run(loop, coro, timeout=120):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


async def collect(client, req):
    events = [ev async for ev in client.generate(req)]
    text = "".join(e.text for e in events if isinstance(e, P.TokenEvent))
    return text, events[-1], events


def token_logprobs(events) -> list:
    """The logprob records of a reply's tokens, in order (collect's events)."""
    return [lp for e in events if isinstance(e, P.TokenEvent) for lp in (e.logprobs or [])]


async def wait_idle(client, timeout: float = 180.0):
    """The runner's stats once no slot is busy and nothing is queued (a generous bound: a loaded 2-core machine
    can take seconds to wind a cancelled prefill down); the last stats otherwise, for the caller to assert on."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = await client.stats()
        if st.slots_busy == 0 and st.queued == 0:
            return st
        await asyncio.sleep(0.05)
    return await client.stats()


def test_runner_environment_carries_the_plans_op_offload_min_batch(loop, smollm2_path, monkeypatch):
    """The plan's GGML_OP_OFFLOAD_MIN_BATCH reaches the runner child's environment before llama.cpp loads (the GPU
    backends read it when they initialise; a CPU build ignores it): the runner reports what it had at load."""
    monkeypatch.delenv("GGML_OP_OFFLOAD_MIN_BATCH", raising=False)
    layout = replace(cpu_layout(smollm2_path, num_ctx=256, num_parallel=1, n_batch=64), op_offload_min_batch=64)
    c = RunnerClient(layout, n_threads=1, model_name="smollm2")
    try:
        loaded = run(loop, c.start())
        assert loaded.op_offload_min_batch == 64
        assert "GGML_OP_OFFLOAD_MIN_BATCH" not in os.environ      # set in the child only
    finally:
        run(loop, c.close())


def test_load_reports_progress_and_actual_allocations(runner):
    assert runner.alive and runner.pid
    assert runner.test_progress and runner.test_progress[-1] == pytest.approx(1.0)
    assert runner.test_progress == sorted(runner.test_progress)
    loaded = runner.loaded
    assert loaded.n_ctx_per_seq == 2048 and loaded.n_ctx == 8192 and loaded.n_vocab == 49152
    cpu = loaded.actual["CPU"]
    assert cpu["model"] > 90 * 2**20 and cpu["kv"] > 0 and cpu["compute"] > 0


def test_weights_read_into_memory_sit_in_huge_pages_and_decode_the_same(loop, runner, smollm2_path, monkeypatch):
    """A layout that reads its weights (load_mode "read": the planner's choice for a CPU-only plan where the host
    offers huge pages) holds the same buffers as the mapped runner, in 2 MiB pages where this host gives them (the
    client has glibc's malloc ask for them in the child's environment, and only there), and decodes the same greedy
    tokens."""
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    layout = replace(cpu_layout(smollm2_path, num_ctx=2048, num_parallel=4, n_batch=512), load_mode="read")
    c = RunnerClient(layout, n_threads=1, model_name="smollm2")
    try:
        loaded = run(loop, c.start())
        assert "GLIBC_TUNABLES" not in os.environ               # the service's other children do not inherit it
        cpu, mapped = loaded.actual["CPU"], runner.loaded.actual["CPU"]
        assert 90 * 2**20 < cpu["model"] <= mapped["model"] and cpu["kv"] == mapped["kv"]
        if os.path.exists(f"/proc/{c.pid}/maps"):                # the file is read, not mapped
            with open(f"/proc/{c.pid}/maps") as f:
                assert os.path.realpath(smollm2_path) not in f.read()
            with open(f"/proc/{runner.pid}/maps") as f:
                assert os.path.realpath(smollm2_path) in f.read()
        if huge_pages_usable():
            assert loaded.huge_pages >= cpu["model"] // 2, (loaded.huge_pages, cpu)
        req = dict(prompt="The capital of France is", raw=True, sampling=greedy(), num_predict=24, ignore_eos=True,
                   logprobs=True, top_logprobs=5)
        records = []
        for client in (runner, c):
            _, _, events = run(loop, collect(client, P.GenerateRequest(id=rid(), **req)))
            records.append([lp for e in events if isinstance(e, P.TokenEvent) and e.logprobs for lp in e.logprobs])
        assert len(records[1]) == 24 and assert_greedy_agrees(*records) > 0
    finally:
        run(loop, c.close())


def test_two_sequences_together_match_each_alone(loop, runner):
    """Two greedy replies decoded in shared batches are each the reply it gets alone: the same tokens, logprobs
    within float noise, up to a near-tie that the other batch shape may round the other way (which rows share a
    step depends on when the two requests arrive: assert_greedy_agrees)."""
    prompts = ["The capital of France is", "def fibonacci(n):"]

    def req(p):
        return P.GenerateRequest(id=rid(), prompt=p, raw=True, sampling=greedy(), num_predict=20, ignore_eos=True,
                                 logprobs=True, top_logprobs=5)

    async def go():
        alone = [await collect(runner, req(p)) for p in prompts]
        together = await asyncio.gather(*(collect(runner, req(p)) for p in prompts))
        return alone, together

    alone, together = run(loop, go())
    assert alone[0][0] != alone[1][0]
    for a, t in zip(alone, together):
        assert_greedy_agrees(token_logprobs(a[2]), token_logprobs(t[2]))


def test_long_prefill_does_not_starve_a_generating_sequence(loop, runner):
    async def go():
        words = " ".join(f"word{i}" for i in range(700))
        n_long = len(await runner.tokenize(words))
        assert n_long >= 1400
        gen = runner.generate(P.GenerateRequest(id=rid("gen"), prompt="Count: 1, 2, 3,", raw=True, sampling=greedy(),
                                                num_predict=400, ignore_eos=True))
        order = []
        await gen.__anext__()                       # the generating sequence is under way

        async def consume_gen():
            async for ev in gen:
                # a token each (an event may carry several: the stream interval merges them on a busy CPU)
                order.extend("A" * (ev.n_tokens if isinstance(ev, P.TokenEvent) else 1))
                if len(order) > 200:
                    break

        async def long_prompt():
            async for ev in runner.generate(P.GenerateRequest(id=rid("long"), prompt=words, raw=True,
                                                              sampling=greedy(), num_predict=1)):
                if not isinstance(ev, P.PromptProgress):    # its output, not how its reading goes
                    order.append("B")

        t = asyncio.ensure_future(consume_gen())
        await long_prompt()
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass
        await gen.aclose()
        return n_long, order

    n_long, order = run(loop, go())
    first_b = order.index("B")
    # the 1,400+-token prompt needs at least 3 steps of 512; each step also carried a token of the generating one
    assert order[:first_b].count("A") >= n_long // 512 - 1 >= 1


def test_cancellation_frees_the_slot(loop, runner):
    async def go():
        gen = runner.generate(P.GenerateRequest(id=rid("c"), prompt="Once upon a time", raw=True,
                                                num_predict=5000, ignore_eos=True))
        got = 0
        async for ev in gen:
            got += 1
            if got == 3:
                break
        await gen.aclose()
        st_gen = await wait_idle(runner)
        # cancel during a long prefill too (the request never produces a token)
        words = " ".join(f"item{i}" for i in range(900))
        agen = runner.generate(P.GenerateRequest(id=rid("c"), prompt=words, raw=True, num_predict=5))
        task = asyncio.ensure_future(agen.__anext__())
        await asyncio.sleep(0.05)
        await cancel_stream(agen, task)
        return st_gen, await wait_idle(runner)

    st1, st2 = run(loop, go())
    assert (st1.slots_busy, st1.queued) == (0, 0)
    assert (st2.slots_busy, st2.queued) == (0, 0)
    assert runner.in_flight == 0


def test_a_cancelled_decode_logs_no_error(loop, smollm2_path, monkeypatch, tmp_path):
    # a client's Stop aborts the running llama_decode; llama.cpp reports that at ERROR, the runner must not
    c = RunnerClient(cpu_layout(smollm2_path, num_ctx=2048, num_parallel=1, n_batch=512), n_threads=1,
                     log_dir=tmp_path, settings=RunnerSettings(log_level="DEBUG"))
    run(loop, c.start())
    log_file = tmp_path / f"runner-{c.pid}.log"
    words = " ".join(f"item{i}" for i in range(900))          # > 2,000 tokens: four 512-token decodes

    async def cancel_mid_prefill():
        agen = c.generate(P.GenerateRequest(id=rid("c"), prompt=words, raw=True, num_predict=5))
        task = asyncio.ensure_future(agen.__anext__())
        for _ in range(500):                                  # admitted: the prompt is being decoded
            if (await c.stats()).slots_busy:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        await cancel_stream(agen, task)
        return await wait_idle(c)

    try:
        # A cancel that lands between two decodes (or after the last) aborts nothing and is just as correct; try
        # until one lands mid-decode, which nearly every try does (the decodes are nearly all of the time)
        for _ in range(20):
            st = run(loop, cancel_mid_prefill())
            assert (st.slots_busy, st.queued) == (0, 0)
            if "failed to decode, ret = 2" in log_file.read_text():
                break
        text = log_file.read_text()
        _, done, _ = run(loop, collect(c, P.GenerateRequest(id=rid(), prompt="Hi", num_predict=2, ignore_eos=True)))
        assert done.completion_tokens == 2                    # and the runner serves on
    finally:
        run(loop, c.close())
    assert "llama_decode: failed to decode, ret = 2" in text                          # the abort did happen
    loud = [ln for ln in text.splitlines() if " ERROR " in ln or " CRITICAL " in ln
            or ("WARNING strata.llama" in ln and "removing memory module entries" in ln)]
    assert loud == []
    assert "DEBUG strata.llama: llama_decode: failed to decode, ret = 2" in text     # kept, at DEBUG


def test_stop_string_spanning_tokens_is_never_streamed(loop, runner):
    base = P.GenerateRequest(id="", prompt="The three primary colors are", raw=True, sampling=greedy(),
                             num_predict=30, ignore_eos=True, logprobs=True)

    async def go():
        base.id = rid()
        text, done, events = await collect(runner, base)
        toks = [lp.token for e in events if isinstance(e, P.TokenEvent) and e.logprobs for lp in e.logprobs]
        # a stop string made of the end of one token and the start of the next
        for i in range(2, len(toks) - 1):
            if len(toks[i]) >= 2 and len(toks[i + 1]) >= 2 and toks[i + 1].strip():
                stop = toks[i][1:] + toks[i + 1][:2]
                prefix_len = len("".join(toks[:i])) + 1
                break
        else:
            pytest.fail(f"no pair of multi-character tokens in {toks}")
        base.id, base.stop = rid(), [stop]
        text2, done2, events2 = await collect(runner, base)
        return text, stop, prefix_len, text2, done2, events2

    text, stop, prefix_len, text2, done2, events2 = run(loop, go())
    assert done2.reason == "stop"
    assert text.find(stop) <= prefix_len
    assert text2 == text[:text.find(stop)]
    assert stop not in text2
    streamed = "".join(e.text for e in events2 if isinstance(e, P.TokenEvent))
    assert streamed == text2                          # nothing was streamed and then taken back


def test_a_stop_string_ends_the_sequence_without_an_extra_decode(loop, runner):
    async def go():
        first = await collect(runner, P.GenerateRequest(id=rid(), prompt="The three primary colors are", raw=True,
                                                        sampling=greedy(), num_predict=12, ignore_eos=True))
        text = first[0]
        stop = text[len(text) // 2:len(text) // 2 + 3]       # three characters from the middle of the reply
        st0 = await wait_idle(runner)
        text2, done, _ = await collect(runner, P.GenerateRequest(
            id=rid(), prompt="The three primary colors are", raw=True, sampling=greedy(), num_predict=12,
            ignore_eos=True, stop=[stop]))
        st1 = await wait_idle(runner)
        return text, stop, text2, done, st1.steps - st0.steps

    text, stop, text2, done, steps = run(loop, go())
    assert stop.strip() and done.reason == "stop" and text2 == text[:text.find(stop)]
    assert done.completion_tokens < 12
    # one decode for the short prompt (it samples the first token), then one per later token: the token that
    # completed the stop string is never decoded
    assert steps == done.completion_tokens, (steps, done.completion_tokens)


def test_json_schema_output_parses_and_matches(loop, runner):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    req = P.GenerateRequest(id=rid(), messages=[{"role": "user", "content": "Invent a person. Reply in JSON."}],
                            sampling=greedy(), num_predict=80, json_schema=schema)
    text, done, _ = run(loop, collect(runner, req))
    obj = json.loads(text)
    assert set(obj) == {"name", "age"}
    assert isinstance(obj["name"], str) and isinstance(obj["age"], int)
    req = P.GenerateRequest(id=rid(), messages=[{"role": "user", "content": "Is the sky blue? Answer as JSON with a key answer."}],
                            sampling=greedy(), num_predict=80, json_mode=True)
    text, done, _ = run(loop, collect(runner, req))
    assert done.reason == "stop"
    json.loads(text)


def test_logprobs_are_log_probabilities(loop, runner):
    req = P.GenerateRequest(id=rid(), prompt="The capital of France is", raw=True, sampling=greedy(),
                            num_predict=8, ignore_eos=True, logprobs=True, top_logprobs=20)
    text, done, events = run(loop, collect(runner, req))
    lps = [lp for e in events if isinstance(e, P.TokenEvent) and e.logprobs for lp in e.logprobs]
    assert len(lps) == done.completion_tokens == 8
    assert "".join(lp.token for lp in lps) == text
    for lp in lps:
        assert lp.logprob <= 0 and len(lp.top) == 20
        assert lp.top[0][0] == lp.token and lp.top[0][1] == pytest.approx(lp.logprob)   # greedy = argmax
        values = [t[1] for t in lp.top]
        assert values == sorted(values, reverse=True)
        assert sum(2.718281828459045 ** v for v in values) <= 1.0 + 1e-9
        assert bytes(lp.bytes).decode("utf-8", "replace") == lp.token


def test_seeded_sampling_is_reproducible_and_options_apply(loop, runner):
    def req(seed, **kw):
        return P.GenerateRequest(id=rid(), prompt="Write a word:", raw=True, num_predict=12, ignore_eos=True,
                                 sampling=P.SamplingParams(temperature=1.0, seed=seed, **kw))

    async def go():
        a = (await collect(runner, req(7)))[0]
        b = (await collect(runner, req(7)))[0]
        c = (await collect(runner, req(7, mirostat=2)))[0]
        # a huge bias on one token forces it
        tok = (await runner.tokenize(" banana", add_special=False))[0]
        d = (await collect(runner, req(7, logit_bias={tok: 100.0}, repeat_penalty=1.0)))[0]
        return a, b, c, d

    a, b, c, d = run(loop, go())
    assert a == b and a
    assert c
    assert d == " banana" * 12


def test_repeat_penalty_covers_the_prompt(loop, runner):
    # greedy continues the pattern with " blue", a token of the prompt; llama-server and Ollama feed the prompt to
    # the penalties sampler, so a strong repeat penalty must steer the very first token away from the prompt
    prompt = "red, green, blue, red, green, blue, red, green,"

    def req(**kw):
        return P.GenerateRequest(id=rid(), prompt=prompt, raw=True, num_predict=1, ignore_eos=True,
                                 sampling=P.SamplingParams(temperature=0.0, **kw))

    async def go():
        toks = await runner.tokenize(prompt)
        plain = (await collect(runner, req(repeat_penalty=1.0)))[0]
        penalised = (await collect(runner, req(repeat_penalty=3.0)))[0]
        # a window of 4 prompt tokens (" red", ",", " green", ",") does not reach back to " blue"
        short_window = (await collect(runner, req(repeat_penalty=3.0, repeat_last_n=4)))[0]
        presence = (await collect(runner, req(repeat_penalty=1.0, presence_penalty=20.0)))[0]
        pieces = {t: (await runner.tokenize(t, add_special=False)) for t in (plain, penalised, presence)}
        return toks, plain, penalised, short_window, presence, pieces

    toks, plain, penalised, short_window, presence, pieces = run(loop, go())
    assert plain == " blue" and pieces[plain][0] in toks
    assert pieces[penalised][0] not in toks, penalised
    assert pieces[presence][0] not in toks, presence
    assert short_window == " blue"


def test_bad_requests_get_clear_errors_and_the_runner_survives(loop, runner):
    async def go():
        errors = []
        for bad in (P.GenerateRequest(id=rid(), prompt="x", sampling=P.SamplingParams(temperature=-1)),
                    P.GenerateRequest(id=rid(), prompt="x", top_logprobs=50, logprobs=True),
                    P.GenerateRequest(id=rid()),
                    P.GenerateRequest(id=rid(), prompt="x", sampling=P.SamplingParams(logit_bias={10**9: 1.0}))):
            with pytest.raises(RequestError) as ei:
                await collect(runner, bad)
            errors.append(str(ei.value))
        ok = await collect(runner, P.GenerateRequest(id=rid(), prompt="Hi", num_predict=3, ignore_eos=True))
        return errors, ok

    errors, ok = run(loop, go())
    assert "temperature" in errors[0] and "top_logprobs" in errors[1] and "prompt or messages" in errors[2]
    assert "logit_bias" in errors[3]
    assert ok[1].reason == "length" and ok[1].completion_tokens == 3


def test_chat_template_from_the_gguf_and_raw_mode(loop, runner):
    async def go():
        chat = await collect(runner, P.GenerateRequest(id=rid(), messages=[{"role": "user", "content": "Hello!"}],
                                                       sampling=greedy(), num_predict=5, ignore_eos=True))
        gen = await collect(runner, P.GenerateRequest(id=rid(), prompt="Hello!", sampling=greedy(), num_predict=5,
                                                      ignore_eos=True))
        raw = await collect(runner, P.GenerateRequest(id=rid(), prompt="Hello!", raw=True, sampling=greedy(),
                                                      num_predict=5, ignore_eos=True))
        return chat, gen, raw

    chat, gen, raw = run(loop, go())
    assert chat[1].prompt_tokens == gen[1].prompt_tokens > raw[1].prompt_tokens == 2
    assert chat[0] == gen[0]                     # same rendered prompt through the template
    assert gen[1].context_tokens[:gen[1].prompt_tokens] != raw[1].context_tokens[:2]

    # a request that does not ask for the context (every dialect but Ollama's generate) ends without it
    plain = run(loop, collect(runner, P.GenerateRequest(id=rid(), prompt="Hello!", raw=True, sampling=greedy(),
                                                        num_predict=5, ignore_eos=True, want_context=False)))
    assert plain[1].context_tokens is None and plain[0] == raw[0] and plain[1].completion_tokens == 5


def test_embeddings_are_deterministic_and_normalised(loop, runner):
    async def go():
        a = await runner.embed(P.EmbedRequest(id=rid(), inputs=["hello world", "the sky is blue"]))
        b = await runner.embed(P.EmbedRequest(id=rid(), inputs=["hello world"]))
        raw = await runner.embed(P.EmbedRequest(id=rid(), inputs=["hello world"], normalize=False))
        long_text = "word " * 3000
        cut = await runner.embed(P.EmbedRequest(id=rid(), inputs=[long_text]))
        with pytest.raises(RequestError, match="truncate"):
            await runner.embed(P.EmbedRequest(id=rid(), inputs=[long_text], truncate=False))
        return a, b, raw, cut

    a, b, raw, cut = run(loop, go())
    import numpy as np

    v0, v1 = np.array(a.embeddings[0]), np.array(a.embeddings[1])
    assert len(v0) == 576 and a.prompt_tokens == len(v0) * 0 + a.prompt_tokens > 0
    assert np.linalg.norm(v0) == pytest.approx(1.0) and np.linalg.norm(v1) == pytest.approx(1.0)
    assert b.embeddings[0] == a.embeddings[0]                       # deterministic
    assert not np.allclose(v0, v1)
    r = np.array(raw.embeddings[0])
    assert np.linalg.norm(r) != pytest.approx(1.0)
    assert np.allclose(r / np.linalg.norm(r), v0)
    assert cut.prompt_tokens == 2048                                # truncated to the embedding context


# MEAN pooling over the whole input by llama.cpp itself, in a context of its own: the reference for what the
# runner computes on its own context in chunks
MEAN_POOLED = r"""
import json, sys
import numpy as np
from llama_cpp import llama_cpp as L
from app.engine.runner.batch import NpBatch
from app.engine.runner.embedding.embeddings import tokenize
quiet = L.llama_log_callback(lambda *a: None)       # kept referenced: llama.cpp calls it later
L.llama_log_set(quiet, None)
L.llama_backend_init()
mp = L.llama_model_default_params(); mp.n_gpu_layers = 0
model = L.llama_model_load_from_file(sys.argv[1].encode(), mp)
cp = L.llama_context_default_params()
cp.embeddings, cp.pooling_type, cp.n_seq_max = True, 1, 1
cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
ctx = L.llama_init_from_model(model, cp)
toks = tokenize(L.llama_model_get_vocab(model), sys.argv[2], add_special=True, parse_special=False)
b = NpBatch(512); b.add_span(toks, 0, 0, logits_last=True, logits_all=True)
assert L.llama_decode(ctx, b.struct) == 0
v = np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, 0), shape=(L.llama_model_n_embd(model),)).astype(float)
print(json.dumps((v / np.linalg.norm(v)).tolist()))
"""


def test_generative_embeddings_cut_to_num_ctx_on_the_runners_own_context(loop, smollm2_path):
    """Ollama's `truncate` cuts an input to num_ctx: with num_ctx 256 a 330-token input is embedded as its first
    256 tokens (or refused with truncate=false). The runner embeds in a free slot of its own context, in chunks,
    and gets what MEAN pooling over the whole input gives; a generation running meanwhile is not disturbed."""
    import subprocess
    import sys

    import numpy as np

    c = RunnerClient(cpu_layout(smollm2_path, num_ctx=256, num_parallel=2, n_batch=64), n_threads=1)
    run(loop, c.start())
    text = " ".join(f"item{i}" for i in range(120))          # 330 tokens with SmolLM2's tokenizer
    medium = " ".join(f"step {i} of the plan" for i in range(30))
    gen = P.GenerateRequest(id=rid(), prompt="Once upon a time", sampling=greedy(), num_predict=40, ignore_eos=True,
                            logprobs=True, top_logprobs=5)
    try:
        alone = token_logprobs(run(loop, collect(c, gen))[2])

        async def both():
            g = asyncio.ensure_future(collect(c, P.GenerateRequest(**{**gen.__dict__, "id": rid()})))
            e = await c.embed(P.EmbedRequest(id=rid(), inputs=[text, medium]))
            return token_logprobs((await g)[2]), e

        during, emb = run(loop, both())
        with pytest.raises(RequestError, match="truncate"):
            run(loop, c.embed(P.EmbedRequest(id=rid(), inputs=[text], truncate=False)))
    finally:
        run(loop, c.close())
    # the embedding took a free slot, nothing else: the reply is the one alone (up to a near-tie that a step shared
    # with the embedding's rows may round the other way)
    assert_greedy_agrees(alone, during)
    n_medium = emb.prompt_tokens - 256
    assert 100 < n_medium < 256
    ref = subprocess.run([sys.executable, "-c", MEAN_POOLED, str(smollm2_path), medium], capture_output=True,
                         text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr[-2000:]
    cos = float(np.dot(json.loads(ref.stdout), emb.embeddings[1]))
    assert cos > 0.9999, cos


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")
def test_runner_keeps_one_openmp_team(loop, smollm2_path):
    """The warm-up decode runs in a thread that ends, so after generating, the runner holds exactly the n_threads - 1
    OpenMP workers of the context thread's team (a second live team makes libgomp stop spinning at the graph's
    barriers: docs/architecture.md, "llama.cpp facts" 16)."""
    def threads_after_generating(n):        # (no async-prep helper thread at either count: OpenMP's alone differ)
        c = RunnerClient(cpu_layout(smollm2_path, num_ctx=256, num_parallel=1, n_batch=64), n_threads=n,
                         settings=RunnerSettings(async_prep="shadow"))
        run(loop, c.start())
        try:
            run(loop, collect(c, P.GenerateRequest(id=rid(), prompt="Hi", sampling=greedy(), num_predict=4,
                                                   ignore_eos=True)))
            return len(os.listdir(f"/proc/{c.pid}/task"))
        finally:
            run(loop, c.close())

    assert threads_after_generating(3) - threads_after_generating(1) == 2


def _tiny_runner(loop, path, monkeypatch, settings: RunnerSettings | None = None, **env):
    for k, v in env.items():                      # the runner's test hooks (STRATA_TEST_*) read the environment
        monkeypatch.setenv(k, v)
    c = RunnerClient(cpu_layout(path, num_ctx=64, num_parallel=1, n_batch=64), n_threads=1, settings=settings)
    run(loop, c.start())
    return c


@pytest.mark.parametrize("env", [{}, {"STRATA_TEST_NO_SHIFT": "1"}], ids=["shift", "reprocess"])
def test_context_shift_on_a_tiny_context(loop, smollm2_path, monkeypatch, env):
    c = _tiny_runner(loop, smollm2_path, monkeypatch, **env)
    try:
        n_seq = c.loaded.n_ctx_per_seq
        req = P.GenerateRequest(id=rid(), prompt="Tell me a long story about a dragon.", sampling=greedy(),
                                num_predict=3 * n_seq, ignore_eos=True)
        text, done, _ = run(loop, collect(c, req))
        assert done.reason == "length" and done.completion_tokens == 3 * n_seq
        assert len(done.context_tokens) <= n_seq
        st = run(loop, c.stats())
        assert st.slots_busy == 0
    finally:
        run(loop, c.close())


def test_injected_failures_return_every_slot(loop, smollm2_path, monkeypatch):
    monkeypatch.setenv("STRATA_TEST_FAIL", "admit:2,step:6,sample:11,output:17")
    c = RunnerClient(cpu_layout(smollm2_path, num_ctx=256, num_parallel=2, n_batch=64), n_threads=1)
    run(loop, c.start())
    try:
        async def one(i):
            try:
                _, done, _ = await collect(c, P.GenerateRequest(id=rid(), prompt=f"Number {i}:", raw=True,
                                                                num_predict=4, ignore_eos=True))
                return done.reason
            except RunnerError as e:
                return f"error: {e}"

        async def go():
            outcomes = [await one(i) for i in range(4)]
            outcomes += await asyncio.gather(*(one(i) for i in range(8)))
            return outcomes, await wait_idle(c), await one(99)

        outcomes, st, last = run(loop, go(), timeout=300)
        errors = [o for o in outcomes if o.startswith("error")]
        for stage in ("admit", "step", "sample", "output"):
            assert any(f"injected failure at {stage}" in e for e in errors), (stage, outcomes)
        assert all(o in ("length",) or o.startswith("error") for o in outcomes)
        assert (st.slots_busy, st.queued) == (0, 0) and c.in_flight == 0
        assert last == "length" and c.alive
    finally:
        run(loop, c.close())


def test_runner_abort_is_survived(loop, smollm2_path, monkeypatch):
    monkeypatch.setenv("STRATA_TEST_ABORT_MARKER", "__abort_now__")
    layout = cpu_layout(smollm2_path, num_ctx=256, num_parallel=2)
    c = RunnerClient(layout, n_threads=1)
    run(loop, c.start())
    exits = []
    c.add_exit_callback(exits.append)

    async def go():
        gen = c.generate(P.GenerateRequest(id=rid(), prompt="Once", raw=True, num_predict=10000, ignore_eos=True))
        await gen.__anext__()
        with pytest.raises(RunnerError, match="ended unexpectedly"):
            await collect(c, P.GenerateRequest(id=rid(), prompt="__abort_now__", raw=True))
        with pytest.raises(RunnerError, match="SIGABRT"):
            async for _ in gen:
                pass

    run(loop, go())
    assert exits == [-6] and not c.alive and c.in_flight == 0
    with pytest.raises(RunnerError):
        run(loop, c.stats())
    run(loop, c.close())                              # idempotent after a crash
    c2 = RunnerClient(layout, n_threads=1)             # the model loads again
    run(loop, c2.start())
    try:
        _, done, _ = run(loop, collect(c2, P.GenerateRequest(id=rid(), prompt="Hi", num_predict=2, ignore_eos=True)))
        assert done.completion_tokens == 2
    finally:
        run(loop, c2.close())
    assert not c2.alive


def test_load_failure_is_a_clear_error(loop, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    c = RunnerClient(cpu_layout(bad), n_threads=1)
    with pytest.raises(LoadError) as ei:
        run(loop, c.start())
    assert str(bad) in str(ei.value) or "ended" in str(ei.value)
    assert not c.alive
    missing = RunnerClient(cpu_layout(tmp_path / "nope.gguf"), n_threads=1)
    with pytest.raises(LoadError, match="not found"):
        run(loop, missing.start())


def test_new_text_is_held_for_the_stream_interval(loop, smollm2_path, monkeypatch):
    """STRATA_STREAM_INTERVAL_MS (RunnerSettings.stream_interval_ms) holds new text up to that long (what a runner computing on every CPU does by itself,
    50 ms): the first token still goes at once, later ones travel together, and every token is counted once."""
    def req(**kw):
        return P.GenerateRequest(id=rid(), prompt="Once upon a time", raw=True, sampling=greedy(), num_predict=24,
                                 ignore_eos=True, **kw)

    runs = {}
    # a day: after the first token, everything is held until the end however slowly the 24 tokens come
    for ms in ("0", "86400000"):
        c = _tiny_runner(loop, smollm2_path, monkeypatch, RunnerSettings(stream_interval_ms=float(ms)))
        try:
            runs[ms] = run(loop, collect(c, req())), run(loop, collect(c, req(logprobs=True, top_logprobs=2)))
        finally:
            run(loop, c.close())
    for with_logprobs, every, held in zip((False, True), runs["0"], runs["86400000"]):
        (text0, done0, ev0), (text1, done1, ev1) = every, held
        tokens0 = [e for e in ev0 if isinstance(e, P.TokenEvent)]
        tokens1 = [e for e in ev1 if isinstance(e, P.TokenEvent)]
        assert text1 == text0 and done1.completion_tokens == done0.completion_tokens == 24
        assert sum(e.n_tokens for e in tokens0) == sum(e.n_tokens for e in tokens1) == 24
        assert len(tokens0) >= 20 and len(tokens1) == 2 and tokens1[0].n_tokens == 1
        if with_logprobs:                                  # one entry per token, however they travel
            assert [len(e.logprobs) for e in tokens1] == [1, 23]
            assert sum(len(e.logprobs) for e in tokens0) == 24


def test_stream_interval_by_default_only_when_every_cpu_computes():
    from app.engine.runner.output.output_thread import BUSY_STREAM_INTERVAL_S, stream_interval_s

    assert stream_interval_s((), n_threads=2, cpus=2) == BUSY_STREAM_INTERVAL_S
    assert stream_interval_s((), n_threads=1, cpus=2) == 0.0            # a spare CPU absorbs the per-token work
    assert stream_interval_s(("CUDA0",), n_threads=16, cpus=16) == 0.0  # the GPU computes
    assert stream_interval_s((), n_threads=2, setting_ms=0.0, cpus=2) == 0.0          # the setting wins
    assert stream_interval_s(("CUDA0",), n_threads=1, setting_ms=12.5, cpus=2) == 0.0125
