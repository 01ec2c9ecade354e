"""Helpers for the engine tests: a CPU Layout for a GGUF built directly (no planner), for driving a runner
client from a test's event loop (request ids, greedy sampling, a bounded run, a stream collected), and for
driving a llama.cpp context in the test process (a context, its memory cleared, a prompt decoded into a sequence)."""
from __future__ import annotations

import asyncio
import itertools
from contextlib import contextmanager

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.layout.types import DevicePlan, Layout, PlanOptions

_ids = itertools.count()


@contextmanager
def llama_context(path, *, n_ctx: int, n_batch: int, n_seq: int = 1, n_ubatch: int | None = None):
    """(model, context) of a GGUF loaded in this test process (the default devices, one thread), freed after
    the block: for tests that drive llama.cpp themselves, without a runner."""
    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(path).encode(), L.llama_model_default_params())
    assert model, path
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_ubatch or n_batch, n_seq
    cp.n_threads = cp.n_threads_batch = 1
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, path
    try:
        yield model, ctx
    finally:
        L.llama_free(ctx)
        L.llama_model_free(model)


def cleared_memory(ctx):
    """The context's memory (KV cache) with every sequence cleared: each test starts from nothing."""
    m = L.llama_get_memory(ctx)
    L.llama_memory_clear(m, True)
    return m


def decode_logits(ctx, tokens, seq: int, pos0: int = 0) -> np.ndarray:
    """Decode `tokens` into `seq` from pos0 in one batch; the last token's logits."""
    from app.engine.runner.batch import NpBatch

    b = NpBatch(256)
    row = b.add_span(tokens, pos0, seq, logits_last=True)
    assert L.llama_decode(ctx, b.struct) == 0
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(L.llama_get_model(ctx)))
    return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(n_vocab,)).copy()


def decode_prompt(ctx, vocab, text, seq=0, batch=None):
    """`text`'s tokens decoded into sequence `seq` from position 0, logits for the last: (tokens, its batch row)."""
    from app.engine.runner.batch import NpBatch
    from app.engine.runner.embedding.embeddings import tokenize

    toks = tokenize(vocab, text, add_special=False)
    b = batch or NpBatch(128)
    b.clear()
    row = b.add_span(toks, 0, seq, logits_last=True)
    assert L.llama_decode(ctx, b.struct) == 0
    return toks, row


def token_prompt(n: int, salt: int = 0) -> list[int]:
    """`n` token ids that vary with `salt`, within any test vocabulary (a prompt without a tokenizer)."""
    return [100 + (i * 37 + salt) % 5000 for i in range(n)]


def request_id(prefix: str) -> str:
    """A request id unique in this test process (`prefix` says which test file sent it, in runner logs)."""
    return f"{prefix}{next(_ids)}"


def greedy(**kw) -> P.SamplingParams:
    """Temperature 0 and no repeat penalty: the same tokens on every run (the reference for exactness checks)."""
    return P.SamplingParams(temperature=0.0, repeat_penalty=1.0, **kw)


# llama.cpp does not promise the same logits for a token whatever batch it is decoded in: its CPU kernels round
# differently per batch shape (a prompt in one ubatch or many, one row or several sequences' rows in a step, a
# draft verified in one batch). Measured on SmolLM2 between cold runs of the same prompts: n_batch 512 vs 16
# (110-token prompt) up to 0.048 in a token's logprob; four 630-token prompts one after another vs all in one
# batch up to 0.26. A bug (a wrong position, a stale or foreign cell, a lost draft row) changes confident tokens or
# moves logprobs by whole nats.
LOGPROB_NOISE = 0.3


def assert_greedy_agrees(reference: list, other: list, noise: float = LOGPROB_NOISE) -> int:
    """Two greedy runs of one request decoded in different batch shapes (`reference`, `other`: their tokens'
    logprob records, with `top` alternatives): token for token the same, logprobs within `noise`, up to a first
    difference where the reference's two candidates were within `noise` of each other (a near-tie that rounding
    may flip; after it the two replies continue from different text and nothing more is comparable). Without a
    difference both have every token. -> how many tokens agree."""
    for i, (r, o) in enumerate(zip(reference, other)):
        if r.token != o.token:
            top = {t[0]: t[1] for t in r.top}
            assert o.token in top and top[r.token] - top[o.token] < noise, \
                f"token {i}: {o.token!r} for {r.token!r}, not a near-tie in the reference's {top}"
            return i
        assert abs(r.logprob - o.logprob) < noise, f"token {i} {r.token!r}: logprob {o.logprob} vs {r.logprob}"
    assert len(reference) == len(other) > 0, (len(reference), len(other))
    return len(reference)


def run(loop: asyncio.AbstractEventLoop, coro, timeout: float = 300):
    """`coro` run to its end on the test's loop, failing after a generous `timeout` rather than hanging."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


async def collect(client, req: P.GenerateRequest) -> tuple[str, object, list]:
    """(the reply's text, its last event, the logprob records of its tokens, in order) of one generation."""
    events = [ev async for ev in client.generate(req)]
    text = "".join(e.text for e in events if isinstance(e, P.TokenEvent))
    lps = [lp for e in events if isinstance(e, P.TokenEvent) for lp in (e.logprobs or [])]
    return text, events[-1], lps


def cpu_layout(path, *, num_ctx: int = 512, num_parallel: int = 2, n_batch: int = 512, n_ubatch: int | None = None,
               embedding: bool = False, n_layer: int = 30) -> Layout:
    n_ubatch = n_ubatch or n_batch
    opts = PlanOptions(num_ctx=num_ctx, num_parallel=num_parallel, num_batch=n_batch, num_ubatch=n_ubatch,
                       num_gpu=0, embedding=embedding)
    cpu = DevicePlan(device_id="CPU", name="CPU", layers=tuple(range(n_layer)), expert_layers=(), weights={},
                     kv=0, compute=0)
    return Layout(model_path=str(path), options=opts, devices=(cpu,), layer_device=("CPU",) * n_layer,
                  expert_device=("",) * n_layer, n_gpu_layers=0, split_mode=1, main_gpu=0, tensor_split=(),
                  gpu_devices=(), tensor_buft_overrides=(), op_offload=True, n_ctx=num_ctx * num_parallel,
                  n_parallel=num_parallel, n_batch=n_batch, n_ubatch=n_ubatch, type_k="f16", type_v="f16",
                  flash_attn=None, fits=True)


async def cancel_stream(agen, task) -> None:
    """What a client that goes away does: cancel the task waiting on the stream's next event, then close the
    stream (closing it cancels the request in the runner)."""
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, StopAsyncIteration):
        pass
    await agen.aclose()
