"""The greedy pick (runner/sampling/greedy.py): the argmax of the penalised logits takes every token llama.cpp's
chain takes."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.batch import NpBatch
from app.engine.runner.sampling.chain import accept_prompt, build_chain, penalty_window
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.greedy import greedy_pick
from engine_util import decode_prompt as _decode_prompt


@pytest.mark.parametrize("repeat,last_n", [(1.0, 64), (1.1, 64), (1.5, 8), (1.3, -1)])
def test_greedy_pick_takes_what_the_chain_takes(llama, repeat, last_n):
    """A greedy chain with at most a repeat penalty is sampled as the argmax of the (penalised) logits, without
    llama.cpp's candidate array: over a real generation from SmolLM2 (a repetitive list, so the penalty window
    turns over and changes picks) it takes every token llama.cpp's chain takes from the same logits, prompt tail
    included in the window, and among equal maxima the first, as llama.cpp's greedy does."""
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    p = P.SamplingParams(temperature=0, repeat_penalty=repeat, repeat_last_n=last_n)
    window = penalty_window(p, 512)
    for other in (P.SamplingParams(temperature=0.7), P.SamplingParams(temperature=0, logit_bias={5: 1.0}),
                  P.SamplingParams(temperature=0, presence_penalty=0.5),
                  P.SamplingParams(temperature=0, frequency_penalty=0.5)):
        assert greedy_pick(other, window) is None, other
    fast = SeqSampler(build_chain(p, v.n_vocab, 512), vocab, v.n_vocab, greedy=greedy_pick(p, window))
    chain = build_chain(p, v.n_vocab, 512)
    assert fast.greedy is not None
    L.llama_memory_clear(mem, True)
    toks, row = _decode_prompt(ctx, vocab, "one, two, three, one, two, three, one, two, three, one, two,")
    fast.accept_prompt(np.asarray(toks), window)
    accept_prompt(chain, toks, window)
    differs = 0
    try:
        b = NpBatch(4)
        for i in range(40):
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(v.n_vocab,))
            before = logits.copy()
            tok = fast.sample(ctx, row)
            assert np.array_equal(logits, before)               # the penalised logits were put back
            assert tok == L.llama_sampler_sample(chain, ctx, row), i
            differs += tok != int(before.argmax())
            b.clear()
            row = b.add_span([tok], len(toks) + i, 0, logits_last=True)
            assert L.llama_decode(ctx, b.struct) == 0
        if repeat >= 1.3:
            assert differs, "the penalty never changed a pick: the comparison proves nothing about it"
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(v.n_vocab,))
        logits[[7, 300, 4000]] = logits.max() + 1.0         # three equal maxima: both take the first, token 7
        assert fast.sample(ctx, row) == L.llama_sampler_sample(chain, ctx, row) == 7
    finally:
        fast.free()
        L.llama_sampler_free(chain)
        L.llama_memory_clear(mem, True)
