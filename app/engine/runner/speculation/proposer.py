"""What proposes speculative drafts: the interface the step executor drafts through after sampling
(drafting.Drafting; docs/architecture.md, "Speculative decoding"). Two implementations: prompt lookup
(ngram_draft.NgramProposer: the sequence's own tokens) and a draft model (draft_model.DraftModel: a second, small
model with the same vocabulary). Either way the next step verifies a draft the same way, row by row with the
sequence's own sampler, so the proposer changes speed, never tokens.
Context thread only.
Covered by tests/integration/engine/test_speculative.py and test_draft_model.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from app.engine.runner.sequence import Seq
from app.engine.runner.step_plan import Span


@dataclass(slots=True)
class DraftAsk:
    """A generating sequence that may draft for its next step, up to `limit` tokens. Drafting runs after this
    step's sampling and before the update applies it, so the sequence's fields may still say where it stood
    before the step: `emitted` (the tokens this step sampled for it: accepted drafts, then the token it decodes
    next) and `span` (this step's rows of it) say what changed. `span` None: the sequence's fields are current."""
    seq: Seq
    limit: int
    emitted: list[int] = field(default_factory=list)
    span: Span | None = None

    def tokens(self) -> list[int]:
        """Everything the sequence holds once this step is applied: its cells' tokens, then the token it decodes
        next. A copy (O(length)): prompt lookup needs it once per sequence, a draft model every step."""
        seq, span = self.seq, self.span
        if span is None:
            return seq.history + [seq.pending]
        if span.prefill:                # a prefilling sequence's cells hold its prompt's head; this chunk ended it
            return seq.prompt.tolist() + self.emitted
        return seq.history[:span.pos0] + [seq.pending] + self.emitted


class Proposer(Protocol):
    kind: str                       # "ngram" | "model": what drafts (logs, stats)
    gated: bool                     # its drafts are weighed against measured step costs (draft_policy.py)

    def emitted(self, seq: Seq, tokens: list[int]) -> None:
        """The tokens `seq` emitted this step, drafted or not (accepted drafts, then its next pending token)."""
        ...

    def verified(self, seq: Seq, n_held: int, n_drafted: int, n_accepted: int) -> None:
        """`seq`'s draft was verified: `n_accepted` of its `n_drafted` tokens were the model's own, and its cells
        now hold `n_held` tokens (what they held before, its pending token, the accepted drafts)."""
        ...

    def propose(self, asks: list[DraftAsk], n_seqs: int, capacity: int) -> dict[str, list[int]]:
        """Drafts for the next step: `asks` the generating sequences that may draft, in slot order; `n_seqs` the
        next step's generating sequences (one batch row each) and `capacity` the batch's rows. Returns request
        id -> tokens to decode after the sequence's pending token (absent or empty: no draft); together they fit
        `capacity - n_seqs` rows."""
        ...

    def close(self) -> None:
        ...
