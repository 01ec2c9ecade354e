"""The step executor (context thread): runs a `StepPlan` on the llama context and says what happened.

It encodes the plan's image (runner/prompt/media.py), calls `llama_decode` on the batch (the GIL is released there; on
SmolLM2, CPU, 1 thread, the context thread spends ~97-99% of its step time inside it: Stats.decode_fraction),
samples every row that has logits with the sequence's own chain, verifying drafts on the way, and then, as vLLM
v1's worker does, drafts the next step (drafting.Drafting.after_step: prompt lookup, or a draft model's
decodes). It writes no sequence state except what llama.cpp itself changed (rolled-back or rejected KV cells, the
sampler chains) and the proposer's own (its per-sequence lookup table, a draft model's context); step_update.py
applies the result. A cancel stops a running decode (decode_abort.py).
Covered by tests/unit/engine/runner/step/test_step_cycle.py (in-process) and tests/integration/engine/test_runner.py and
test_speculative.py (a real runner process).
"""
from __future__ import annotations

import logging
import time

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.decode_abort import DecodeAbort
from app.engine.runner.sequence import Seq
from app.engine.runner.speculation.drafting import Drafting
from app.engine.runner.step.step_clock import StepClock
from app.engine.runner.step.step_prepare import StepPrepare
from app.engine.runner.step_plan import Sampled, SampledToken, Span, StepPlan, StepResult
from app.engine.runner.testhooks import Hooks

log = logging.getLogger("strata.engine")

class StepExecutor:
    def __init__(self, model, ctx, *, vocab_out, clock: StepClock, abort: DecodeAbort, drafting: Drafting,
                 hooks: Hooks | None = None, media=None):
        self.ctx, self.vocab_out, self.clock, self.abort, self.drafting = ctx, vocab_out, clock, abort, drafting
        self.hooks = hooks or Hooks()
        self.media = media                  # media.Media (the model's projector) or None
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_batch = L.llama_n_batch(ctx)
        self.n_ctx_seq = L.llama_n_ctx_seq(ctx)
        self.mem = L.llama_get_memory(ctx)
        abort.install(ctx)

    # ---- one plan ------------------------------------------------------------------------------------------
    def execute(self, plan: StepPlan, prepare: StepPrepare | None = None) -> StepResult:
        """Run `plan`, then draft the next step. `prepare` (step_prepare.py): the next step's preparation, told
        when the decode starts and when it returned (before anything synchronizes with the device), and waited
        for before drafting (it moves the sequences on, which drafting reads)."""
        result = StepResult()
        if plan.image is not None:
            self._eval_image(plan.image, result)
        if plan.batch.n == 0:
            return result
        try:
            self._decode_and_sample(plan, prepare, result)
        finally:
            t_sampled = time.perf_counter()
            if prepare is not None:
                prepare.finish(plan, result.rc)
        if result.rc == 0:
            t0 = time.perf_counter()
            result.drafts = self.drafting.after_step(plan, result.sampled, result.t_decode)
            result.t_draft = time.perf_counter() - t0
            self.clock.phases.add("update", t0 - t_sampled)
        return result

    def _decode_and_sample(self, plan: StepPlan, prepare: StepPrepare | None, result: StepResult) -> None:
        b = plan.batch
        t_launch = time.perf_counter()
        self.clock.begin(b.n, plan.t_start)             # the heartbeat reports the step while it runs
        result.rc, result.message, result.t_decode, result.c_decode = self._decode(plan, prepare)
        t_decoded = time.perf_counter()
        if prepare is not None:
            prepare.decoded(plan, result.rc)
        if result.rc != 0:
            for span in plan.spans:                      # processed ubatches may remain: roll every sequence back
                if span.seq.slot is not None:
                    L.llama_memory_seq_rm(self.mem, span.seq.slot, span.pos0, -1)
            if result.rc != 2:                           # 2: aborted for a cancel, the others just retry
                log.error("%s (batch of %d tokens)", result.message, b.n)
            return
        t_shadow = time.perf_counter()
        L.llama_synchronize(self.ctx)                   # the first wait for the device (sampling would wait here)
        t_synced = time.perf_counter()
        result.sampled = [self._sample(span, row) for span, row in plan.outs]
        ph = self.clock.phases
        ph.add("launch", t_decoded - t_launch - result.t_decode)
        ph.add("decode", result.t_decode)
        ph.add("shadow", t_shadow - t_decoded)
        ph.add("sync", t_synced - t_shadow)
        ph.add("sample", time.perf_counter() - t_synced)

    def _decode(self, plan: StepPlan, prepare: StepPrepare | None) -> tuple[int, str, float, float]:
        """llama_decode on the plan's batch, unless a cancel arrived while it was built. (rc, message, seconds,
        this thread's CPU seconds)."""
        t_decode = c_decode = 0.0
        try:
            with self.abort.running(span.seq.id for span in plan.spans):
                self.hooks.hit("step")
                if any(span.seq.cancelled for span in plan.spans):
                    rc = 2                           # a cancel arrived while building: skip straight to rollback
                else:
                    if self.hooks.hang_marker:
                        self.hooks.hang_if_marked(span.seq.req.prompt for span in plan.spans)
                    if prepare is not None:
                        prepare.launch(plan)
                    t0, c0 = time.perf_counter(), time.thread_time()
                    rc = L.llama_decode(self.ctx, plan.batch.struct)
                    t_decode, c_decode = time.perf_counter() - t0, time.thread_time() - c0
        except Exception as e:
            return -100, str(e), 0.0, 0.0
        return rc, f"llama_decode failed with code {rc}", t_decode, c_decode

    def _sample(self, span: Span, row: int) -> Sampled:
        """Sample one sequence's rows. Speculation: sample at each drafted position with the sequence's own chain
        (so only tokens that are really emitted reach its penalties/grammar/RNG) and go on while the sample equals
        the draft, as llama.cpp's common_sampler_sample_and_accept_n; every token comes from the model's
        distribution. The rejected drafted cells leave KV here, so KV = history again (the prompt cache relies
        on it)."""
        seq, draft = span.seq, span.draft
        out = Sampled(span, n_drafted=len(draft))
        if seq.req.num_predict == 0:                 # prompt only (like llama-server's n_predict 0): no token
            out.reason = "length"
            return out
        n_gen = seq.n_gen
        pos = span.pos0 + (span.n if span.prefill else 1)   # the KV cell the first sampled token would take
        while True:
            try:
                tok, logits = self._sample_row(seq, row + out.n_accepted)
            except Exception as e:  # GrammarStuck names the grammar; only this sequence ends
                out.error, out.reason = f"sampling failed: {e}", "error"
                break
            if n_gen == 0:
                out.t_first = time.perf_counter()
            n_gen += 1
            eog = bool(L.llama_vocab_is_eog(self.vocab, tok))
            out.tokens.append(SampledToken(tok, logits, eog))
            out.reason = self._end_reason(seq, tok, eog, n_gen, pos + out.n_accepted)
            if out.reason or out.n_accepted == len(draft) or tok != draft[out.n_accepted]:
                break
            out.n_accepted += 1                      # the drafted cell holds this very token: keep it
        if draft and seq.slot is not None and out.n_accepted < len(draft):
            L.llama_memory_seq_rm(self.mem, seq.slot, span.pos0 + 1 + out.n_accepted, -1)
        return out

    def _sample_row(self, seq: Seq, row: int):
        """Sample (and accept) one token from the logits of batch row `row`; with the logits when asked."""
        self.hooks.hit("sample")
        tok = seq.sampler.sample(self.ctx, row)
        logits = None
        if seq.req.logprobs:
            ptr = L.llama_get_logits_ith(self.ctx, row)
            if ptr:
                logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
        return tok, logits

    def _end_reason(self, seq: Seq, tok: int, eog: bool, n_gen: int, pos: int) -> str | None:
        """Why the reply ends with `tok` (which would take KV cell `pos`), or None. A request that does not shift
        its context (`shift` False: OpenAI's, Anthropic's, llama-server's rule) ends with "length" at the token
        that fills it (prompt + reply = the context, as llama-server): max_tokens caps a reply by the room the
        prompt left, it claims no context."""
        if eog and not seq.req.ignore_eos:
            return "stop"
        if seq.stop_bytes is not None and not eog and seq.stop_bytes.push(self.vocab_out.piece(tok)):
            return "stop"                                # a stop string: no need to decode this token
        if 0 < seq.req.num_predict <= n_gen:
            return "length"
        if pos + 1 >= self.n_ctx_seq and not seq.req.shift:
            return "length"
        return None

    def _eval_image(self, seq: Seq, result: StepResult) -> None:
        """Encode the image at seq.todo and decode its embeddings into the sequence's cells (runner/prompt/media.py),
        outside the step's batch; a failure ends this sequence only."""
        start = seq.todo
        chunk, n = seq.media.images[start]
        t0 = self.clock.begin(n)                     # one step of n tokens, for the heartbeat
        try:
            self.hooks.hit("image")
            result.image_n_past = self.media.eval_image(self.ctx, chunk, seq.n_past, seq.slot, self.n_batch)
        except Exception as e:  # noqa: BLE001 - mtmd's failure: this request fails, the runner goes on
            L.llama_memory_seq_rm(self.mem, seq.slot, start, -1)
            log.error("image of request %s: %s", seq.id, e)
            result.image_error = str(e)
            return
        finally:
            self.clock.end()
        dt = time.perf_counter() - t0
        self.clock.record(dt, dt, n)
