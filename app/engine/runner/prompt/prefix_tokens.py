"""Tokenizing a long prompt that repeats an earlier one: the earlier tokens up to the last special token both texts
share, then only the rest tokenized.

An agent sends its whole conversation on every turn (20-30k tokens of system prompt, tools and history), and every
turn's text was tokenized from the start: ~60-100 ms for 28k tokens on a small CPU, ~25-35 ms on a fast one,
which on a GPU is as long as computing the turn's new tail itself. llama.cpp's tokenizer (parse_special) first
cuts the text at every occurrence of a special token's text (llama-vocab.cpp, `tokenizer_st_partition`) and
tokenizes the pieces between them on their own, each raw piece depending only on its own text and on whether a
special token came before it. So where two texts agree up to and including a special token, the tokens before
that special token are the same, and the tokens of the text from it on are the tokens of that suffix alone.

A remembered tokenization is trusted only where its special tokens pair one to one with the occurrences of their
texts (a special token's text inside another one's, or stripped by a neighbour, fails the count and that token is
not used as a cut); the suffix is tokenized without BOS (the prefix holds whatever the first tokenization added).
Prompts shorter than MIN_CHARS are tokenized whole. Used by admission.Admission.tokens_of on the output thread and
the reader thread (a lock). Covered by tests/unit/engine/runner/prompt/test_prefix_tokens.py.
"""
from __future__ import annotations

import bisect
import threading
from collections import OrderedDict

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.cache.stores import common_prefix_chars
from app.engine.runner.embedding.embeddings import tokenize

MIN_CHARS = 8192            # below this a whole tokenization costs less than looking for a shared prefix
KEPT = 4                    # texts remembered (an agent, its side requests, another client)
SPECIAL = L.LLAMA_TOKEN_ATTR_CONTROL | L.LLAMA_TOKEN_ATTR_USER_DEFINED | L.LLAMA_TOKEN_ATTR_UNKNOWN


class _Entry:
    __slots__ = ("text", "tokens", "cuts", "ends")

    def __init__(self, text: str, tokens: list[int]):
        self.text, self.tokens = text, tokens
        self.cuts: list[tuple[int, int]] | None = None     # (char offset of a special token, its token index)
        self.ends: list[int] = []                          # char offset after each cut's special token


class PrefixTokens:
    def __init__(self, vocab, piece):
        self.vocab = vocab
        self.piece = piece                  # token -> bytes (special=True), text.Vocab.piece
        self._special: dict[int, bool] = {}
        self._kept: OrderedDict[tuple[str, bool], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.reused_chars = 0               # characters not tokenized again, since start (tests, stats)

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        if len(text) < MIN_CHARS:
            return tokenize(self.vocab, text, add_special, True)
        with self._lock:
            kept = [e for (t, a), e in self._kept.items() if a == add_special]
        best, n = None, 0
        for e in kept:
            m = common_prefix_chars(e.text, text)
            if m > n:
                best, n = e, m
        toks = self._spliced(best, text, n) if best is not None and n >= MIN_CHARS else None
        if toks is None:
            toks = tokenize(self.vocab, text, add_special, True)
        with self._lock:
            self._kept[(text, add_special)] = _Entry(text, toks)
            self._kept.move_to_end((text, add_special))
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return list(toks)

    def _spliced(self, e: _Entry, text: str, n: int) -> list[int] | None:
        """`text`'s tokens from `e`'s up to the last special token both share whole, or None."""
        if e.cuts is None:
            self._find_cuts(e)
        assert e.cuts is not None
        i = bisect.bisect_right(e.ends, n) - 1           # the last special token that ends within the shared text
        if i < 0:
            return None
        at, idx = e.cuts[i]
        if at < MIN_CHARS // 2:
            return None
        self.reused_chars += at
        return e.tokens[:idx] + tokenize(self.vocab, text[at:], False, True)

    def _find_cuts(self, e: _Entry) -> None:
        arr = np.asarray(e.tokens, dtype=np.int64)
        ids = np.unique(arr)
        special = np.array([t for t in ids.tolist() if self._is_special(t)], dtype=np.int64)
        where = np.flatnonzero(np.isin(arr, special))
        cuts: list[tuple[int, int, int]] = []
        texts = {int(t): self.piece(int(t), special=True).decode("utf-8", "replace") for t in np.unique(arr[where])}
        for tok, s in texts.items():
            if not s or any(s != o and s in o for o in texts.values()):
                continue                                 # empty, or inside another one's text: pairing unsure
            idxs = where[arr[where] == tok].tolist()
            offsets: list[int] = []
            at = e.text.find(s)
            while at >= 0 and len(offsets) <= len(idxs):
                offsets.append(at)
                at = e.text.find(s, at + len(s))
            if len(offsets) != len(idxs):                # not one to one: this token is never a cut
                continue
            cuts.extend((o, i, o + len(s)) for o, i in zip(offsets, idxs))
        cuts.sort()
        ends = [end for _, _, end in cuts]
        # ends must rise with the offsets for the bisection: special tokens never overlap once paired one to one
        if any(b < a for a, b in zip(ends, ends[1:])):
            cuts, ends = [], []
        e.ends = ends                                    # before `cuts`, which says the entry is ready (another
        e.cuts = [(o, i) for o, i, _ in cuts]            # thread may look at it meanwhile)

    def _is_special(self, tok: int) -> bool:
        """Whether llama.cpp cuts texts at `tok`'s text (its attributes, asked once per token id)."""
        known = self._special.get(tok)
        if known is None:
            known = self._special[tok] = bool(L.llama_vocab_get_attr(self.vocab, tok) & SPECIAL)
        return known
