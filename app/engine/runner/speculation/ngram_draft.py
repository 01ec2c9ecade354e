"""Prompt lookup drafts for speculative decoding: no second model, just the sequence's own tokens.

A reply that repeats its prompt (an edited file printed whole, code completion echoing the code around it, a
summary quoting its source) or itself can be guessed several tokens ahead: find the most recent earlier place where
the last n tokens (prompt + reply so far) occurred, and propose what followed them there (llama.cpp's prompt
lookup, `common_ngram_simple_draft` in common/ngram-map.cpp, looks for one n-gram size; here the longest of
N_MIN..N_MAX that matches wins). A reply that edits what it copies (renames a function through the module it
prints, changes a literal) leaves the copy at the edit and resumes it a few tokens later: what it wrote instead of
what it skipped is learned as a substitution, and later guesses copy through it (the renamed name where the old
one stood, the copy going on after it), so one edit repeated through a file breaks the copy once, not at every
place. A wrong substitution (the reply kept the old tokens there) is forgotten. The step executor verifies the
proposal in one decode with the pending token (step_executor.py, `_sample`): every token is still sampled from the
model, so a wrong draft costs batch rows, never a different reply.

How many of the proposed tokens are decoded is draft_policy.py's call (measured step costs against how far this
sequence's guesses came true, scored here on every guess, drafted or not). Context thread only.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from app.engine.runner.speculation.draft_policy import GuessScore, StepCosts
from app.engine.runner.speculation.proposer import DraftAsk

log = logging.getLogger("strata.engine.draft")

N_MIN, N_MAX = 3, 6          # n-gram sizes looked up, longest first (2-token matches are mostly chance in prose)
MAX_DRAFT = 64               # longest draft (rows of the batch per sequence and step); how long a draft pays is
                             # draft_policy's call from this machine's measured step costs (a quiet 2-core CPU at 1
                             # thread: 65 rows ~23 1-row steps, 33 ~14, so a long copy's 64-token drafts pay there)
DRAFT_PER_MATCH = 2          # a draft is at most this many times as long as the match it extends: a fresh match whose
                             # odds the sequence's earlier runs made high still misses at once as often as not, and a
                             # miss costs all the draft's rows, while a copy grows its drafts as it goes on
SCORED = MAX_DRAFT           # tokens of each guess scored (drafted or not: draft_policy.GuessScore)
MATCH_MAX = 32               # a match is measured back this far at most (draft_policy.MATCH_LENGTHS' last bucket;
                             # with DRAFT_PER_MATCH it allows a MAX_DRAFT draft)
RESUME = 8                   # how far from where the last copy would be by now an occurrence still continues it
SUB_MAX = 8                  # the longest side of a substitution learned from an edit (tokens)
MAX_SUBS = 16                # substitutions kept per sequence (the latest win)
RESUME_CREDIT = True         # a copy resumed after an edit keeps the length it had reached (its odds are a long copy's)
SUB_CONTEXT = True           # a substitution applies only where the token after it is the one it was learned before

# where a copy goes on after a guessed token: the place, the tokens of a substitution still to come there, and the
# substitution whose first token it is (None for a copied token)
Step = tuple[int, tuple[int, ...], tuple[tuple[int, ...], int] | None]


VIEW_END = -(1 << 31)        # closes a view of the prompt in the drafter's tokens: like an image's pseudo-tokens
                             # (negative), it never starts or continues a match
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
    windows, not a scan of the sequence: the prompt's windows sorted once by key (numpy: a few ms for 30k tokens,
    once per request), the reply's in a dict as they come. A lookup then takes microseconds where a scan per
    n-gram size (a C-speed `bytearray.rfind`, four sizes) took hundreds of them over 30k tokens, 5% of a GPU's
    decode step at that context (docs/bench-results.md, "Prompt lookup"). Of the places an n-gram occurred with
    at least one token after it, a lookup takes the one where the copy the sequence was last making would be by
    now (`_place`), else the most recent. Windows holding an image's pseudo-tokens (runner/prompt/media.py) never
    start a match."""

    def __init__(self, tokens, views=()):
        # the prompt's other forms (prompt_views.py) go first, each closed by VIEW_END: a copy found in one goes on
        # there like any other, and where the prompt itself holds the same n-gram its later place wins
        head: list[int] = []
        for view in views:
            head.extend(map(int, view))
            head.append(VIEW_END)
        self.tokens: list[int] = head + list(map(int, tokens))
        self.n_views = len(head)                        # the views' tokens: places below this copy from a view
        # guesses copied from a view are scored apart: a reply that leaves the view's form (writes a newline where
        # the JSON string would escape it) then does not hold back its copies of the prompt as it stands, nor the
        # other way round. `score` is the one of the last guess.
        self._own, self._viewed = GuessScore(), GuessScore()
        self.score = self._own
        self.copied: tuple[int, int] | None = None     # (the place the last guess copied from, len(tokens) then)
        # the last guess: its tokens, for each the place the copy goes on from after it (and the tokens of a
        # substitution still to come there), and len(tokens) when it was made; None after a guess of nothing
        self._last: tuple[list[int], Callable[[int], Step], int] | None = None
        self._break: tuple[int, int] | None = None      # (the place the copy expected, position the reply left it)
        self._run = 0                                   # how long the copy being made has gone on (through edits)
        self.subs: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}   # (old tokens, the token after) -> new
        self._by_first: dict[int, list[tuple[tuple[int, ...], int, tuple[int, ...]]]] = {}   # subs by old[0]
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
        self._own.push(int(token))
        if self.n_views:
            self._viewed.push(int(token))
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
        if self.n_views:
            viewed = bool(guess) and self.copied is not None and self.copied[0] < self.n_views
            self.score, other = (self._viewed, self._own) if viewed else (self._own, self._viewed)
            other.offer([])
        self.score.offer(guess, match)
        return guess[:limit] if limit > 0 else []

    def _guess(self, limit: int) -> tuple[list[int], int]:
        """(what followed the match, the match's length: how many tokens before that place agree with the
        sequence's tail, up to MATCH_MAX; a long one says the reply is copying). A copy whose last guess the
        sequence went on with goes on from where that guess ended (through the substitutions it applied); else the
        longest n-gram match, and a copy resumed a few tokens after the reply left it teaches a substitution."""
        toks = self.tokens
        end = len(toks)
        place, pending = self._follow(end)
        followed = place >= 0
        if place < 0:
            if end <= N_MIN:
                return [], 0
            latest = self._latest_by_size(end)
            for n in range(min(N_MAX, end - 1), N_MIN - 1, -1):
                place = self._place(n, end, latest)
                if place >= 0:
                    break
            if place < 0:
                self._last = None
                return [], 0
        self.copied = (place, end)
        match = 0
        while match < MATCH_MAX and place - match > 0 and toks[place - match - 1] == toks[end - match - 1]:
            match += 1
        if followed:
            run = self._run                      # followed: the same copy goes on
        elif self._break is not None and self._learn(place, match, end):
            run = max(match, self._run if RESUME_CREDIT else 0)     # resumed after an edit
        else:
            run = match
        self._run = run = min(max(run, match, N_MIN), MATCH_MAX)
        out, after = self._copy(place, pending, limit + 1, end)
        self._last = (out, after, end)
        return out[:limit], run

    def _follow(self, end: int) -> tuple[int, tuple[int, ...]]:
        """Where the copy goes on from (and the tokens of a substitution still to come there) when every token
        pushed since the last guess was that guess's; else (-1, ()), and the token that left the guess is noted as
        the place the reply broke off the copy (`_learn` may then see the copy resume)."""
        last = self._last
        if last is None:
            return -1, ()
        out, after, at = last
        d = end - at
        if d <= 0 or d > len(out):
            return -1, ()
        toks = self.tokens
        j = next((i for i in range(d) if toks[at + i] != out[i]), d)
        if j == d:
            self._break = None
            self._run += d
            return after(d - 1)[:2]
        sub = after(j)[2]
        if sub is not None and toks[at + j] == sub[0][0]:
            self._forget(sub)                    # the reply kept the old tokens there: not a rename after all
        expected, rest, _ = after(j - 1) if j else (self.copied[0] if self.copied else -1, (), None)
        self._break = (expected, at + j) if expected >= 0 and not rest else None
        self._run += j
        return -1, ()

    def _learn(self, place: int, match: int, end: int) -> bool:
        """The copy resumed at `place` (its last `match` tokens agreeing) a few tokens after the reply broke off it:
        what the reply wrote instead of what it skipped is a substitution (a renamed name, a changed literal) that
        later copies apply where the same tokens come, followed by the same token. True if it resumed so."""
        assert self._break is not None
        expected, left = self._break
        old_end, new_end = place - match, end - match
        if end - left > 2 * SUB_MAX + N_MAX or new_end - left > SUB_MAX:
            self._break = None                   # too long ago, or too much written: not an edit of the copy
            return False
        if match < N_MIN or not 0 <= old_end - expected <= SUB_MAX or new_end < left:
            return False
        self._break = None
        toks = self.tokens
        old, new = tuple(toks[expected:old_end]), tuple(toks[left:new_end])
        if old and old != new and old_end < end and min(old + new, default=0) >= 0:
            key = (old, toks[old_end] if SUB_CONTEXT else -1)
            self.subs.pop(key, None)
            self.subs[key] = new
            if len(self.subs) > MAX_SUBS:
                del self.subs[next(iter(self.subs))]
            self._index()
        return True

    def _forget(self, key: tuple[tuple[int, ...], int]) -> None:
        self.subs.pop(key, None)
        self._index()

    def _index(self) -> None:
        self._by_first = {}
        for (old, nxt), new in self.subs.items():
            self._by_first.setdefault(old[0], []).append((old, nxt, new))

    def _copy(self, place: int, pending: tuple[int, ...], n: int, end: int):
        """Up to `n` tokens copied from `place` on (after the `pending` tokens of a substitution begun), with the
        learned substitutions applied (the latest learned wins where two start alike); and a function of k: where
        the copy goes on after its k-th token (and the substitution tokens still to come there)."""
        toks, by_first = self.tokens, self._by_first
        if not pending and not by_first:                 # nothing to substitute: a plain slice
            out = toks[place:min(place + n, end)]
            cut = next((i for i, t in enumerate(out) if t < 0), len(out))   # an image's pseudo-tokens
            return out[:cut], lambda k: (place + k + 1, (), None)            # (runner/prompt/media.py) are no text
        out = list(pending[:n])
        steps: list[Step] = [(place, pending[k + 1:], None) for k in range(len(out))]
        i = place
        while len(out) < n and i < end and toks[i] >= 0:
            hit = None
            for old, nxt, new in by_first.get(toks[i], ()):
                j = i + len(old)
                if j < end and (nxt < 0 or toks[j] == nxt) and tuple(toks[i:j]) == old:
                    hit = (j, new, (old, nxt))
            if hit is None:
                out.append(toks[i])
                i += 1
                steps.append((i, (), None))
            else:
                i, new, key = hit
                for k, t in enumerate(new):
                    out.append(t)
                    steps.append((i, new[k + 1:], None if k else key))
        return out[:n], steps.__getitem__

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
                seq.drafter = NgramDrafter(ask.tokens(), seq.views)
            guess = seq.drafter.lookup(limit)
            score = seq.drafter.score
            if self.costs.measured:                    # ("on": every guess whole, for tests)
                guess = guess[:DRAFT_PER_MATCH * (score.match + score.at)]
            chances = score.chances(len(guess))
            n = step.take(chances)
            if log.isEnabledFor(logging.DEBUG):           # STRATA_RUNNER_LOG=DEBUG: why a sequence drafts what it does
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
