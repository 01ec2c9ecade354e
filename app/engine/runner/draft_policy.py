"""Whether and how long to draft: a sequence's acceptance rate, and the measured speed of steps with drafts.

Verifying a draft of d tokens makes the step's batch d rows longer. On a GPU that is nearly free; on a CPU it is
not, and the ratio differs by machine and quantization (SmolLM2 Q4_1 on a 2-core EPYC, 1 thread: a 2-row
decode took ~2.5x a 1-row one, 8 rows ~5-8x; yet llama-server's 16-48-token n-gram drafts ran Qwen2.5-Coder
Q4_K edits 1.8x faster on the same CPU).
So the length of a draft follows the sequence's acceptance rate a (the expected tokens 1 + a + ... + a^d of the
geometric model of prompt-lookup drafts, against rows assumed cheap), and `DraftGate` measures whether steps with
drafts really emit more tokens per second than steps without, stopping drafts for a while when they do not. A
sequence whose drafts fail sees its rate fall and stops drafting; its rate drifts back to the prior while it does
not draft (so it tries again later, when the text may have begun to repeat). Context thread only.
"""
from __future__ import annotations

PRIOR_RATE = 0.7             # a sequence's per-token acceptance before it has drafted (optimistic: it must try)
PRIOR_WEIGHT = 1.0           # ... counted as this many observations
DECAY = 0.7                  # per verification: older outcomes weigh less (the text changes character)
IDLE_DECAY = 0.9             # per step without a draft: the rate drifts back to the prior (~20 steps)
PRIOR_SLOPE = 0.1            # unmeasured batch sizes: each extra row costs this share of a 1-row step
MIN_GAIN = 1.05              # draft only when the batch's expected throughput rises by at least this factor


class AcceptanceRate:
    """A sequence's recent per-token acceptance: accepted draft tokens vs drafts that ended in a mismatch."""

    def __init__(self):
        self.ok = 0.0
        self.miss = 0.0

    @property
    def rate(self) -> float:
        return (self.ok + PRIOR_RATE * PRIOR_WEIGHT) / (self.ok + self.miss + PRIOR_WEIGHT)

    def update(self, n_drafted: int, n_accepted: int) -> None:
        self.ok = self.ok * DECAY + n_accepted
        self.miss = self.miss * DECAY + (1 if n_accepted < n_drafted else 0)

    def idle(self) -> None:
        """A step without a draft: the evidence ages, the rate drifts back toward the prior."""
        self.ok *= IDLE_DECAY
        self.miss *= IDLE_DECAY


class StepCosts:
    """What a draft's rows are assumed to cost: each extra row PRIOR_SLOPE of a one-row step. Measured costs were
    tried first (a line fitted to recent steps' seconds against their rows) and failed on CPUs: the cost per row
    is not a line (small batches cost several 1-row steps, long drafts far less per row), and a
    few early steps slowed by other work locked drafting off for good. So the length follows the acceptance rate
    alone and `DraftGate` judges, by the tokens per second that drafts actually bring, whether to draft at all."""

    def cost(self, rows: int) -> float:
        return 1.0 + PRIOR_SLOPE * (rows - 1)

    def best_length(self, rate: float, n_seqs: int, base_rows: int, limit: int) -> int:
        """The draft length (0..limit) that maximizes the batch's expected tokens per second, given `n_seqs`
        generating sequences in `base_rows` rows so far; 0 unless it beats no draft by MIN_GAIN."""
        if limit <= 0 or n_seqs <= 0:
            return 0
        base = n_seqs / self.cost(base_rows)
        best, best_tps = 0, base * MIN_GAIN
        expected, term = 1.0, 1.0            # tokens this sequence emits: 1 + a + ... + a^d
        for d in range(1, limit + 1):
            term *= rate
            expected += term
            tps = (n_seqs - 1 + expected) / self.cost(base_rows + d)
            if tps > best_tps:
                best, best_tps = d, tps
        return best


TRIAL_STEPS = 24             # steps with drafts (and as many without) before the gate compares their speed
VETO_MIN, VETO_MAX = 64, 4096    # steps without drafts after a losing comparison (doubling while drafts keep losing)
RATE_DECAY = 0.97            # per step: the weight of older steps in the tokens-per-second comparison


class DraftGate:
    """The final word, measured: are steps with drafts emitting more tokens per second of decode than steps
    without? The line in `StepCosts` chooses a draft's length from a model of step costs; on a machine shared with
    other work that model can be wrong for long stretches, so the runner also compares what it gets. When steps
    with drafts lose, drafting stops for VETO_MIN steps (doubling each time it loses again, up to VETO_MAX), then
    is tried again."""

    def __init__(self):
        self.tok = {True: 0.0, False: 0.0}      # decayed tokens emitted, by "the step had drafts"
        self.sec = {True: 0.0, False: 0.0}      # decayed decode seconds
        self.n = {True: 0, False: 0}            # steps since the last verdict
        self.veto = 0
        self.veto_len = VETO_MIN

    def allow(self) -> bool:
        """Called once per step before drafting."""
        if self.veto > 0:
            self.veto -= 1
            return False
        return True

    def record(self, drafted: bool, tokens: int, seconds: float) -> None:
        if seconds <= 0:
            return
        for k in (True, False):
            self.tok[k] *= RATE_DECAY
            self.sec[k] *= RATE_DECAY
        self.tok[drafted] += tokens
        self.sec[drafted] += seconds
        self.n[drafted] += 1
        if self.n[True] < TRIAL_STEPS or self.n[False] < TRIAL_STEPS:
            return
        with_drafts, without = self.tok[True] / self.sec[True], self.tok[False] / self.sec[False]
        self.n[True] = 0
        if with_drafts < without:
            self.veto, self.veto_len = self.veto_len, min(VETO_MAX, self.veto_len * 2)
            self.tok[True] = self.sec[True] = 0.0
        else:
            self.veto_len = max(VETO_MIN, self.veto_len // 2)


class OpenGate(DraftGate):
    """Never vetoes (STRATA_SPECULATIVE=on)."""

    def record(self, drafted: bool, tokens: int, seconds: float) -> None:
        pass
