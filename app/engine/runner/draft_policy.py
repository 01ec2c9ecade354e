"""How long a draft should be: measured step costs against a sequence's acceptance rate.

Verifying a draft of d tokens makes the step's batch d rows longer. On a GPU that is nearly free; on a CPU it is
not, and the ratio differs by machine and quantization (SmolLM2 Q4_1 on a 2-core EPYC, 1 thread: a 2-row
decode took ~2.5x a 1-row one, 8 rows ~5-8x). So the runner measures it: `StepCosts` fits the seconds of recent
generation-only steps against their batch rows, and a draft is made only when the expected tokens it brings
(1 + a + a^2 + ... + a^d for a per-token acceptance rate a, the geometric model of prompt-lookup drafts) pay for
the longer step in throughput of the whole batch. Before two batch sizes are measured each extra row is guessed
cheap, so the runner tries drafts and learns; a sequence whose drafts fail sees its rate fall and stops drafting,
and its rate drifts back to the prior while it does not draft (so it tries again later, when the text may have
begun to repeat). Context thread only.
"""
from __future__ import annotations

PRIOR_RATE = 0.5             # a sequence's per-token acceptance before it has drafted
PRIOR_WEIGHT = 1.0           # ... counted as this many observations
DECAY = 0.7                  # per verification: older outcomes weigh less (the text changes character)
IDLE_DECAY = 0.9             # per step without a draft: the rate drifts back to the prior (~20 steps)
PRIOR_SLOPE = 0.1            # unmeasured batch sizes: each extra row costs this share of a 1-row step
MIN_GAIN = 1.05              # draft only when the batch's expected throughput rises by at least this factor
COST_ALPHA = 0.2             # weight of a new measurement in a batch size's running mean
COST_DECAY = 0.98            # per recorded step: the weight of older steps in the cost line (~50 steps)
TRUSTED_COUNT = 8            # a batch size measured this often uses its own mean, not the line
MAX_ROWS = 256               # batch sizes measured (larger steps are prefill, not drafts)


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
    """Seconds of a generation-only decode step as a function of its batch rows: a straight line c(k) = a + b*k
    fitted by least squares over recent steps (each older step weighs COST_DECAY less), so one step slowed by
    another process does not turn a draft size cheap or dear; the size measured most (the batch without drafts)
    uses its own running mean. Until two sizes are measured the slope is the prior (PRIOR_SLOPE of a step)."""

    def __init__(self):
        self.mean: dict[int, float] = {}
        self.count: dict[int, int] = {}
        self.sums = [0.0] * 5                  # decayed sums of 1, k, k^2, y, k*y

    def record(self, rows: int, seconds: float) -> None:
        if not (0 < rows <= MAX_ROWS and seconds > 0):
            return
        old = self.mean.get(rows)
        self.mean[rows] = seconds if old is None else old + COST_ALPHA * (seconds - old)
        self.count[rows] = self.count.get(rows, 0) + 1
        w, k = self.sums, float(rows)
        for i, v in enumerate((1.0, k, k * k, seconds, k * seconds)):
            w[i] = w[i] * COST_DECAY + v

    def _line(self) -> tuple[float, float] | None:
        n, sk, skk, sy, sky = self.sums
        var = n * skk - sk * sk
        if n <= 0:
            return None
        if var <= 1e-9 * max(1.0, n * skk):   # one size only: its mean, the prior slope
            a_plus_bk = sy / n
            k = sk / n
            b = a_plus_bk * PRIOR_SLOPE / (1.0 + PRIOR_SLOPE * (k - 1))
            return a_plus_bk - b * k, b
        b = max(0.0, (n * sky - sk * sy) / var)
        return (sy - b * sk) / n, b

    def cost(self, rows: int) -> float:
        """Seconds (relative units before anything is measured) for a step of `rows` rows."""
        if self.count.get(rows, 0) >= TRUSTED_COUNT:
            return self.mean[rows]
        line = self._line()
        if line is None:
            return 1.0 + PRIOR_SLOPE * (rows - 1)
        a, b = line
        return max(a + b * rows, 1e-6)

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


class FixedCosts(StepCosts):
    """Costs that are never measured: each extra row costs PRIOR_SLOPE of a step (STRATA_SPECULATIVE=on)."""

    def record(self, rows: int, seconds: float) -> None:
        pass


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
