"""Embeddings in the runner: one place that tokenizes, truncates and counts, and one that computes.

- Embedding models (a pooling type, or encoder architectures such as BERT): the runner's own context was
  created with `embeddings=True`; a whole input must fit in one ubatch (non-causal attention), so the limit is
  min(n_ubatch, n_ctx per sequence).
- Generative models embed on the runner's own context too, in a free slot, as Ollama does: the limit is the
  load's num_ctx (Ollama's `truncate` cuts to num_ctx), and no second context is created. For the embedding,
  `llama_set_embeddings(ctx, true)` makes llama.cpp return every token's final hidden state (the context's pooling
  is NONE); the input is decoded in chunks and the states averaged, which is exactly MEAN pooling. Every token of
  a chunk is an output, so llama.cpp grows the host output buffer to chunk x (n_vocab + n_embd) floats: the chunk
  comes from the Layout contract (layout/context_rules.embed_chunk_tokens); the planner plans that growth
  (DevicePlan.output_reserve).
  (A separate embeddings context of 2048 tokens cost SmolLM2 ~830 MiB - a 2048-token ubatch of logits in its
  compute buffer and again in its output buffer - that no plan saw.)
Inputs longer than the limit are truncated when `truncate` is true (the default) and refused otherwise.

Reranking is the same path: a reranker GGUF (pooling type RANK: a classification head on the pooled state, e.g.
the BGE and Qwen3 reranker families) scores each (query, document) pair, laid out as llama-server does
(`pair_tokens`: the GGUF's `rerank` template, else [BOS] query [EOS] [SEP] document [EOS]); the score is the
head's first output (Qwen3's: the softmax probability of "yes").
"""
from __future__ import annotations

import ctypes

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch

POOLING_NONE = 0
POOLING_RANK = 4


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
    def __init__(self, model, ctx, num_ctx: int, chunk: int):
        """`num_ctx`: the load's context per sequence (the limit for a generative model); `chunk`: tokens per
        decode when a generative model embeds (layout/context_rules.embed_chunk_tokens)."""
        self.model = model
        self.vocab = L.llama_model_get_vocab(model)
        self.n_embd = L.llama_model_n_embd(model)
        self.ctx = ctx
        self.chunk = max(1, chunk)
        self.rank = L.llama_pooling_type(ctx) == POOLING_RANK
        self.n_out = max(1, L.llama_model_n_cls_out(model)) if self.rank else self.n_embd   # floats per pooled row
        raw = L.llama_model_chat_template(model, b"rerank")
        self.rerank_template = raw.decode("utf-8", "replace") if raw else None
        pooled = L.llama_pooling_type(ctx) not in (POOLING_NONE, -1)
        self.is_embedding_model = pooled or (L.llama_model_has_encoder(model)
                                             and not L.llama_model_has_decoder(model))
        if self.is_embedding_model:
            self.limit = min(L.llama_n_ubatch(ctx), L.llama_n_ctx_seq(ctx))
        else:
            self.limit = max(1, min(num_ctx, L.llama_n_ctx_seq(ctx)))
        self._batch = NpBatch(self.limit if self.is_embedding_model else min(self.chunk, self.limit))

    def pair_tokens(self, query: str, document: str) -> list[int]:
        """A (query, document) pair as a reranker reads it, laid out as llama-server's format_prompt_rerank."""
        if self.rerank_template is not None:
            text = self.rerank_template.replace("{query}", query).replace("{document}", document)
            return tokenize(self.vocab, text, add_special=False, parse_special=True)
        eos = L.llama_vocab_eos(self.vocab)
        if eos < 0:
            eos = L.llama_vocab_sep(self.vocab)
        toks = [L.llama_vocab_bos(self.vocab)] if L.llama_vocab_get_add_bos(self.vocab) else []
        toks += tokenize(self.vocab, query, add_special=False, parse_special=False)
        toks += [eos] if L.llama_vocab_get_add_eos(self.vocab) else []
        toks += [L.llama_vocab_sep(self.vocab)] if L.llama_vocab_get_add_sep(self.vocab) else []
        toks += tokenize(self.vocab, document, add_special=False, parse_special=False)
        toks += [eos] if L.llama_vocab_get_add_eos(self.vocab) else []
        return toks

    def prepare(self, inputs, truncate: bool, query: str | None = None) -> tuple[list[list[int]], int]:
        """Tokenize and apply the truncation rule; returns (token lists, tokens counted). Any thread. With a
        `query`, the inputs are documents to rank against it (a reranker only)."""
        if isinstance(inputs, str) or not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            raise ValueError("input must be a list of strings")
        if query is not None and not self.rank:
            raise ValueError("this model is not a reranker (its pooling type is not 'rank')")
        if query is None and self.rank:
            raise ValueError("this model is a reranker: it scores (query, document) pairs; use /v1/rerank")
        out = []
        for i, text in enumerate(inputs):
            toks = (self.pair_tokens(query, text) if query is not None
                    else tokenize(self.vocab, text, add_special=True, parse_special=False))
            if not toks:
                raise ValueError(f"input {i} is empty")
            out.append(fit_tokens(toks, self.limit, truncate, i))
        return out, sum(len(t) for t in out)

    def embed(self, token_lists: list[list[int]], normalize: bool = True, seq: int = 0) -> list[list[float]]:
        """Context thread only. A generative model uses sequence `seq`, whose cells must be free; they are free
        again afterwards."""
        embed_one = self._embed_pooled if self.is_embedding_model else self._embed_chunked
        out = []
        for toks in token_lists:
            v = embed_one(toks, seq)
            out.append((l2_normalize(v) if normalize and not self.rank else v).tolist())
        return out

    def _embed_pooled(self, toks: list[int], _seq: int) -> np.ndarray:
        """An embedding model: the whole input in one batch of its own (embedding) context, pooled by llama.cpp."""
        mem = L.llama_get_memory(self.ctx)
        if mem:
            L.llama_memory_clear(mem, True)
        L.llama_set_embeddings(self.ctx, True)      # the pooled state (a reranker's head output) is what we read
        b = self._batch
        b.clear()
        b.add_span(toks, 0, 0, logits_last=True, logits_all=True)
        use_encode = L.llama_model_has_encoder(self.model) and not L.llama_model_has_decoder(self.model)
        rc = (L.llama_encode if use_encode else L.llama_decode)(self.ctx, b.struct)
        if rc != 0:
            raise RuntimeError(f"embedding decode failed with code {rc}")
        ptr = L.llama_get_embeddings_seq(self.ctx, 0)
        if ptr:
            return np.ctypeslib.as_array(ptr, shape=(self.n_out,)).astype(np.float64)
        # pooling NONE on an embedding model: mean of the token embeddings
        rows = [np.ctypeslib.as_array(L.llama_get_embeddings_ith(self.ctx, i), shape=(self.n_embd,))
                for i in range(len(toks))]
        return np.mean(np.stack(rows), axis=0).astype(np.float64)

    def _embed_chunked(self, toks: list[int], seq: int) -> np.ndarray:
        """A generative model: decode the input on sequence `seq` in chunks with embeddings on, average the
        tokens' final hidden states (MEAN pooling), then give the cells back."""
        mem = L.llama_get_memory(self.ctx)
        L.llama_memory_seq_rm(mem, seq, -1, -1)
        L.llama_set_embeddings(self.ctx, True)
        acc = np.zeros(self.n_embd, dtype=np.float64)
        try:
            b = self._batch
            for pos in range(0, len(toks), self.chunk):
                part = toks[pos:pos + self.chunk]
                b.clear()
                b.add_span(part, pos, seq, logits_last=True, logits_all=True)
                rc = L.llama_decode(self.ctx, b.struct)
                if rc != 0:
                    raise RuntimeError(f"embedding decode failed with code {rc}")
                ptr = L.llama_get_embeddings(self.ctx)
                acc += np.ctypeslib.as_array(ptr, shape=(len(part), self.n_embd)).sum(axis=0, dtype=np.float64)
        finally:
            L.llama_set_embeddings(self.ctx, False)
            L.llama_memory_seq_rm(mem, seq, -1, -1)
        return acc / len(toks)

    def close(self):
        pass
