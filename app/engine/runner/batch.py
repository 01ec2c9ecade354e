"""A `llama_batch` whose fields point at numpy arrays, so a step's batch is filled with vectorised writes.

Per-element ctypes writes cost ~1 us each; a 512-token prompt chunk would spend more time in Python than in
the kernel on small models. Here every field (`token`, `pos`, `n_seq_id`, `seq_id`, `logits`) is a view of a
numpy array owned by this object; `seq_id` is a table of pointers into one int32 array (one sequence id per
token, which is all the scheduler needs). The runner keeps two of these and alternates (double buffering), so
the next step can be filled while the last one's outputs are still being read.
"""
from __future__ import annotations

import ctypes

import numpy as np
from llama_cpp import llama_cpp as L

_I32P = ctypes.POINTER(ctypes.c_int32)


class NpBatch:
    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError(f"batch capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        # pointer table: seq_id[i] -> &self.seq[i]
        self._seq_ptrs = (self.seq.ctypes.data + 4 * np.arange(capacity, dtype=np.uint64)).astype(np.uint64)
        b = L.llama_batch()
        b.n_tokens = 0
        # llama_cpp annotates these fields as ctypes arrays; in llama.h (and at run time) they are pointers
        b.token = self.token.ctypes.data_as(_I32P)  # type: ignore[assignment]
        b.embd = ctypes.POINTER(ctypes.c_float)()  # type: ignore[assignment]
        b.pos = self.pos.ctypes.data_as(_I32P)  # type: ignore[assignment]
        b.n_seq_id = self.n_seq_id.ctypes.data_as(_I32P)  # type: ignore[assignment]
        b.seq_id = ctypes.cast(self._seq_ptrs.ctypes.data, ctypes.POINTER(_I32P))  # type: ignore[assignment]
        b.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))  # type: ignore[assignment]
        self.struct = b
        self.n = 0

    def clear(self) -> None:
        self.n = 0
        self.struct.n_tokens = 0

    @property
    def free(self) -> int:
        return self.capacity - self.n

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Append one token; returns its row (the index for llama_get_logits_ith)."""
        i = self.n
        if i >= self.capacity:
            raise OverflowError("batch full")
        self.token[i] = token
        self.pos[i] = pos
        self.seq[i] = seq
        self.logits[i] = 1 if logits else 0
        self.n = i + 1
        self.struct.n_tokens = self.n
        return i

    def add_span(self, tokens, pos0: int, seq: int, logits_last: bool, logits_all: bool = False) -> int:
        """Append consecutive tokens of one sequence at positions pos0.. ; returns the row of the last one."""
        k = len(tokens)
        if k == 0:
            raise ValueError("empty span")
        i = self.n
        if i + k > self.capacity:
            raise OverflowError(f"batch full: {k} tokens do not fit in {self.capacity - i}")
        self.token[i:i + k] = tokens
        self.pos[i:i + k] = np.arange(pos0, pos0 + k, dtype=np.int32)
        self.seq[i:i + k] = seq
        self.logits[i:i + k] = 1 if logits_all else 0
        if logits_last:
            self.logits[i + k - 1] = 1
        self.n = i + k
        self.struct.n_tokens = self.n
        return i + k - 1
