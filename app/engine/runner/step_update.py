"""The step update (context thread): applies what the executor got to the sequences, like vLLM v1's
`update_from_output`. What each sequence now holds in KV (`n_past`, `history`), which prefills became
generations, the sampled tokens (`pending`, `n_gen`, accepted drafts), the draft totals and the step costs
drafting weighs; then the tokens go to the output thread and finished sequences give their slots back.
Covered by tests/unit/engine/runner/test_step_cycle.py (in-process) and tests/integration/engine/test_runner.py and
test_speculative.py (a real runner process).
"""
from __future__ import annotations

import time

from app.engine.runner.placement import Placement
from app.engine.runner.sequence import GEN, Seq
from app.engine.runner.speculation import Drafting
from app.engine.runner.step_clock import StepClock
from app.engine.runner.step_plan import Sampled, StepPlan, StepResult
from app.engine.runner.step_scheduler import StepScheduler


class StepUpdate:
    def __init__(self, scheduler: StepScheduler, placement: Placement, drafting: Drafting, clock: StepClock, out_q):
        self.scheduler, self.placement, self.drafting, self.clock, self.out_q = (
            scheduler, placement, drafting, clock, out_q)

    def __call__(self, plan: StepPlan, result: StepResult) -> None:
        if plan.image is not None:
            self._image_done(plan.image, result)
        if plan.batch.n == 0:
            return
        if result.rc != 0:
            self.undo(plan)
            self._decode_failed(plan, result)
            return
        self.clock.steps += 1
        self.placement.pending_copy.clear()          # llama.cpp did the queued KV copies first
        if plan.advanced is None:
            self.advance(plan)
        for span in plan.spans:
            if span.prefill:
                self.placement.after_prefill(span.seq)   # a context checkpoint where one is due (reads the state)
        tokens, finished = [], []
        for s in result.sampled:
            tokens += self._apply(s)
            if s.reason:
                finished.append((s.seq, s.reason))
        if plan.gen_only:
            self.drafting.record_step(plan.batch.n, result.t_decode)
        if tokens:
            t0 = time.perf_counter()
            self.out_q.put(("step", tokens))
            result.t_handoff = time.perf_counter() - t0
        for seq, reason in finished:
            self.scheduler.release(seq, reason)

    def _image_done(self, seq: Seq, result: StepResult) -> None:
        if result.image_error is not None:
            seq.error = result.image_error
            self.scheduler.release(seq, "error")
            return
        start = seq.todo
        n = seq.media.images[start][1]
        seq.history.extend(seq.prompt[start:start + n].tolist())
        seq.todo, seq.n_past = start + n, result.image_n_past
        self.placement.after_prefill(seq)

    def _decode_failed(self, plan: StepPlan, result: StepResult) -> None:
        if result.rc == 2:                           # aborted for a cancel: the others just retry next step
            return
        for span in plan.spans:
            span.seq.error = result.message
            if span.seq.slot is not None:
                self.scheduler.release(span.seq, "error")

    def advance(self, plan: StepPlan, reversible: bool = False) -> None:
        """What each sequence holds in KV once the plan's decode succeeded, and which prefills became generations:
        nothing here needs the step's logits, so async batch preparation runs it while the decode is in flight
        (step_prepare.py). `reversible` (before the decode's return code is known): `plan.advanced` keeps what
        `undo` needs if the decode fails after all."""
        plan.advanced = [(span.seq, span.seq.n_past, span.seq.todo, span.seq.state, len(span.seq.history))
                         for span in plan.spans] if reversible else []
        for span in plan.spans:
            seq = span.seq
            if not span.prefill:
                seq.history.append(seq.pending)
                seq.n_past = span.pos0 + 1          # a draft's cells count once accepted (_apply)
            else:
                seq.n_past = span.pos0 + span.n
                seq.history.extend(seq.prompt[seq.todo:seq.todo + span.n].tolist())
                seq.todo += span.n
                if seq.todo == len(seq.prompt):
                    seq.state = GEN

    @staticmethod
    def undo(plan: StepPlan) -> None:
        """Back to before `advance`: the decode it anticipated failed (or was aborted for a cancel)."""
        for seq, n_past, todo, state, n_history in plan.advanced or ():
            seq.n_past, seq.todo, seq.state = n_past, todo, state
            del seq.history[n_history:]
        plan.advanced = None

    def _apply(self, s: Sampled) -> list[tuple]:
        """One sequence's sampled tokens: the last is its next pending token, those before it were drafted and
        accepted (their cells hold them). Returns the output thread's items (seq, token, logits, eog)."""
        seq = s.seq
        if s.error:
            seq.error = s.error
        if s.tokens and seq.n_gen == 0:
            seq.t_first = s.t_first
        for tok, _, _ in s.tokens:
            if seq.drafter is not None:
                seq.drafter.push(tok)
        if s.tokens:
            seq.pending = s.tokens[-1][0]
            seq.n_gen += len(s.tokens)
        if s.n_accepted:
            seq.history.extend(t for t, _, _ in s.tokens[:s.n_accepted])
            seq.n_past += s.n_accepted
        if seq.draft:
            n_draft, seq.draft = len(seq.draft), []
            self.drafting.settle(seq, n_draft, s.n_accepted)
        return [(seq, tok, logits, eog) for tok, logits, eog in s.tokens]
