"""The step update (context thread): applies what the executor got to the sequences, like vLLM v1's
`update_from_output`. What each sequence now holds in KV (`n_past`, `history`), which prefills became
generations, the sampled tokens (`pending`, `n_gen`, accepted drafts, draft counts) and the drafts proposed for
the next step (`Seq.draft`); then the tokens go to the output thread and finished sequences give their slots back
(through `release`, the one way a slot is freed).
Covered by tests/unit/engine/runner/step/test_step_cycle.py (in-process) and tests/integration/engine/test_runner.py and
test_speculative.py (a real runner process).
"""
from __future__ import annotations

import time
from typing import Callable

from app.engine.runner.cache.prompt_cache import PromptCache
from app.engine.runner.output.output_port import PrefillProgress, StepTokens
from app.engine.runner.sequence import GEN, Seq
from app.engine.runner.step.step_clock import StepClock
from app.engine.runner.step_plan import Moved, Sampled, StepPlan, StepResult


class StepUpdate:
    """`release(seq, reason)`: give a finished sequence's slot back and hand it to the output thread
    (slots.Slots.release)."""

    def __init__(self, release: Callable[[Seq, str], None], prompt_cache: PromptCache, clock: StepClock, out_q):
        self.release, self.prompt_cache, self.clock, self.out_q = release, prompt_cache, clock, out_q

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
        self.prompt_cache.decoded()                  # llama.cpp did the queued KV copies first
        if plan.advanced is None:
            self.advance(plan)
        for span in plan.spans:
            if span.prefill:
                self.prompt_cache.after_prefill(span.seq)   # a context checkpoint where one is due (reads the state)
                if span.seq.todo < len(span.seq.prompt) and span.seq.n_exact is None:
                    self.out_q.put(PrefillProgress(span.seq, span.seq.todo))    # a long prompt goes on
        finished = []
        n_tokens = 0
        for s in result.sampled:
            self._apply(s)
            n_tokens += len(s.tokens)
            if s.reason:
                finished.append((s.span.seq, s.reason))
        for seq, draft in result.drafts:
            seq.draft = draft
        if n_tokens:
            t0 = time.perf_counter()
            self.out_q.put(StepTokens(result.sampled))
            result.t_handoff = time.perf_counter() - t0
        for seq, reason in finished:
            self.release(seq, reason)

    def _image_done(self, seq: Seq, result: StepResult) -> None:
        if result.image_error is not None:
            seq.error = result.image_error
            self.release(seq, "error")
            return
        start = seq.todo
        n = seq.media.images[start][1]
        seq.history.extend(seq.prompt[start:start + n].tolist())
        seq.todo, seq.n_past = start + n, result.image_n_past
        self.prompt_cache.after_prefill(seq)

    def _decode_failed(self, plan: StepPlan, result: StepResult) -> None:
        if result.rc == 2:                           # aborted for a cancel: the others retry next step,
            for span in plan.spans:                  # with the drafts they were verifying
                if span.draft:
                    span.seq.draft = span.draft
            return
        for span in plan.spans:
            span.seq.error = result.message
            if span.seq.slot is not None:
                self.release(span.seq, "error")

    def advance(self, plan: StepPlan, reversible: bool = False) -> None:
        """What each sequence holds in KV once the plan's decode succeeded, and which prefills became generations:
        nothing here needs the step's logits, so async batch preparation runs it while the decode is in flight
        (step_prepare.py). `reversible` (before the decode's return code is known): `plan.advanced` keeps what
        `undo` needs if the decode fails after all."""
        plan.advanced = [Moved(span.seq, span.seq.n_past, span.seq.todo, span.seq.state, len(span.seq.history))
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

    @staticmethod
    def _apply(s: Sampled) -> None:
        """One sequence's sampled tokens: the last is its next pending token, those before it were drafted and
        accepted (their cells hold them)."""
        seq = s.span.seq
        if s.error:
            seq.error = s.error
        if s.n_drafted:
            seq.n_drafted += s.n_drafted
            seq.n_accepted += s.n_accepted
        tokens = s.tokens
        if not tokens:
            return
        if seq.n_gen == 0:
            seq.t_first = s.t_first
        seq.pending = tokens[-1].token
        seq.n_gen += len(tokens)
        if s.n_accepted:
            seq.history.extend(t.token for t in tokens[:s.n_accepted])
            seq.n_past += s.n_accepted
