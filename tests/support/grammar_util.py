"""Driving llama.cpp's grammar sampler token by token on a real vocabulary, for the grammar tests
(tests/unit/engine/runner/sampling/test_tool_grammar.py, test_tool_options.py): which tokens it still admits, feeding
text as tokens, and a reply watched until a lazy grammar triggers."""
from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.embedding.embeddings import tokenize

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]


def allowed(vocab, sampler, n_vocab) -> np.ndarray:
    """Which tokens the grammar sampler still admits (all start equally likely)."""
    data = (L.llama_token_data * n_vocab)()
    for i in range(n_vocab):
        data[i].id, data[i].logit, data[i].p = i, 0.0, 0.0
    arr = L.llama_token_data_array(data=data, size=n_vocab, selected=-1, sorted=False)
    L.llama_sampler_apply(sampler, L.ctypes.byref(arr))
    return np.array([data[i].logit for i in range(arr.size)]) > -np.inf


def accept_text(vocab, sampler, text):
    for t in tokenize(vocab, text, add_special=False, parse_special=True):
        L.llama_sampler_accept(sampler, t)


def piece_id(vocab, text):
    toks = tokenize(vocab, text, add_special=False, parse_special=True)
    return toks[0]


def watch_text(vocab, sampler, text):
    """`text` as the reply's tokens: watched while the grammar waits, then each tested and accepted by it."""
    for t in tokenize(vocab, text, add_special=False, parse_special=True):
        if sampler.grammar is None:
            sampler.watch(t)
        else:
            assert sampler.allows(sampler.grammar, t)
            L.llama_sampler_accept(sampler.grammar, t)
