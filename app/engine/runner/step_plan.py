"""The typed hand-offs of one step of the context thread: what the scheduler decided (`StepPlan`) and what the
executor got (`StepResult`), like vLLM v1's SchedulerOutput and ModelRunnerOutput. The loop (step_loop.py) runs
`plan = scheduler.schedule(); result = executor.execute(plan); update(plan, result)`.
Covered by tests/unit/engine/runner/step/test_step_cycle.py (in-process) and tests/integration/engine/test_runner.py
(every step of a real runner builds one).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from app.engine.runner.batch import NpBatch
from app.engine.runner.sequence import Seq


@dataclass(slots=True)
class Span:
    """`n` rows of one sequence in the batch, from KV position `pos0`: a generating sequence's pending token
    and its draft (`draft`, verified when sampling), or a chunk of a prompt."""
    seq: Seq
    pos0: int
    n: int
    prefill: bool
    draft: list[int] = field(default_factory=list)


class SampleRow(NamedTuple):
    """A span whose logits are sampled, from batch row `row` on (a draft's rows follow it)."""
    span: Span
    row: int


class Moved(NamedTuple):
    """Where a sequence stood before `StepUpdate.advance` moved it on for a decode not yet known to succeed."""
    seq: Seq
    n_past: int
    todo: int
    state: str
    n_history: int


@dataclass(slots=True)
class StepPlan:
    """What one step decodes: the batch's spans, the rows whose logits are sampled, and at most one image."""
    batch: NpBatch
    t_start: float = 0.0                # when scheduling began (a step's time includes building its batch)
    spans: list[Span] = field(default_factory=list)
    outs: list[SampleRow] = field(default_factory=list)
    image: Seq | None = None            # its next prompt item is an image (encoded and decoded on its own)
    gen_only: bool = False              # every span is a generating sequence (drafting's step costs time such steps)
    allowance: float = 0.0              # seconds of prompt time its writers allowed beyond their step alone (step_budget)
    # set once the sequences were moved on for this plan's decode (step_update.StepUpdate.advance): where each was
    # before, so a failed decode can put them back
    advanced: list[Moved] | None = None

    @property
    def empty(self) -> bool:
        return self.batch.n == 0 and self.image is None


class SampledToken(NamedTuple):
    """One sampled token: its id, a copy of its row's logits (only when the request asks for logprobs), and
    whether it ends generation."""
    token: int
    logits: np.ndarray | None
    eog: bool


@dataclass(slots=True)
class Sampled:
    """What sampling one span's rows gave: the tokens in order, how many of its drafted tokens were decoded and
    accepted, and the end reason if any."""
    span: Span
    tokens: list[SampledToken] = field(default_factory=list)
    n_drafted: int = 0                  # the draft it verified (its tokens followed the pending one in the batch)
    n_accepted: int = 0
    reason: str | None = None           # "stop" | "length" | "error" | None (goes on)
    error: str | None = None
    t_first: float = 0.0                # when the first of them was sampled (time to first token)

    @property
    def seq(self) -> Seq:
        return self.span.seq


class Proposal(NamedTuple):
    """A draft for a sequence's next step, made after this step's sampling (drafting.Drafting.after_step);
    the update hands it to the sequence (`Seq.draft`) and the next plan verifies it."""
    seq: Seq
    tokens: list[int]


@dataclass(slots=True)
class StepResult:
    """What executing a plan did."""
    rc: int = 0                         # llama_decode's return code (0 ok, 2 aborted for a cancel)
    message: str = ""
    t_decode: float = 0.0               # seconds inside llama_decode
    c_decode: float = 0.0               # the context thread's CPU seconds inside it (its share of a CPU decode)
    t_draft: float = 0.0                # seconds spent drafting the next step (the proposer, a draft model's decodes)
    t_handoff: float = 0.0              # seconds of the update spent handing tokens to the output thread
    sampled: list[Sampled] = field(default_factory=list)
    drafts: list[Proposal] = field(default_factory=list)
    image_error: str | None = None      # the plan's image failed (that sequence ends, the others go on)
    image_n_past: int = 0               # after a good image: the sequence's KV position
