"""Whether and how long to draft: how often this sequence's guesses come true, against what extra batch rows
measurably cost on this machine. Context thread only.

Why both sides are measured: verifying a draft of d tokens makes the step's batch d rows longer, and what a row
costs differs by machine by an order of magnitude. On a GPU it is nearly free; on a 2-core CPU (Qwen2.5-Coder-0.5B
Q4_K_M, 1 thread) a 2-row decode takes 2.3-2.5x a 1-row one, 4 rows 2.6-4.3x, 8 rows 4-6x, 16 rows 6-7x. There a
1-token draft never pays and a 16-token draft pays only when ~7 of its tokens come true: drafting free text (29% of
drafted tokens accepted) as if rows were free costs more than it gains, while edits (~90% accepted) gain 1.4-1.9x.
Nothing is spent to learn either side:
- `GuessScore`: every step the drafter guesses (ngram_draft.py), drafted or not, and the tokens the sequence
  then emits say how far that guess came true. A draft is accepted exactly while the sampled token equals it,
  so a guess that was never decoded measures the same thing as one that was ("shadow" drafts). Each guessed
  token is scored by the length of the match it extends (how many tokens of the sequence's tail agree with the
  text before the place the guess copies, counting the guess's tokens confirmed so far): a fresh 3-token match
  is chance more often than not, a reply 40 tokens into copying its prompt goes on for long, so the draft
  length grows with the match. A sequence starts from a pessimistic prior and its own outcomes only, so the
  same request drafts the same way each time it is sent. Nothing scales the odds by how the drafts themselves
  did: such a factor could only be raised again by drafting, so one early miss would freeze it and a reply
  could go on copying its prompt for dozens of tokens undrafted.
- `StepCosts`: the decode seconds of every generation step by its rows (recent medians, in buckets of row
  counts), each over the pace of the moment (what a 1-row step takes now), so the cost of d more rows is this
  machine's and a shared machine's load changes cancel out (in plain seconds, a bucket measured while other work
  ran would be compared with 1-row steps measured when it was idle, and hold back drafts whose guesses keep coming
  true); rows never measured are scaled from the nearest measured ones by a CPU-like prior shape (rows **
  PRIOR_EXP, a little dearer than measured).
A step drafts d tokens for a sequence when the batch's expected tokens per second with them beat those without
by MIN_GAIN (`DraftStep`). Free text then drafts (almost) never: its guesses rarely run long enough to pay.
Covered by tests/unit/engine/runner/speculation/test_draft_policy.py.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from statistics import median

MATCH_LENGTHS = (3, 4, 5, 6, 8, 12, 16, 24, 32)   # a guessed token is scored in the bucket of the last of these <=
                             # the match it extends (tokens the sequence's tail agrees with the text before the place
                             # it copies from, counting the guess's confirmed tokens): a fresh 3-token match is chance
                             # more often than not, a reply 40 tokens into copying its prompt is not. Matches of 32 and
                             # more share one bucket: past 32 a copy's odds grow no further (99% a token on the bench's
                             # replies), and pooled, the rare miss where a long copy meets an edit is weighed against
                             # all the hits of long copies, not against the few that reached its own length
PRIOR_HIT = (0.4, 0.5, 0.6, 0.65, 0.75, 0.85, 0.9, 0.93, 0.98)   # each bucket's chance before any outcome: at or
                             # below what every kind of reply showed (the bench's workloads, a token's odds by its match:
                             # 3 0.57, 4 0.68, 5 0.82, 6 0.83, 8 0.91, 12-24 0.93, 32+ 0.99), pessimistic for short
                             # matches (a sequence must show it repeats; JSON's own keys and free text 0.4-0.5);
                             # never below the next shorter bucket's estimate (a sequence that copies at 6 tokens
                             # copies at 8)
PRIOR_WEIGHT = (2, 2, 2, 2, 2, 2, 2, 16, 16)   # ... counted as this many outcomes (which fade like any other): a
                             # long copy's odds are the prior's until many outcomes say otherwise, so one miss where a
                             # copy meets an edit does not hold back the next long copy's 64-token drafts
DECAY = 0.95                 # per outcome in a bucket: older outcomes weigh less (the text changes character)
TOKEN_PRIOR: float | None = 1.0   # a guessed token's odds are also its own (None: not): how often this sequence's
                             # guesses of that very token came true, with its bucket's odds counted as this many
                             # outcomes. An edit repeats where it happened before (a renamed name, a line ending the
                             # reply escapes, a type hint after each parameter, a value after each JSON key), so a
                             # draft stops short of a token the reply did not copy last time, and runs on through
                             # the tokens it always copied
TOKEN_DECAY = 0.95           # ... those outcomes fading per outcome of the same token

PRIOR_EXP = 0.8              # unmeasured rows cost rows ** PRIOR_EXP of a 1-row step, or scaled from the nearest
                             # measured bucket by it: a little dearer than the EPYC's (0.7 past 8 rows), as rows
                             # that are never tried stay unmeasured: err on the side of not drafting
SAMPLES = 31                 # recent decode times kept per bucket of row counts (their median is its cost)
MIN_SAMPLES = 3              # ... needed before a row count's own median is used
MAX_AGE = 256                # steps after which a sample no longer counts: the machine's load changes (a bucket
                             # measured while other work ran would otherwise veto drafts for good), so a bucket
                             # not drafted for a while falls back to the prior from the fresh ones and is tried again
PACE_RATE = 0.05             # weight of each step in the moving pace (a 1-row step's seconds now): load changes
                             # within seconds on a shared machine, a bucket ratio only with the batch's shape; a
                             # faster pace (0.2) lets single steps' noise (~15%) into the buckets, and the same
                             # request's drafts then come out 0.7-1.5x as long from one run to the next
MIN_GAIN = 1.15              # draft only when the batch's expected tokens per second rise by at least this factor


class GuessScore:
    """How far one sequence's guesses come true, by the length of the match each guessed token extends. `offer`
    each step's guess (drafted or not) with its match length, `push` every token the sequence emits. The guess
    being scored is kept while the new ones continue it (a run that keeps coming true is one growing match)."""

    def __init__(self):
        self.hit = [0.0] * len(MATCH_LENGTHS)
        self.seen = [0.0] * len(MATCH_LENGTHS)
        self.guess: list[int] = []
        self.at = 0                          # positions of `guess` already confirmed
        self.match = 0                       # the match `guess[0]` extends
        self._rates: list[float] | None = None
        self.by_token: dict[int, list[float]] = {}     # a guessed token -> [came true, outcomes] (fading)

    def offer(self, guess: list[int], match: int = MATCH_LENGTHS[0]) -> None:
        rest = self.guess[self.at:]
        k = min(len(rest), len(guess))
        if k and rest[:k] == guess[:k]:
            self.guess = self.guess[:self.at] + list(guess)      # the same run, maybe seen further now
        else:
            self.guess, self.at, self.match = list(guess), 0, match

    def push(self, token: int) -> None:
        if self.at >= len(self.guess):
            return
        i = match_bucket(self.match + self.at)
        guessed = self.guess[self.at]
        ok = token == guessed
        if TOKEN_PRIOR is not None:
            t = self.by_token.setdefault(guessed, [0.0, 0.0])
            t[0] = t[0] * TOKEN_DECAY + ok
            t[1] = t[1] * TOKEN_DECAY + 1
        self.seen[i] = self.seen[i] * DECAY + 1
        self.hit[i] = self.hit[i] * DECAY + ok
        self._rates = None
        if ok:
            self.at += 1
        else:
            self.guess, self.at = [], 0

    def rates(self) -> list[float]:
        """Each bucket's chance that a guessed token comes true: its outcomes, with PRIOR_WEIGHT more at its
        PRIOR_HIT or the next shorter bucket's chance, whichever is higher."""
        if self._rates is None:
            out, below = [], 0.0
            for h, n, prior, w in zip(self.hit, self.seen, PRIOR_HIT, PRIOR_WEIGHT):
                below = (h + w * max(prior, below)) / (n + w)
                out.append(below)
            self._rates = out
        return self._rates

    def chances(self, n: int) -> list[float]:
        """P(the first i tokens of the offered guess all come true), i = 1..n (the guess last offered): each token's
        bucket odds, weighed with the token's own outcomes in this sequence."""
        rates, out, p = self.rates(), [], 1.0
        guess, by_token = self.guess, self.by_token
        for j in range(n):
            r = rates[match_bucket(self.match + self.at + j)]
            if TOKEN_PRIOR is not None and self.at + j < len(guess):
                t = by_token.get(guess[self.at + j])
                if t is not None:
                    r = (t[0] + TOKEN_PRIOR * r) / (t[1] + TOKEN_PRIOR)
            p *= r
            out.append(p)
        return out


def match_bucket(length: int) -> int:
    return max(0, bisect_right(MATCH_LENGTHS, length) - 1)


def bucket(rows: int) -> int:
    """Row counts measured together: each of 1-4 alone (a generation step's own rows), then 5-8, 9-16, 17-32..."""
    return rows if rows <= 4 else 2 + (rows - 1).bit_length()


class StepCosts:
    """Decode seconds of generation steps by their rows, measured (`record`) unless `measured` is False (then
    every draft is taken whole: STRATA_SPECULATIVE=on, for tests). Drafts come in many lengths, so steps are
    measured in buckets of row counts (`bucket`), each step's seconds scaled to the bucket's typical rows by the
    prior shape: a bucket is known after MIN_SAMPLES steps of any lengths in it."""

    def __init__(self, measured: bool = True):
        self.measured = measured
        self.samples: dict[int, deque] = {}          # bucket -> recent (step number, rows, seconds)
        self.n = 0                                    # steps recorded
        self.pace: float | None = None                # seconds of a 1-row step now (moving; samples are / this)
        self._points: list[tuple[int, float]] | None = None

    def record(self, rows: int, seconds: float) -> None:
        """A step's decode seconds, kept relative to the machine's pace at that moment (`pace`: a moving value of
        what a 1-row step takes now, from every step through the bucket ratios known so far), so a draft bucket
        measured while other work ran compares with a 1-row step measured when it was idle as it did then."""
        if seconds > 0 and rows > 0:
            ratio = self.cost(rows)                  # this many rows against 1, as measured so far (1 for 1 row)
            if self.pace is None:
                self.pace = seconds / ratio
            self.n += 1
            if rows > 1:                             # a 1-row step is the unit: it only sets the pace
                self.samples.setdefault(bucket(rows), deque(maxlen=SAMPLES)).append(
                    (self.n, rows, seconds / self.pace))
            self.pace += PACE_RATE * (seconds / ratio - self.pace)
            self._points = None

    def points(self) -> list[tuple[int, float]]:
        """(typical rows, cost relative to a 1-row step at the time) of each measured bucket, by rows (1 row: 1)."""
        if self._points is None:
            pts = [(1, 1.0)]
            for s in self.samples.values():
                fresh = [(n, t) for i, n, t in s if i > self.n - MAX_AGE]
                if len(fresh) >= MIN_SAMPLES:
                    r = int(median(n for n, _ in fresh))
                    pts.append((r, median(t * (r / n) ** PRIOR_EXP for n, t in fresh)))
            self._points = sorted(pts)
        return self._points

    def cost(self, rows: int) -> float:
        """What a step of `rows` rows costs in units of a 1-row step at the same moment: interpolated
        between the measured buckets in log-log, scaled by the prior shape outside them or before any. Between
        1 row and the first measured bucket, at least the prior shape (up to that bucket's cost): a CPU's first
        extra rows are its dearest (2 rows 2.4x, 19 rows 7x): a straight line from 1 to 19 rows would put 3 rows
        at 2.1x, and free text's chance repeats would look worth a short draft."""
        pts = self.points()
        lo = next((p for p in reversed(pts) if p[0] <= rows), None)
        hi = next((p for p in pts if p[0] >= rows), None)
        if lo is None or hi is None or lo[0] == hi[0]:
            point = lo or hi
            assert point is not None             # pts is not empty: a bucket lies on one side of `rows` at least
            r, c = point
            return c * (rows / r) ** PRIOR_EXP
        w = math.log(rows / lo[0]) / math.log(hi[0] / lo[0])
        between = math.exp(math.log(lo[1]) * (1 - w) + math.log(hi[1]) * w)
        if lo[0] == 1:
            return max(between, min(rows ** PRIOR_EXP, hi[1]))
        return between

    def step(self, n_seqs: int) -> "DraftStep":
        return DraftStep(self, n_seqs)


class DraftStep:
    """One step's drafting decisions, sequence by sequence: each sees the rows (and expected tokens) the ones
    before it took."""

    def __init__(self, costs: StepCosts, n_seqs: int):
        self.costs, self.rows, self.tokens = costs, n_seqs, float(n_seqs)

    def take(self, chances: list[float]) -> int:
        """How many tokens of a guess to draft, given P(its first i tokens come true) for i = 1..len: the length
        that maximizes the batch's expected tokens per second, 0 unless that beats no draft by MIN_GAIN."""
        if not chances:
            return 0
        if not self.costs.measured:
            self.rows += len(chances)
            return len(chances)
        cost = self.costs.cost
        best, best_tps, best_extra = 0, self.tokens / cost(self.rows) * MIN_GAIN, 0.0
        extra = 0.0
        for d, p in enumerate(chances, 1):
            extra += p
            tps = (self.tokens + extra) / cost(self.rows + d)
            if tps > best_tps:
                best, best_tps, best_extra = d, tps, extra
        self.rows += best
        self.tokens += best_extra
        return best
