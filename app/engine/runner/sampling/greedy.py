"""The greedy pick without llama.cpp's candidate array, for chains that are greedy with at most a repeat penalty.

`llama_sampler_sample` first copies all n_vocab logits into a candidate array, and a penalties sampler then looks
every candidate up in its token counts: for SmolLM2's 49,152 tokens on a slow CPU ~90 us for the greedy pick alone
and ~230 us with the repeat penalty (Qwen's vocabulary is three times larger), host time that the next decode waits
for at every step. The same token is the argmax of the row's logits once the few tokens of the penalty window are
penalised as llama.cpp's penalties sampler does (src/llama-sampler.cpp, `llama_sampler_penalties_apply`: a logit
<= 0 multiplied by the penalty, a positive one divided, in float32): ~25 us. Both take the first of equal maxima.
The window mirrors the penalties sampler's (`llama_sampler_penalties_accept`): the last `last_n` tokens accepted,
prompt tail included; constrained.SeqSampler feeds both the same tokens, so the chain stays right for a grammar
that starts later in the reply. Frequency and presence penalties and logit biases keep the chain (their float
arithmetic is left to llama.cpp). Covered by tests/unit/engine/runner/sampling/test_greedy.py.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from app.engine.protocol import SamplingParams


class GreedyPick:
    def __init__(self, last_n: int, repeat_penalty: float):
        self.window: deque[int] = deque(maxlen=max(0, last_n))
        self.counts: dict[int, int] = {}
        self.penalty = np.float32(repeat_penalty)   # llama.cpp keeps it as a float

    def accept(self, tok: int) -> None:
        if self.window.maxlen == 0:
            return
        if len(self.window) == self.window.maxlen:
            old = self.window[0]
            left = self.counts[old] - 1
            if left:
                self.counts[old] = left
            else:
                del self.counts[old]
        self.window.append(tok)
        self.counts[tok] = self.counts.get(tok, 0) + 1

    def pick(self, logits: np.ndarray) -> int:
        """The token of the greedy chain for one row of logits (float32, n_vocab; written to and restored)."""
        if not self.counts or self.penalty == 1.0:
            return int(logits.argmax())
        ids = np.fromiter(self.counts, dtype=np.int64, count=len(self.counts))
        ids = ids[(ids >= 0) & (ids < len(logits))]
        kept = logits[ids]
        logits[ids] = np.where(kept <= 0, kept * self.penalty, kept / self.penalty)
        try:
            return int(logits.argmax())
        finally:
            logits[ids] = kept


def greedy_pick(p: SamplingParams, window: int) -> GreedyPick | None:
    """A GreedyPick when `chain.build_chain(p)` is the greedy pick after at most a repeat penalty over `window`
    tokens (chain.penalty_window), else None."""
    if p.temperature > 0 or p.logit_bias or p.presence_penalty or p.frequency_penalty:
        return None
    return GreedyPick(window if p.repeat_penalty != 1.0 else 0, p.repeat_penalty)
