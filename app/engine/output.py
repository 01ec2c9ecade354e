"""Turning sampled tokens into what a client may see: UTF-8-complete text, stop strings, logprobs.

Everything here is plain Python/numpy over token ids and bytes, so it runs on the output thread while the
context thread decodes the next step.
- `Detokenizer`: token -> piece bytes (cached) -> incremental UTF-8 (a character split across tokens is held
  until complete).
- `StopMatcher`: text that could still be the start of a stop string is held back until resolved, so nothing is
  streamed and then retracted.
- `logprobs_from_logits`: log-softmax of the raw logits in float64, the chosen token and the top N.
"""
from __future__ import annotations

import codecs
import ctypes

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.protocol import TokenLogprob

MAX_TOP_LOGPROBS = 20


class Vocab:
    """Token pieces for one model's vocab (read-only, safe to use from any thread)."""

    def __init__(self, vocab, n_vocab: int):
        self.vocab = vocab
        self.n_vocab = n_vocab
        self._pieces: dict[int, bytes] = {}
        self._buf = ctypes.create_string_buffer(256)

    def piece(self, token: int, special: bool = False) -> bytes:
        key = token if not special else -1 - token
        p = self._pieces.get(key)
        if p is None:
            n = L.llama_token_to_piece(self.vocab, token, self._buf, len(self._buf), 0, special)
            if n < 0:  # buffer too small: -n bytes needed
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
                p = buf.raw[:n]
            else:
                p = self._buf.raw[:n]
            self._pieces[key] = p
        return p

    def text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", "replace")


class Detokenizer:
    """Incremental bytes -> str; keeps an incomplete UTF-8 sequence until its last byte arrives."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token: int) -> str:
        return self._dec.decode(self.vocab.piece(token))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)


class StopMatcher:
    """Streams text, holding back any tail that may begin a stop string.

    push(text) -> (safe_text, stopped). Once stopped, the text up to (not including) the stop string has been
    returned and the rest is dropped. flush() returns whatever is held back when generation ends otherwise.
    """

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.held = ""
        self.stopped = False

    def push(self, text: str) -> tuple[str, bool]:
        if self.stopped:
            return "", True
        if not self.stops:
            return text, False
        buf = self.held + text
        first = -1
        for s in self.stops:
            i = buf.find(s)
            if i != -1 and (first == -1 or i < first):
                first = i
        if first != -1:
            self.held = ""
            self.stopped = True
            return buf[:first], True
        # hold back the longest suffix of buf that is a proper prefix of some stop string
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep], False

    def flush(self) -> str:
        out, self.held = self.held, ""
        return "" if self.stopped else out


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64, copy=True)
    x -= x.max()
    x -= np.log(np.exp(x).sum())
    return x


def logprobs_from_logits(logits: np.ndarray, chosen: int, n_top: int, vocab: Vocab) -> TokenLogprob:
    lp = log_softmax(logits)
    n_top = max(0, min(int(n_top), MAX_TOP_LOGPROBS))
    top = []
    if n_top:
        idx = np.argpartition(-lp, n_top - 1)[:n_top]
        idx = idx[np.argsort(-lp[idx], kind="stable")]
        for t in idx.tolist():
            b = vocab.piece(t)
            top.append((b.decode("utf-8", "replace"), float(lp[t]), list(b)))
    b = vocab.piece(chosen)
    return TokenLogprob(token=b.decode("utf-8", "replace"), logprob=float(lp[chosen]), bytes=list(b), top=top)
