"""The step scheduler (context thread): what the next batch decodes.

It decides; it runs no model and touches no KV cell (no llama.cpp call at all; no drafting: the executor drafts
after sampling; tests/unit/engine/runner/step/test_step_cycle.py checks it at run time). `schedule` builds the next
`StepPlan` from the sequences in the slots (slots.py fills them between steps, and shifts a full context): one
row per generating sequence (plus the draft proposed for it, within the batch), then prompt chunks within the step's
prompt budget (step_budget.py: sized from measured step costs so that writing sequences keep their pace while
prompts are read; the full batch when nothing writes), shared watched readers first, cut where an image or a
context checkpoint is due, and at most one image.
"""
from __future__ import annotations

import logging
import time
from typing import NamedTuple

from app.engine.runner.batch import NpBatch
from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.sequence import GEN, PREFILL, Seq
from app.engine.runner.step.step_budget import (DEFAULT_FACTOR, PaceCosts, Reader, allowance, effective_factor,
                                                finishing_cut, prefill_shares, prompt_budget, share_budget)
from app.engine.runner.step_plan import SampleRow, Span, StepPlan

log = logging.getLogger("strata.engine")


class Prepared(NamedTuple):
    """A plan built ahead by `StepScheduler.prepare`, with what it was built from: the slots' state (`key`) and
    the scheduler's batch and round-robin counters before it."""
    plan: StepPlan
    key: tuple
    k: int
    rr: int


class StepScheduler:
    """`slots`: the slot table's list (slots.Slots.seqs), read here, changed only between steps. `latency_factor`:
    a writing sequence's step may take this many times its alone step while prompts are read (step_budget.py;
    0: prompts always take the whole batch)."""

    def __init__(self, *, slots: list[Seq | None], n_batch: int, n_ctx_seq: int, prompt_cache: PromptCache,
                 latency_factor: float = DEFAULT_FACTOR):
        self.n_ctx_seq = n_ctx_seq
        self.costs = PaceCosts()            # what steps cost here (the loop feeds it: StepLoop._step)
        self.latency_factor = latency_factor
        self.prompt_cache = prompt_cache
        self.slots = slots
        # two batches alternate, so a step's rows stay intact while the next one is built
        self.batches = (NpBatch(n_batch), NpBatch(n_batch))
        self._k = 0
        self._rr = 0                        # round-robin start among prefilling sequences
        self.prepared: Prepared | None = None     # async batch preparation (step_prepare.py)

    # ---- the next step -------------------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        """The next step's plan: its batch is filled here (vectorised numpy writes, tens of microseconds); a
        generating sequence's row is the token sampled at the end of the previous step, so only that row's token
        waits for it: the rest may have been built by `prepare` while the previous step decoded."""
        t0 = time.perf_counter()
        prepared, self.prepared = self.prepared, None
        if prepared is not None:
            if prepared.key == self._key() and not any(s is not None and s.draft for s in self.slots):
                plan = prepared.plan
                token = plan.batch.token
                for span, row in plan.outs:
                    if not span.prefill:
                        token[row] = span.seq.pending
                plan.t_start = t0
                return self._planned(plan)
            self._k, self._rr = prepared.k, prepared.rr      # as if it had not been prepared
        plan = self._build()
        plan.t_start = t0
        return self._planned(plan)

    def _planned(self, plan: StepPlan) -> StepPlan:
        """The plan goes to execution: the step budget counts what it should spend until its time is known."""
        if plan.allowance > 0:
            self.costs.planned(sum(s.n for s in plan.spans if s.prefill), plan.allowance)
        return plan

    def prepare(self) -> None:
        """Async batch preparation (step_prepare.py): called once the sequences of the step in flight were moved on
        (StepUpdate.advance) and before its logits are read, it builds what `schedule` would build next, except
        the generating sequences' tokens (being sampled now). `schedule` uses it when nothing it depends on has
        changed meanwhile (the slots, each sequence's state and positions) and no sequence was given a draft;
        otherwise it builds the plan again, so the batch is the same either way. Nothing is prepared when a
        sequence's context is full (the slot table shifts it first), has images or waits for another's prefix."""
        self.prepared = None
        active = [s for s in self.slots if s is not None]
        if not active or any(s.media is not None or s.state not in (GEN, PREFILL) or
                             (s.state == GEN and s.n_past >= self.n_ctx_seq) for s in active):
            return
        k, rr = self._k, self._rr
        plan = self._new_plan()
        room = plan.batch.capacity
        for seq in active:
            if seq.state == GEN:
                self._add_generation(plan, seq, [], room)
        self._plan_prefill(plan, [s for s in active if s.state == PREFILL])
        plan.gen_only = all(not s.prefill for s in plan.spans)
        self.prepared = Prepared(plan, self._key(), k, rr)

    def discard_prepared(self) -> None:
        """The step in flight failed: what was prepared for after it does not apply."""
        if self.prepared is not None:
            self._k, self._rr = self.prepared.k, self.prepared.rr
            self.prepared = None

    def _key(self) -> tuple:
        """What a plan depends on besides the sampled tokens: who holds each slot, and where each one stands."""
        return tuple(None if s is None else (s, s.state, s.n_past, s.todo, s.n_exact) for s in self.slots)

    def _new_plan(self) -> StepPlan:
        b = self.batches[self._k]
        self._k ^= 1
        b.clear()
        return StepPlan(b, t_start=time.perf_counter())

    def _build(self) -> StepPlan:
        """The plan from scratch. Each generating sequence verifies the draft proposed for it after the last step
        (`Seq.draft`, taken here: the plan's span holds it from now on), as much of it as the batch holds once
        every generating sequence has its row."""
        plan = self._new_plan()
        active = [s for s in self.slots if s is not None]
        gen = []
        for seq in active:
            if seq.state == GEN:
                gen.append(seq)
            elif seq.draft:                 # (a context shift without can_shift made it a prefill again)
                seq.draft = []
        room = plan.batch.capacity - len(gen)       # rows left for drafts
        for seq in gen:
            draft, seq.draft = seq.draft, []
            room -= self._add_generation(plan, seq, draft, room)
        self._plan_prefill(plan, [s for s in active if s.state == PREFILL])
        plan.gen_only = all(not s.prefill for s in plan.spans)
        return plan

    @staticmethod
    def _add_generation(plan: StepPlan, seq: Seq, draft: list[int], room: int) -> int:
        """A generating sequence's rows: its pending token, then as much of `draft` as `room` rows hold. Returns
        the draft's rows."""
        if len(draft) > room:
            draft = draft[:max(0, room)]
        b = plan.batch
        span = Span(seq, seq.n_past, 1 + len(draft), False, draft)
        plan.outs.append(SampleRow(span, b.add(seq.pending, seq.n_past, seq.kv_slot, True)))
        if draft:
            b.add_span(draft, seq.n_past + 1, seq.kv_slot, logits_last=True, logits_all=True)
        plan.spans.append(span)
        return len(draft)

    def prompt_budget(self, plan: StepPlan, prefill: list[Seq]) -> int:
        """Prompt rows this step may carry (step_budget.prompt_budget), its writers' rows already in `plan`; notes in
        the plan what its writers allow prompts (the bank earns it once the step's time is known)."""
        writers = [s.seq for s in plan.spans if not s.prefill]
        if not writers:
            return plan.batch.free
        n_watched, watched_reader = sum(watched(s) for s in writers), any(watched(s) for s in prefill)
        alone = self.costs.alone_s(len(writers))
        if alone is not None and self.latency_factor > 0:
            plan.allowance = allowance(alone, effective_factor(self.latency_factor, n_watched, watched_reader))
        budget = prompt_budget(self.costs, capacity=plan.batch.free, writers=len(writers),
                               watched_writers=n_watched, watched_reader=watched_reader, factor=self.latency_factor)
        if log.isEnabledFor(logging.DEBUG):
            c = self.costs
            log.debug("prompt budget %d of %d: writers=%d readers=%d alone=%s per_token=%s bank=%.3f steps=%d",
                      budget, plan.batch.free, len(writers), len(prefill), alone, c.per_prompt_token(), c.bank,
                      c.steps)
        return budget

    def _plan_prefill(self, plan: StepPlan, prefill: list[Seq]) -> None:
        if not prefill:
            return
        b = plan.batch
        self._rr = (self._rr + 1) % len(prefill)
        prefill = prefill[self._rr:] + prefill[:self._rr]
        readers = [Reader(s.id, len(s.prompt) - s.todo, watched(s)) for s in prefill]
        budget = finishing_cut(readers, self.prompt_budget(plan, prefill))
        grant = share_budget(readers, budget)
        for seq in prefill:
            k = grant[seq.id]
            if seq.media is not None:
                nxt = seq.media.next_start(seq.todo)
                if nxt == seq.todo:                          # an image starts here: one image per step
                    if plan.image is None:
                        plan.image = seq
                    continue
                if nxt is not None:
                    k = min(k, nxt - seq.todo)               # a text chunk ends where an image starts
            stops = self.prompt_cache.checkpoint_stops(seq)     # a chunk ends where a checkpoint is due
            if stops:
                k = min(k, stops[0] - seq.todo)
            if k <= 0:
                continue
            last = seq.todo + k == len(seq.prompt)
            row = b.add_span(seq.prompt[seq.todo:seq.todo + k], seq.n_past, seq.kv_slot, logits_last=last)
            span = Span(seq, seq.n_past, k, True)
            plan.spans.append(span)
            if last:
                plan.outs.append(SampleRow(span, row))


def watched(seq: Seq) -> bool:
    """A person waits for this sequence's reply (a streamed request: GenerateRequest.priority 1)."""
    return getattr(seq.req, "priority", 0) > 0


def prefill_grants(prefill: list[Seq], budget: int) -> dict[str, int]:
    """How many prompt tokens each prefilling sequence feeds this step, all alike: equal shares of the free batch
    rows first, then the leftovers in round-robin order (the list's order), so no long prompt starves the others
    (step_budget.prefill_shares)."""
    return prefill_shares([Reader(s.id, len(s.prompt) - s.todo, False) for s in prefill], budget)
