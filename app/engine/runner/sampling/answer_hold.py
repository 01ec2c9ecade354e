"""A reply that opens with text (`GenerateRequest.bar_calls`): the second try of a reply that only repeated the
calls whose results the conversation ends with (service/generation/repeat_guard.py).

While the reply has written nothing but whitespace, a pick that would end it (an end-of-generation token, or a
control token a reply never shows, such as a new turn's `<|im_start|>`) or open a call (opens_call) is replaced
by the best token that does neither, as vLLM's `min_tokens` masks the stop tokens; the first other token ends the
hold (a thinking block may open the reply), and at most HOLD_TOKENS tokens are held, so a model that only writes
whitespace still ends. The mask is on the logits the sampler reads and is taken off after the pick, so logprobs
show the model's own distribution. AnswerHold keeps what it refuses apart from what it masks, so a rule may let
the model's own pick of a token stand that it would not choose for it.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np
from llama_cpp import llama_cpp as L

HOLD_TOKENS = 32

_ends: dict[int, np.ndarray] = {}          # vocab pointer -> ids of its end-of-generation and control tokens
_ends_lock = threading.Lock()


def end_tokens(vocab, n_vocab: int) -> np.ndarray:
    """The ids of `vocab`'s end-of-generation tokens and its control tokens (read once per vocabulary)."""
    key = ctypes.cast(vocab, ctypes.c_void_p).value or 0
    with _ends_lock:
        ids = _ends.get(key)
        if ids is None:
            ids = _ends[key] = np.fromiter(
                (t for t in range(n_vocab) if L.llama_vocab_is_eog(vocab, t) or L.llama_vocab_is_control(vocab, t)),
                dtype=np.int64)
        return ids


_starts: dict[int, np.ndarray] = {}        # vocab pointer -> ids of the tokens that can open a call


def opens_call(piece: bytes) -> bool:
    """A token whose text can begin a tool call: after any whitespace, a JSON object or list (a bare call, a list
    of calls, Gemma's `[f(...)]`), a Markdown fence (a fenced call), a marker (every family's call markers begin
    with `<` or `[`: `<tool_call>`, `<|python_tag|>`, `[TOOL_CALLS]`, gpt-oss's `<|channel|>`...), or one of the
    stray characters the lazy grammar admits before a brace (tool_grammar._BARE_START: `>{"`)."""
    t = piece.lstrip()
    if not t:
        return False
    if t[:1] in (b"{", b"[", b"<", b"`"):
        return True
    return t[:1] in (b">", b",", b"(", b":") and (len(t) == 1 or t[1:2] in (b"{", b"["))


def call_start_tokens(vocab, n_vocab: int) -> np.ndarray:
    """The ids of `vocab`'s tokens that can open a call (opens_call, special tokens as their text), read once
    per vocabulary."""
    key = ctypes.cast(vocab, ctypes.c_void_p).value or 0
    with _ends_lock:
        ids = _starts.get(key)
        if ids is None:
            buf = ctypes.create_string_buffer(256)
            out = []
            for t in range(n_vocab):
                n = L.llama_token_to_piece(vocab, t, buf, len(buf), 0, True)
                if n > 0 and opens_call(buf.raw[:n]):
                    out.append(t)
            ids = _starts[key] = np.asarray(out, dtype=np.int64)
        return ids


class AnswerHold:
    """While the reply has written nothing but whitespace: a pick in `refused` is replaced by the best token not in
    `masked` (both id arrays). `piece(tok, special=True)` gives a token's bytes."""

    def __init__(self, refused: np.ndarray, masked: np.ndarray, piece, limit: int = HOLD_TOKENS):
        self.refused = frozenset(int(t) for t in refused)
        self.ids = masked
        self.piece = piece
        self.left = limit
        self.active = limit > 0 and len(self.refused) > 0

    def refuses(self, tok: int) -> bool:
        return tok in self.refused

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """Mask the held tokens in this row of logits (written in place); returns what to put back (unmask)."""
        kept = logits[self.ids].copy()
        logits[self.ids] = -np.inf
        return kept

    def unmask(self, logits: np.ndarray, kept: np.ndarray) -> None:
        logits[self.ids] = kept

    def seen(self, tok: int) -> None:
        """Account for the token the reply got: the hold ends at the first one that is not whitespace."""
        if not self.active:
            return
        self.left -= 1
        if self.left <= 0 or self.piece(tok, special=True).strip():
            self.active = False
