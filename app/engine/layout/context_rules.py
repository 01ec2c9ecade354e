"""Facts about the llama context that the planner and the runner must decide the same way.

The planner sizes memory with them and the runner builds its context and batches with them; keeping them here
(not in the planner's memory model) lets the runner use them without importing the planner.
"""
from __future__ import annotations

MiB = 1024 * 1024

# llama.cpp's `swa_full` (llama_context_params), decided here once for the planner and the runner alike: OFF, as
# llama-server runs it. Sliding-window layers then keep only about window + n_ubatch cells per sequence instead of
# the whole context (most of the KV of Gemma 2/3, gpt-oss, Cohere 2, Llama 4). The price, for a prompt cache: cells
# of those layers older than the window are dropped as decoding moves on, so a cached prefix of n tokens can be
# reused only while llama_memory_seq_pos_min(mem, seq) <= max(0, n - window) (llama-server's rule); otherwise the
# prompt must be processed again from the start (or from a saved state). See docs/architecture.md, "Memory layout".
SWA_FULL = False

EMBED_OUTPUT_BUDGET = 32 * MiB   # host output growth allowed for a generative model's embedding chunk


def embed_chunk_tokens(n_vocab: int, n_embd: int, n_batch: int) -> int:
    """Tokens per llama_decode when a generative model embeds on its own context (app.engine.runner.embedding.embeddings):
    every token is an output then, so llama.cpp grows the host output buffer to chunk x (n_vocab + n_embd) f32;
    the chunk keeps that near EMBED_OUTPUT_BUDGET (168 tokens for SmolLM2's 49152-token vocabulary)."""
    return max(1, min(n_batch, EMBED_OUTPUT_BUDGET // max(1, (n_vocab + n_embd) * 4)))
