"""The numpy-backed batch (runner/batch.py): two sequences in one batch decode as each alone (SmolLM2)."""
from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch
from app.engine.runner.embedding.embeddings import tokenize
from engine_util import decode_prompt as _decode_prompt


def test_numpy_batch_two_sequences_match_each_alone(llama):
    _, ctx, vocab, _ = llama
    mem = L.llama_get_memory(ctx)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    prompts = ["Hello there, my name is", "import numpy as np\n"]
    alone = []
    for p in prompts:
        L.llama_memory_clear(mem, True)
        _, row = _decode_prompt(ctx, vocab, p, seq=0)
        alone.append(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(n_vocab,)).copy())
    L.llama_memory_clear(mem, True)
    b = NpBatch(128)
    rows = [b.add_span(tokenize(vocab, p, add_special=False), 0, s, logits_last=True) for s, p in enumerate(prompts)]
    assert b.struct.n_tokens == b.n and L.llama_decode(ctx, b.struct) == 0
    for r, ref in zip(rows, alone):
        # the same logits up to rounding (one batch of both prompts is another shape than each alone, and llama.cpp
        # rounds shapes differently), so the best token alone is the best here or within that rounding of it
        got = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, r), shape=(n_vocab,))
        assert np.allclose(got, ref, atol=1e-3)
        assert got[np.argmax(ref)] >= got.max() - 3e-3           # two allclose bounds (atol + rtol * |logit|)
    assert list(b.seq[:b.n]) == [0] * (rows[0] + 1) + [1] * (rows[1] - rows[0])
    with pytest.raises(OverflowError):
        b.add_span(list(range(200)), 0, 0, logits_last=True)
