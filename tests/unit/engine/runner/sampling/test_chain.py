"""Sampler chains (runner/sampling/chain.py): the prompt feeds the penalties' window, never the grammar; every
option validated by name and built into a chain."""
from __future__ import annotations

import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.sampling.chain import SamplingError, accept_prompt, build_chain, penalty_window, validate
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.grammar import grammar_for
from engine_util import decode_prompt as _decode_prompt


def test_prompt_tokens_feed_the_penalties_but_never_the_grammar(llama):
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    prompt = "Words that are not JSON at all: red, green, blue."
    toks = tokenize(vocab, prompt, add_special=False)
    p = P.SamplingParams(temperature=0, repeat_penalty=1.5, repeat_last_n=8)
    assert penalty_window(p, 512) == 8 and penalty_window(P.SamplingParams(repeat_last_n=-1), 512) == 512
    chain = build_chain(p, v.n_vocab, n_ctx=512)
    sampler = SeqSampler(chain, vocab, v.n_vocab, grammar_for(json_mode=True), "format json", v.piece)
    try:
        assert accept_prompt(chain, toks, penalty_window(p, 512)) == 8          # only the window's worth
        L.llama_memory_clear(mem, True)
        _, row = _decode_prompt(ctx, vocab, prompt, seq=0)
        first = v.text(sampler.sample(ctx, row))
        # had the grammar seen the prose above, it would be past its start (or broken); it still wants an object
        assert first.lstrip().startswith("{"), first
    finally:
        sampler.free()
        L.llama_memory_clear(mem, True)
    neutral = build_chain(P.SamplingParams(temperature=0, repeat_penalty=1.0), v.n_vocab)
    assert accept_prompt(neutral, toks, 64) == 0                                 # nothing to feed
    L.llama_sampler_free(neutral)


@pytest.mark.parametrize("field,value", [("temperature", -0.5), ("top_p", 1.5), ("top_k", -1), ("mirostat", 3),
                                         ("typical_p", 0.0), ("repeat_penalty", 0.0), ("seed", -2),
                                         ("min_p", float("nan")), ("logit_bias", {-1: 1.0})])
def test_sampling_validation_names_the_option(field, value):
    with pytest.raises(SamplingError, match=field):
        validate(P.SamplingParams(**{field: value}), n_vocab=100)


def test_every_sampler_option_builds_a_chain(llama):
    _, _, vocab, v = llama
    for p in (P.SamplingParams(), P.SamplingParams(temperature=0), P.SamplingParams(mirostat=1),
              P.SamplingParams(mirostat=2, seed=3), P.SamplingParams(min_p=0.05, typical_p=0.9, top_k=0, top_p=1.0,
                                                                     presence_penalty=0.5, frequency_penalty=0.5,
                                                                     repeat_last_n=-1, logit_bias={5: -100.0})):
        chain = build_chain(p, v.n_vocab, n_ctx=512)
        assert chain and L.llama_sampler_chain_n(chain) >= 1
        L.llama_sampler_free(chain)
