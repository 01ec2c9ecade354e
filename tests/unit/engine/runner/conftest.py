"""The runner's unit tests that drive llama.cpp themselves share one fixture: SmolLM2 loaded in the test process
with a small two-sequence context (real vocabulary and logits where the behaviour depends on llama.cpp)."""
from __future__ import annotations

import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.output.text import Vocab
from engine_util import llama_context


@pytest.fixture(scope="module")
def llama(smollm2_path):
    """(model, context, llama vocab, `Vocab`), freed after the module."""
    with llama_context(smollm2_path, n_ctx=512, n_batch=128, n_seq=2) as (model, ctx):
        vocab = L.llama_model_get_vocab(model)
        yield model, ctx, vocab, Vocab(vocab, L.llama_vocab_n_tokens(vocab))
