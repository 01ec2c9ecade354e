"""The turn after tool results does not end before it says something (runner/sampling/answer_hold.py): on SmolLM2's
real vocabulary and logits, through constrained.SeqSampler's greedy pick and llama.cpp's chain alike, an
end-of-generation token that would win is replaced by the best text token (not a call's start) while the reply has
written only whitespace, a call the model picks itself stands, the logits are put back, and the hold ends at the
first other token or after its limit."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.output.text import Vocab
from app.engine.runner.sampling.answer_hold import AnswerHold, call_start_tokens, end_tokens, opens_call
from app.engine.runner.sampling.chain import build_chain, penalty_window
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.greedy import greedy_pick
from app.engine.runner.batch import NpBatch
from engine_util import llama_context


@pytest.fixture(scope="module")
def llama(smollm2_path):
    with llama_context(smollm2_path, n_ctx=256, n_batch=64) as (model, ctx):
        vocab = L.llama_model_get_vocab(model)
        yield ctx, vocab, Vocab(vocab, L.llama_vocab_n_tokens(vocab))


def row_logits(ctx, vocab, text: str) -> tuple[int, np.ndarray]:
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    b = NpBatch(64)
    row = b.add_span(tokenize(vocab, text, add_special=False), 0, 0, logits_last=True)
    assert L.llama_decode(ctx, b.struct) == 0
    return row, np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(L.llama_vocab_n_tokens(vocab),))


def test_end_tokens_are_the_vocabularys_end_and_control_tokens(llama):
    _, vocab, v = llama
    ends = end_tokens(vocab, v.n_vocab)
    eos = L.llama_vocab_eos(vocab)
    assert eos in ends and all(L.llama_vocab_is_eog(vocab, t) or L.llama_vocab_is_control(vocab, t) for t in ends)
    assert tokenize(vocab, "The", add_special=False)[0] not in ends
    assert end_tokens(vocab, v.n_vocab) is ends                      # read once per vocabulary


def test_tokens_that_can_open_a_call():
    for piece in (b"{", b' {"', b"\n[", b"<tool_call>", b"<|python_tag|>", b"[TOOL_CALLS]", b"```", b'>{"', b">", b"(",
                  b":{"):
        assert opens_call(piece), piece
    for piece in (b"The", b" ", b"\n", b"", b"> quote", b"Action", b"1"):
        assert not opens_call(piece), piece


def test_call_start_tokens_of_a_real_vocabulary(llama):
    _, vocab, v = llama
    starts = set(call_start_tokens(vocab, v.n_vocab).tolist())
    for text in ("{", "[", "<", "```"):
        assert tokenize(vocab, text, add_special=False)[0] in starts, text
    assert tokenize(vocab, "The", add_special=False)[0] not in starts
    assert all(opens_call(v.piece(t, special=True)) for t in list(starts)[:500])


@pytest.mark.parametrize("params,greedy", [(P.SamplingParams(temperature=0, repeat_penalty=1.1), True),
                                           (P.SamplingParams(temperature=0, logit_bias={5: -1.0}), False),
                                           (P.SamplingParams(temperature=0.7, seed=3), False)])
def test_the_end_is_held_until_the_reply_says_something(llama, params, greedy):
    """Through the greedy pick (greedy.py) and through llama.cpp's chain, which reads the same logits."""
    ctx, vocab, v = llama
    eos = L.llama_vocab_eos(vocab)
    space = tokenize(vocab, " ", add_special=False)[0]
    word = tokenize(vocab, "Sunny", add_special=False)[0]
    window = penalty_window(params, 256)

    def sampler(hold: bool) -> SeqSampler:
        s = SeqSampler(build_chain(params, v.n_vocab, 256), vocab, v.n_vocab, greedy=greedy_pick(params, window))
        if hold:
            ends = end_tokens(vocab, v.n_vocab)
            s.hold = AnswerHold(ends, np.union1d(ends, call_start_tokens(vocab, v.n_vocab)), v.piece, limit=3)
        return s

    free, held = sampler(False), sampler(True)
    assert (free.greedy is not None) == greedy
    try:
        row, logits = row_logits(ctx, vocab, "The weather tool said: sunny.")
        logits[eos] = logits.max() + 50.0            # the model would end its turn here
        logits[word] = logits[eos] - 10.0            # ... or else say a word
        before = logits.copy()
        assert free.sample(ctx, row) == eos
        assert held.sample(ctx, row) == word and not held.hold.active    # a word: the hold is over
        assert np.array_equal(logits, before)        # the mask was taken off after the pick
        assert held.sample(ctx, row) == eos          # ... so the reply may end now

        held = sampler(True)                         # the model's own call may open the reply ...
        brace = tokenize(vocab, "{", add_special=False)[0]
        logits[brace] = logits[eos] + 1.0
        assert held.sample(ctx, row) == brace and not held.hold.active
        held = sampler(True)                         # ... but a reply it would end opens with text, not a call
        logits[brace] = logits[eos] - 0.2
        assert held.sample(ctx, row) == word
        logits[brace] = logits.min() - 1.0

        held = sampler(True)
        logits[space] = logits[eos] - 0.5            # the best token after the end is whitespace
        assert held.sample(ctx, row) == space and held.hold.active    # whitespace says nothing: still held
        logits[space] = logits.min() - 1.0
        assert held.sample(ctx, row) == word and not held.hold.active

        held = sampler(True)                         # only whitespace: ends after the limit (3 tokens)
        logits[space], logits[word] = logits[eos] - 0.5, logits.min() - 1.0
        assert [held.sample(ctx, row) for _ in range(4)] == [space, space, space, eos]
    finally:
        free.free()
        held.free()
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
