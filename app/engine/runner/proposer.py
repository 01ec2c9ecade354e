"""What proposes speculative drafts: the interface the step scheduler drafts through (speculation.Drafting;
docs/architecture.md, "Speculative decoding"). Two implementations: prompt lookup (ngram_draft.NgramProposer: the
sequence's own tokens) and a draft model (draft_model.DraftModel: a second, small model with the same vocabulary).
Either way the step executor verifies a draft the same way, row by row with the sequence's own sampler, so the
proposer changes speed, never tokens.
Context thread only.
Covered by tests/integration/engine/test_speculative.py and test_draft_model.py.
"""
from __future__ import annotations

from typing import Protocol

from app.engine.runner.sequence import Seq


class Proposer(Protocol):
    kind: str                       # "ngram" | "model": what drafts (logs, stats)
    gated: bool                     # its drafts are weighed against measured step costs (draft_policy.py)

    def propose(self, asks: list[tuple[Seq, int]], n_seqs: int, capacity: int) -> dict[str, list[int]]:
        """Drafts for this step: `asks` = (generating sequence that may draft, its longest draft); `n_seqs` the
        step's generating sequences (one batch row each) and `capacity` the batch's rows. Returns request id ->
        tokens to decode after the sequence's pending token (absent or empty: no draft); together they fit
        `capacity - n_seqs` rows."""
        ...

    def verified(self, seq: Seq, n_drafted: int, n_accepted: int) -> None:
        """After the step executor verified `seq`'s draft: `n_accepted` of its `n_drafted` tokens were the model's own
        (seq.history and seq.pending already say what the sequence holds now)."""
        ...

    def close(self) -> None:
        ...
