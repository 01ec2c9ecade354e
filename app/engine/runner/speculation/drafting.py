"""Speculative decoding's per-step choices (docs/architecture.md, "Speculative decoding"): whether this runner
drafts at all (`speculation`), and, in the step executor right after sampling (as vLLM v1's worker drafts), what
the step's verification gave (the proposer learns it, the totals count it) and which tokens each sequence that
goes on generating drafts for its next step (`Drafting.after_step`, through the proposer). The update hands the
drafts to the sequences; the next plan verifies them.
Covered by tests/integration/engine/test_speculative.py and test_draft_model.py.
"""
from __future__ import annotations

import logging

from llama_cpp import llama_cpp as L

from app.engine.runner.decode_abort import DecodeAbort
from app.engine.runner.sequence import Seq
from app.engine.runner.speculation.draft_policy import StepCosts
from app.engine.runner.speculation.ngram_draft import MAX_DRAFT, NgramProposer
from app.engine.runner.speculation.proposer import DraftAsk
from app.engine.runner.step_plan import Proposal, Sampled, StepPlan

log = logging.getLogger("strata.engine.draft")

# On by default where it pays: "auto" drafts only once a sequence's guesses have come true often enough to pay for
# their rows at this machine's measured step costs (draft_policy.py), so free text, whose guesses rarely run long,
# drafts nothing and loses nothing, while a reply that copies its prompt (an edit) gains (bench/bench_speculative.py
# measures both against the same engine without drafts).
DEFAULT_SPECULATION = "auto"


def speculation(model, setting: str | None = None, draft_model: bool = False) -> tuple[bool, int, bool]:
    """(on, longest draft, drafts weighed against their measured cost) for this runner, from `setting` (the
    service's STRATA_SPECULATIVE, app/engine/runner_settings.py; empty: DEFAULT_SPECULATION): "auto" drafts prompt
    lookup's guesses where they have come true often enough to pay for the rows they take on this machine
    (draft_policy.py); "on" always drafts the whole guess (tests); "off"/"0" never drafts; a number is "auto" with
    that longest draft. Off for a recurrent or hybrid model: its state cannot drop the rejected tokens by position.
    With a draft model (the model's `draft` option) it is on unless the setting says off: the user chose it."""
    raw = (setting or "").strip().lower() or ("on" if draft_model else DEFAULT_SPECULATION)
    if raw in ("off", "0", "false", "no", "none"):
        return False, 0, False
    if L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model):
        return False, 0, False
    return True, int(raw) if raw.isdigit() else MAX_DRAFT, raw not in ("on", "always", "1", "true", "yes")


class Drafting:
    """This runner's drafting: on or off, what proposes (runner/speculation/proposer.py: the layout's draft model when it has
    one, else prompt lookup), the measured step costs prompt lookup weighs its drafts by, and the totals stats
    report."""

    def __init__(self, model, n_ctx_seq: int, abort: DecodeAbort, setting: str | None = None, draft=None):
        self.on, self.max_draft, measured = speculation(model, setting, draft is not None)
        self.n_ctx_seq = n_ctx_seq
        self.abort = abort
        self.costs = StepCosts(measured)     # decode seconds by rows (draft_policy.py): what a draft's rows cost
        self.proposer = draft if draft is not None else NgramProposer(self.costs)
        self.drafted_total = self.accepted_total = 0
        if draft is not None:               # a cancel stops the draft model's decodes the same way
            draft.attach_abort(abort)

    def after_step(self, plan: StepPlan, sampled: list[Sampled], t_decode: float) -> list[Proposal]:
        """Execute phase, after sampling a successful decode: the step's cost by rows (a generation-only step),
        what each sequence emitted and how its draft fared (the proposer's and the totals' bookkeeping), then the
        drafts of the next step for every sequence that goes on generating, in slot order. A cancel arriving
        meanwhile aborts the draft model's decode that holds its sequence (no drafts from that decode on; a
        cancel that landed as the step's own decode ended stops nothing here: decode_abort.py)."""
        if not self.on:
            return []
        if plan.gen_only:
            self.record_step(plan.batch.n, t_decode)
        proposer = self.proposer
        going_on = []
        for s in sampled:
            seq = s.span.seq
            if s.tokens:
                proposer.emitted(seq, [t.token for t in s.tokens])
            if s.n_drafted:
                self._verified(s)
            if not s.reason and not seq.cancelled and not seq.out.reason:
                going_on.append(s)
        if not going_on:
            return []
        if len(going_on) > 1:
            going_on.sort(key=lambda s: s.span.seq.slot or 0)
        asks = []
        for s in going_on:
            n = self.limit(s)
            if n > 0:
                asks.append(DraftAsk(s.span.seq, n, [t.token for t in s.tokens], s.span))
        if not asks:
            return []
        drafts = proposer.propose(asks, len(going_on), plan.batch.capacity)
        return [Proposal(a.seq, d) for a in asks if (d := drafts.get(a.seq.id))]

    def limit(self, s: Sampled) -> int:
        """The longest draft `s`'s sequence may decode next step: 0 when speculation is off (runner, request, or a
        model whose memory cannot drop cells by position), else bounded by the context and the reply's token
        limit, as the sequence stands once this step is applied."""
        span, seq = s.span, s.span.seq
        if not (self.on and seq.speculate) or seq.req.num_predict == 0:
            return 0
        n_past = span.pos0 + (span.n if span.prefill else 1 + s.n_accepted)
        limit = min(self.max_draft, self.n_ctx_seq - n_past - 1)
        if seq.req.num_predict > 0:
            limit = min(limit, seq.req.num_predict - (seq.n_gen + len(s.tokens)) - 1)
        return max(0, limit)

    def _verified(self, s: Sampled) -> None:
        """A verified draft: count it and tell the proposer (the executor removed the rejected cells from KV)."""
        seq, n_draft, n_ok = s.span.seq, s.n_drafted, s.n_accepted
        self.drafted_total += n_draft
        self.accepted_total += n_ok
        self.proposer.verified(seq, s.span.pos0 + 1 + n_ok, n_draft, n_ok)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("verified %s drafted=%d accepted=%d", seq.id, n_draft, n_ok)

    def record_step(self, rows: int, t_decode: float) -> None:
        """A generation-only step's decode seconds by its rows (with or without drafts), for draft_policy.StepCosts."""
        self.costs.record(rows, t_decode)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("step rows=%d ms=%.1f pace=%.1f ms", rows, t_decode * 1000, (self.costs.pace or 0.0) * 1000)
