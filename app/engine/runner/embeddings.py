"""Embeddings in the runner: one place that tokenizes, truncates and counts, and one that computes.

- Embedding models (a pooling type, or encoder architectures such as BERT): the runner's own context was
  created with `embeddings=True`; a whole input must fit in one ubatch (non-causal attention), so the limit is
  min(n_ubatch, n_ctx per sequence).
- Generative models: a second, small context with `embeddings=True` and MEAN pooling is created on first use
  (n_seq_max = 1, a power of two: MEAN pooling aborts otherwise, docs/architecture.md "Runner"), batch =
  context size so an input is one batch.
Inputs longer than the limit are truncated when `truncate` is true (the default) and refused otherwise.
"""
from __future__ import annotations

import ctypes

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch

POOLING_NONE, POOLING_MEAN = 0, 1
GENERATIVE_EMBED_CTX = 2048     # context of the side context for generative models


class InputTooLong(ValueError):
    pass


def tokenize(vocab, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
    data = text.encode("utf-8")
    cap = len(data) + 16
    buf = (ctypes.c_int32 * cap)()
    n = L.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:
        cap = -n
        buf = (ctypes.c_int32 * cap)()
        n = L.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:
        raise ValueError("tokenization failed")
    return list(buf[:n])


def fit_tokens(tokens: list[int], limit: int, truncate: bool, index: int = 0) -> list[int]:
    """The one truncation rule for embeddings: keep the first `limit` tokens, or refuse."""
    if len(tokens) <= limit:
        return tokens
    if not truncate:
        raise InputTooLong(f"input {index} has {len(tokens)} tokens, more than the context length {limit}; "
                           "shorten it or set truncate=true")
    return tokens[:limit]


def l2_normalize(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


class Embedder:
    def __init__(self, model, main_ctx, context_params_fn):
        self.model = model
        self.vocab = L.llama_model_get_vocab(model)
        self.n_embd = L.llama_model_n_embd(model)
        self.main_ctx = main_ctx
        self._make_params = context_params_fn     # () -> llama_context_params for the side context
        self.own_ctx = None
        pooled_main = L.llama_pooling_type(main_ctx) not in (POOLING_NONE, -1)
        self.is_embedding_model = pooled_main or (L.llama_model_has_encoder(model)
                                                  and not L.llama_model_has_decoder(model))
        if self.is_embedding_model:
            self.limit = min(L.llama_n_ubatch(main_ctx), L.llama_n_ctx_seq(main_ctx))
        else:
            self.limit = min(GENERATIVE_EMBED_CTX, L.llama_model_n_ctx_train(model) or GENERATIVE_EMBED_CTX)
        self._batch = None

    def prepare(self, inputs, truncate: bool) -> tuple[list[list[int]], int]:
        """Tokenize and apply the truncation rule; returns (token lists, tokens counted). Any thread."""
        if isinstance(inputs, str) or not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            raise ValueError("input must be a list of strings")
        out = []
        for i, text in enumerate(inputs):
            toks = tokenize(self.vocab, text, add_special=True, parse_special=False)
            if not toks:
                raise ValueError(f"input {i} is empty")
            out.append(fit_tokens(toks, self.limit, truncate, i))
        return out, sum(len(t) for t in out)

    def _context(self):
        if self.is_embedding_model:
            return self.main_ctx
        if self.own_ctx is None:
            cp = self._make_params()
            cp.embeddings = True
            cp.pooling_type = POOLING_MEAN
            cp.n_ctx = cp.n_batch = cp.n_ubatch = self.limit
            cp.n_seq_max = 1
            ctx = L.llama_init_from_model(self.model, cp)
            if not ctx:
                raise RuntimeError("could not create the embedding context (out of memory?)")
            self.own_ctx = ctx
        return self.own_ctx

    def embed(self, token_lists: list[list[int]], normalize: bool = True) -> list[list[float]]:
        """Context thread only."""
        ctx = self._context()
        if self._batch is None:
            self._batch = NpBatch(self.limit)
        mem = L.llama_get_memory(ctx)
        use_encode = L.llama_model_has_encoder(self.model) and not L.llama_model_has_decoder(self.model)
        out = []
        for toks in token_lists:
            if mem:
                L.llama_memory_clear(mem, True)
            b = self._batch
            b.clear()
            b.add_span(toks, 0, 0, logits_last=True, logits_all=True)
            rc = (L.llama_encode if use_encode else L.llama_decode)(ctx, b.struct)
            if rc != 0:
                raise RuntimeError(f"embedding decode failed with code {rc}")
            ptr = L.llama_get_embeddings_seq(ctx, 0)
            if ptr:
                v = np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).astype(np.float64)
            else:   # pooling NONE on an embedding model: mean of the token embeddings
                rows = [np.ctypeslib.as_array(L.llama_get_embeddings_ith(ctx, i), shape=(self.n_embd,))
                        for i in range(len(toks))]
                v = np.mean(np.stack(rows), axis=0).astype(np.float64)
            out.append((l2_normalize(v) if normalize else v).tolist())
        if mem and not self.is_embedding_model:
            L.llama_memory_clear(mem, True)
        return out

    def close(self):
        if self.own_ctx is not None:
            L.llama_free(self.own_ctx)
            self.own_ctx = None
