"""Prompt lookup drafts for speculative decoding: no second model, just the sequence's own tokens.

A reply that repeats its prompt (an edited file printed whole, code completion echoing the code around it, a
summary quoting its source) or itself can be guessed several tokens ahead: find the most recent earlier place where
the last n tokens (prompt + reply so far) occurred, and propose what followed them there (llama.cpp's prompt
lookup, `common_ngram_simple_draft` in common/ngram-map.cpp, looks for one n-gram size; here the longest of
N_MIN..N_MAX that matches wins). The step executor verifies the proposal in one decode with the pending token
(step_executor.py, `_sample`): every token is still sampled from the model, so a wrong draft costs batch rows,
never a different reply.

How many of the proposed tokens are decoded is draft_policy.py's call (measured step costs against how far this
sequence's guesses came true, scored here on every guess, drafted or not). Context thread only.
"""
from __future__ import annotations

import logging

import numpy as np

from app.engine.runner.speculation.draft_policy import GuessScore, StepCosts
from app.engine.runner.speculation.proposer import DraftAsk

log = logging.getLogger("strata.engine.draft")

N_MIN, N_MAX = 3, 6          # n-gram sizes looked up, longest first (2-token matches are mostly chance in prose)
MAX_DRAFT = 32               # longest draft (rows of the batch per sequence and step); how long a draft pays is
                             # draft_policy's call, and the odds by match length let it grow while a reply copies
SCORED = MAX_DRAFT           # tokens of each guess scored (drafted or not: draft_policy.GuessScore)
MATCH_MAX = 96               # a match is measured back this far at most (draft_policy.MATCH_LENGTHS' last bucket)
RESUME = 8                   # how far from where the last copy would be by now an occurrence still continues it


_BITS = 21                   # a token id fits in 21 bits (every vocabulary < 2M tokens): 3 of them key an int64


def _keys(arr: np.ndarray) -> np.ndarray:
    """The key of each 3-token window of `arr` (int64), -1 where the window holds an image's pseudo-token."""
    a = arr.astype(np.int64)
    k = (a[:-2] << (2 * _BITS)) | (a[1:-1] << _BITS) | a[2:]
    k[(a[:-2] < 0) | (a[1:-1] < 0) | (a[2:] < 0)] = -1
    return k


class NgramDrafter:
    """One sequence's tokens and the score of its guesses.

    `tokens` are the sequence's tokens in order (the prompt, then every token sampled, ending with the one about
    to be decoded). Finding where the sequence's tail occurred before goes through an index of its 3-token
    windows, not a scan of the sequence: the prompt's windows sorted once by key (numpy: ~3 ms for 30k tokens on
    the 2-CPU VM, once per request), the reply's in a dict as they come. A lookup then takes ~7 us where a scan
    per n-gram size (a C-speed `bytearray.rfind`, four sizes) took 160-280 us over 30k tokens on the VM: on the
    H200 that scan cost a 1.8 ms decode step 5% at 30k tokens of context. Of the places an n-gram occurred with
    at least one token after it, a lookup takes the one where the copy the sequence was last making would be by
    now (`_place`), else the most recent. Windows holding an image's pseudo-tokens (runner/prompt/media.py) never
    start a match."""

    def __init__(self, tokens):
        self.tokens: list[int] = list(map(int, tokens))
        self.score = GuessScore()
        self.copied: tuple[int, int] | None = None     # (the place the last guess copied from, len(tokens) then)
        self._prompt = np.fromiter(self.tokens, dtype=np.int64, count=len(self.tokens))
        keys = _keys(self._prompt) if len(self._prompt) >= 3 else np.empty(0, dtype=np.int64)
        order = np.argsort(keys)
        self._sorted = keys[order]
        self._ends = order + 3                          # a window's end: the position right after it
        self._later: dict[int, list[int]] = {}          # key -> ends of the windows ending past the prompt

    def push(self, token: int) -> None:
        """A token the sequence emitted (it will be decoded next, or it already was as an accepted draft)."""
        toks = self.tokens
        toks.append(int(token))
        self.score.push(int(token))
        key = self._key(len(toks))
        if key >= 0:
            self._later.setdefault(key, []).append(len(toks))

    def _key(self, end: int) -> int:
        if end < 3:
            return -1
        a, b, c = self.tokens[end - 3:end]
        return -1 if a < 0 or b < 0 or c < 0 else (a << (2 * _BITS)) | (b << _BITS) | c

    def lookup(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the most recent earlier occurrence of the longest matching tail.
        The guess (up to SCORED tokens, whatever `limit`) is offered to `score`."""
        guess, match = self._guess(max(limit, SCORED))
        self.score.offer(guess, match)
        return guess[:limit] if limit > 0 else []

    def _guess(self, limit: int) -> tuple[list[int], int]:
        """(what followed the match, the match's length: how many tokens before that place agree with the
        sequence's tail, up to MATCH_MAX; a long one says the reply is copying)."""
        toks = self.tokens
        if len(toks) <= N_MIN:
            return [], 0
        end = len(toks)
        latest = self._latest_by_size(end)
        for n in range(min(N_MAX, end - 1), N_MIN - 1, -1):
            e = self._place(n, end, latest)
            if e >= 0:
                self.copied = (e, end)
                match = n
                while match < MATCH_MAX and e - match > 0 and toks[e - match - 1] == toks[end - match - 1]:
                    match += 1
                out = toks[e:min(e + limit, end)]
                cut = next((i for i, t in enumerate(out) if t < 0), len(out))   # an image's pseudo-tokens
                return out[:cut], match                                          # (runner/prompt/media.py) are no text
        return [], 0

    def _latest_by_size(self, end: int) -> dict[int, int]:
        """For each n in N_MIN..N_MAX, the latest place e <= end - 1 (e >= n) right after an occurrence of the
        sequence's last n tokens (at least one token follows it), where there is one."""
        key = self._key(end)
        if key < 0:
            return {}
        toks = self.tokens
        tail = toks[end - N_MAX:end] if end >= N_MAX else toks[:end]
        found: dict[int, int] = {}

        def size(e: int) -> int:                         # how many of the tail's last N_MAX tokens end at e
            n = N_MIN
            while n < min(N_MAX, len(tail)) and e - n - 1 >= 0 and toks[e - n - 1] == tail[-n - 1]:
                n += 1
            return n
        for e in reversed(self._later.get(key, ())):     # windows past the prompt: the latest first
            if e <= end - 1:
                for n in range(N_MIN, size(e) + 1):
                    found.setdefault(n, e)
                if len(found) == N_MAX - N_MIN + 1:
                    return found
        lo, hi = np.searchsorted(self._sorted, [key, key + 1])
        ends = self._ends[lo:hi]
        ends = ends[ends <= end - 1]                      # (the prompt's last window is the tail before a push)
        if len(ends):                                     # windows in the prompt
            ok = np.ones(len(ends), dtype=bool)
            p = self._prompt
            for n in range(N_MIN, N_MAX + 1):
                if n > N_MIN:                            # the token before the (n-1)-gram agrees too
                    if n > len(tail):
                        break
                    at = ends - n
                    ok &= at >= 0
                    ok[ok] &= p[at[ok]] == tail[-n]
                if n not in found and ok.any():
                    found[n] = int(ends[ok].max())
        return found

    def _place(self, n: int, end: int, latest: dict[int, int]) -> int:
        """Of the places the last n tokens occurred, the one nearest to where the copy the sequence was making
        would be by now, within RESUME tokens: a reply that changes what it copies (renames a function in a module
        it prints) goes on copying from there, while the most recent occurrence of a short n-gram is often another
        line (`remove_item(self, name` after `put_item(self, name`). Else the most recent; -1 where none."""
        if self.copied is not None:              # a copy going on is checked first: no search of the sequence
            toks = self.tokens
            tail = toks[end - n:end]
            expect = self.copied[0] + end - self.copied[1]
            best = -1
            for e in range(max(n, expect - RESUME), min(end - 1, expect + RESUME) + 1):
                if (best < 0 or abs(e - expect) < abs(best - expect)) and toks[e - n:e] == tail:
                    best = e
            if best >= 0:
                return best
        return latest.get(n, -1)


class NgramProposer:
    """Prompt lookup behind the step loop's proposer interface (runner/speculation/proposer.py): each sequence's guess from its
    own NgramDrafter, as much of it as pays for its batch rows (draft_policy.DraftStep: how far the sequence's
    guesses came true against the runner's measured step costs), in the order the sequences come, each seeing
    the rows the ones before it took. Every guess is scored, drafted or not."""
    kind = "ngram"
    gated = True

    def __init__(self, costs: StepCosts | None = None):
        self.costs = costs or StepCosts()

    def emitted(self, seq, tokens: list[int]) -> None:
        drafter = seq.drafter
        if drafter is not None:
            for tok in tokens:
                drafter.push(tok)

    def propose(self, asks: list[DraftAsk], n_seqs: int, capacity: int) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        step = self.costs.step(n_seqs)
        for ask in asks:
            seq = ask.seq
            limit = min(ask.limit, capacity - step.rows)
            if limit <= 0:
                continue
            if seq.drafter is None:
                seq.drafter = NgramDrafter(ask.tokens())
            guess = seq.drafter.lookup(limit)
            chances = seq.drafter.score.chances(len(guess))
            n = step.take(chances)
            if log.isEnabledFor(logging.DEBUG):           # STRATA_RUNNER_LOG=DEBUG: why a sequence drafts what it does
                score = seq.drafter.score
                log.debug("draft %s gen=%d match=%d+%d guess=%d p1=%.2f p%d=%.2f take=%d costs=%s", seq.id, seq.n_gen,
                          score.match, score.at, len(guess), chances[0] if chances else 0.0, len(chances),
                          chances[-1] if chances else 0.0, n, [(r, round(c, 2)) for r, c in self.costs.points()])
            if n:
                out[seq.id] = guess[:n]
        return out

    def verified(self, seq, n_held: int, n_drafted: int, n_accepted: int) -> None:
        pass                                # (its guess was scored token by token already: `emitted`)

    def close(self) -> None:
        pass
