"""Speculative decoding's per-step choices (docs/architecture.md, "Speculative decoding"): whether this runner
drafts at all (`speculation`), which tokens each generating sequence drafts this step (`Drafting.drafts`, through
the proposer), and the bookkeeping after verification (`Drafting.settle`). The scheduler asks; the executor
verifies while sampling.
Covered by tests/integration/engine/test_speculative.py and test_draft_model.py.
"""
from __future__ import annotations

import logging

from llama_cpp import llama_cpp as L

from app.engine.runner.decode_abort import DecodeAbort
from app.engine.runner.draft_policy import StepCosts
from app.engine.runner.ngram_draft import MAX_DRAFT, NgramProposer
from app.engine.runner.sequence import Seq

log = logging.getLogger("strata.engine.draft")

# On where it pays: "auto" drafts only once a sequence's guesses have come true often enough to pay for their rows
# at this machine's measured step costs (draft_policy.py), so free text, whose guesses rarely run long, drafts
# nothing and loses nothing (bench/bench_speculative.py, Qwen2.5-Coder-0.5B, 1 CPU thread, 1 stream: free text
# drafted 0 tokens, edits 1.66x the same engine without drafts). A policy that drafted freely lost 16% on free text.
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
    """This runner's drafting: on or off, what proposes (runner/proposer.py: the layout's draft model when it has
    one, else prompt lookup), the measured step costs prompt lookup weighs its drafts by, and the totals stats
    report."""

    def __init__(self, model, n_ctx_seq: int, abort: DecodeAbort, setting: str | None = None, draft=None):
        self.on, self.max_draft, measured = speculation(model, setting, draft is not None)
        self.n_ctx_seq = n_ctx_seq
        self.abort = abort
        self.costs = StepCosts(measured)     # decode seconds by rows (draft_policy.py): what a draft's rows cost
        self.proposer = draft if draft is not None else NgramProposer(self.costs)
        self.drafted_total = self.accepted_total = 0
        if draft is not None:               # a cancel stops the draft model's decode the same way
            abort.install(draft.ctx)

    def may_draft(self, n_gen: int) -> bool:
        """Whether this step may draft at all."""
        return self.on and n_gen > 0

    def drafts(self, gen: list[Seq], capacity: int) -> dict[str, list[int]]:
        """The tokens each generating sequence decodes after its pending token this step (request id -> draft):
        the proposer's guess, within each sequence's limit and the batch's rows. A cancel arriving meanwhile
        aborts a draft model's decode."""
        asks = [(seq, n) for seq in gen if (n := self.limit(seq)) > 0]
        if not asks:
            return {}
        self.abort.in_flight = {seq.id for seq, _ in asks}
        try:
            return self.proposer.propose(asks, len(gen), capacity)
        finally:
            self.abort.in_flight = set()

    def limit(self, seq: Seq) -> int:
        """The longest draft `seq` may decode this step: 0 when speculation is off (runner, request, or a model
        whose memory cannot drop cells by position), else bounded by the context and the reply's token limit."""
        if not (self.on and seq.speculate) or seq.req.num_predict == 0:
            return 0
        limit = min(self.max_draft, self.n_ctx_seq - seq.n_past - 1)
        if seq.req.num_predict > 0:
            limit = min(limit, seq.req.num_predict - seq.n_gen - 1)
        return max(0, limit)

    def settle(self, seq: Seq, n_draft: int, n_ok: int) -> None:
        """After verifying a draft (the executor removed the rejected cells from KV; seq.history and seq.pending
        say what the sequence holds now): count it and tell the proposer."""
        seq.n_drafted += n_draft
        seq.n_accepted += n_ok
        self.drafted_total += n_draft
        self.accepted_total += n_ok
        self.proposer.verified(seq, n_draft, n_ok)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("verified %s drafted=%d accepted=%d", seq.id, n_draft, n_ok)

    def record_step(self, rows: int, t_decode: float) -> None:
        """A generation-only step's decode seconds by its rows (with or without drafts), for draft_policy.StepCosts."""
        if self.on:
            self.costs.record(rows, t_decode)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("step rows=%d ms=%.1f pace=%.1f ms", rows, t_decode * 1000, (self.costs.pace or 0.0) * 1000)
