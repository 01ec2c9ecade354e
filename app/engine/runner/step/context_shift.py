"""Context shift: a generating sequence filled its context, so the oldest half after the kept prefix goes.

Done between steps by the slot table (slots.py), before the step scheduler writes the sequence's row, whose
position depends on it (Ollama's and llama-server's rule: keep `n_keep` tokens, drop half of the rest).
Covered by tests/integration/engine/test_runner.py (context shift on a real runner, with and without
can_shift).
"""
from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.sequence import PREFILL, Seq


def context_shift(seq: Seq, mem, can_shift: bool, prompt_cache: PromptCache) -> None:
    assert seq.slot is not None             # a full context is a generating sequence's, in its slot
    n_keep = min(seq.adm.n_keep, max(0, seq.n_past - 2))
    n_discard = (seq.n_past - n_keep) // 2
    if can_shift and not prompt_cache.shares_cells(seq.slot):
        L.llama_memory_seq_rm(mem, seq.slot, n_keep, n_keep + n_discard)
        L.llama_memory_seq_add(mem, seq.slot, n_keep + n_discard, seq.n_past, -n_discard)
        prompt_cache.shifted(seq)
        seq.n_past -= n_discard
        seq.history = seq.history[:n_keep] + seq.history[n_keep + n_discard:]
        seq.n_exact = n_keep if seq.n_exact is None else min(seq.n_exact, n_keep)
    else:  # cannot shift (e.g. recurrent / some SWA caches), or cells shared with another sequence (a shift
        # would move them for both): clear this sequence's cells and re-process the kept window
        window = seq.history[:n_keep] + seq.history[n_keep + n_discard:] + [seq.pending]
        L.llama_memory_seq_rm(mem, seq.slot, -1, -1)
        prompt_cache.shifted(seq, cleared=True)
        seq.history, seq.n_past, seq.n_exact = [], 0, None
        seq.prompt, seq.todo, seq.state = np.asarray(window, dtype=np.int32), 0, PREFILL
