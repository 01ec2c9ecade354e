"""The runner step in-process, one cycle at a time: `plan = schedule(); result = execute(plan); update(plan, result)`
on real SmolLM2 (no runner process, no threads started: the test drives the context thread's work itself).
The plan is a typed value that can be read before it runs; the update alone moves sequences on; the loop never
touches the output thread's state; scheduling never runs a model (a draft model drafts in the execute phase)."""
from __future__ import annotations

import queue

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.output.output_port import PrefillProgress, Released, StepTokens
from app.engine.runner.output.text import Vocab
from app.engine.runner.sampling.chain import build_chain
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sequence import GEN, PREFILL, Seq
from app.engine.runner.speculation.draft_model import DraftModel
from app.engine.runner.step.step_loop import StepLoop
from app.engine.runner.step.step_prepare import StepPrepare
from app.engine.runner.step_plan import StepResult as StepResult
from engine_util import llama_context

N_BATCH = 64


@pytest.fixture(scope="module")
def loop(smollm2_path):
    with llama_context(smollm2_path, n_ctx=512, n_batch=N_BATCH, n_seq=2) as (model, ctx):
        vocab = L.llama_model_get_vocab(model)
        sent = []
        lp = StepLoop(model, ctx, sent.append, vocab_out=Vocab(vocab, L.llama_vocab_n_tokens(vocab)),
                      speculative="off")
        yield lp, vocab
        lp.abort.close()


def admitted(vocab, rid: str, n_prompt: int, num_predict: int) -> Seq:
    """A Seq as admission leaves it: its record filled (prompt, a greedy sampler), then handed to the loop."""
    n_vocab = L.llama_vocab_n_tokens(vocab)
    seq = Seq(P.GenerateRequest(id=rid, prompt="x", num_predict=num_predict, ignore_eos=True))
    seq.adm.prompt = np.asarray([100 + (i * 37) % 5000 for i in range(n_prompt)], dtype=np.int32)
    seq.adm.n_prompt = n_prompt
    seq.adm.sampler = SeqSampler(build_chain(P.SamplingParams(temperature=0), n_vocab, 256), vocab, n_vocab)
    return seq


def drain(q: queue.SimpleQueue) -> list:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


def test_a_step_is_schedule_execute_update(loop):
    lp, vocab = loop
    long, short = admitted(vocab, "long", 100, 3), admitted(vocab, "short", 10, 3)
    lp.inbox.ready(long)
    lp.inbox.ready(short)
    lp.slots.admit_ready()
    assert {s.id for s in lp.slots.seqs if s is not None} == {"long", "short"}

    plan = lp.scheduler.schedule()
    spans = {s.seq.id: s for s in plan.spans}
    assert all(s.prefill for s in plan.spans) and not plan.gen_only and plan.image is None
    assert spans["short"].n == 10                        # its whole prompt: equal shares first ...
    assert spans["long"].n == N_BATCH - 10               # ... then the rest of the batch's rows
    assert plan.batch.n == N_BATCH
    assert [span.seq.id for span, _ in plan.outs] == ["short"]   # only a prompt that ends here is sampled
    assert long.n_past == 0 and long.state == PREFILL    # scheduling moved nobody on

    result = lp.executor.execute(plan)
    assert result.rc == 0 and [s.seq.id for s in result.sampled] == ["short"]
    tok = result.sampled[0].tokens[0][0]
    assert short.pending == -1 and short.n_gen == 0      # executing moved nobody on either

    lp.update(plan, result)
    assert short.state == GEN and short.n_past == 10 and short.pending == tok and short.n_gen == 1
    assert long.todo == N_BATCH - 10 and long.state == PREFILL
    items = drain(lp.out_q)
    assert [type(i) for i in items] == [PrefillProgress, StepTokens]   # the long prompt goes on: its progress
    assert (items[0].seq, items[0].processed) == (long, N_BATCH - 10)
    assert [(s.seq, *t) for s in items[1].sampled for t in s.tokens] == [(short, tok, None, False)]

    plan = lp.scheduler.schedule()                       # generating rows first, then the rest of the prompt
    assert [(s.seq.id, s.prefill, s.pos0, s.n) for s in plan.spans] == [("short", False, 10, 1),
                                                                      ("long", True, N_BATCH - 10, 100 - N_BATCH + 10)]
    lp.update(plan, lp.executor.execute(plan))
    assert long.state == GEN and long.n_past == 100 and short.n_past == 11 and short.history[-1] == tok

    for _ in range(10):                                  # both reach num_predict and give their slots back
        if all(s is None for s in lp.slots.seqs):
            break
        plan = lp.scheduler.schedule()
        lp.update(plan, lp.executor.execute(plan))
    assert all(s is None for s in lp.slots.seqs)
    done = [item.seq for item in drain(lp.out_q) if isinstance(item, Released)]
    assert sorted(s.id for s in done) == ["long", "short"]
    assert all(s.finish == "length" and s.n_gen == 3 and s.sampler is None for s in done)
    assert all(s.out.n_out == 0 and s.out.reason is None for s in done)     # the output thread's state: untouched


def test_a_cancel_while_the_batch_was_built_skips_the_decode_and_rolls_back(loop):
    lp, vocab = loop
    seq = admitted(vocab, "c", 20, 5)
    lp.inbox.ready(seq)
    lp.slots.admit_ready()
    plan = lp.scheduler.schedule()
    before = (seq.n_past, seq.todo)                      # (the prompt cache may hold a prefix from the test above)
    seq.cancelled = True                                 # the reader thread's only write
    result = lp.executor.execute(plan)
    assert result.rc == 2 and result.sampled == []       # aborted for a cancel: no llama_decode ran
    lp.update(plan, result)
    assert (seq.n_past, seq.todo) == before and seq.state == PREFILL    # nothing advanced; the next reap releases it
    assert L.llama_memory_seq_pos_max(lp.executor.mem, seq.slot) == before[0] - 1     # KV = what it holds
    lp.slots.reap()
    assert seq.finish == "cancelled" and all(s is None for s in lp.slots.seqs)
    assert [type(i) for i in drain(lp.out_q)] == [Released]


def _drive(lp, vocab, prepare) -> tuple[list, int]:
    """Three requests through two slots (the third waits for a free one), every step's batch rows and sampled
    tokens recorded; with `prepare` (step_prepare.StepPrepare) as the loop runs it. Returns (steps, how many plans
    `prepare` built that `schedule` used)."""
    reqs = [("long", 100, 6), ("short", 10, 3), ("late", 30, 4)]
    seqs = {rid: admitted(vocab, rid, n, k) for rid, n, k in reqs}
    for seq in seqs.values():
        seq.req.cache_prompt = False                     # each run computes everything: the runs compare
    # each run from the same start: the same cells (where cells sit changes the order of the attention's sums, and
    # so a near-tie's greedy pick), the same slot choices and round-robin start
    L.llama_memory_clear(lp.executor.mem, True)
    kept = lp.prompt_cache.slots                         # the kept slots as new: empty, never used
    kept.forget_all()
    kept.last_used[:] = [0.0] * len(kept.last_used)
    lp.scheduler._rr = lp.scheduler._k = 0
    lp.inbox.ready(seqs["long"])
    lp.inbox.ready(seqs["short"])
    steps, used = [], 0
    for _ in range(100):
        lp.slots.reap()
        lp.slots.admit_ready()
        prepared = lp.scheduler.prepared
        plan = lp.scheduler.schedule()
        if plan.empty:
            break
        used += prepared is not None and plan is prepared.plan
        b = plan.batch
        rows = (b.token[:b.n].tolist(), b.pos[:b.n].tolist(), b.seq[:b.n].tolist(), b.logits[:b.n].tolist())
        result = lp.executor.execute(plan, prepare)       # (it waits for `prepare`'s work before drafting)
        lp.update(plan, result)
        steps.append((rows, [(s.seq.id, [t for t, _, _ in s.tokens]) for s in result.sampled]))
        if seqs["short"].finish and not seqs["late"].t_admit and seqs["late"] not in lp.inbox.ready_q:
            lp.inbox.ready(seqs["late"])                 # arrives while "long" still generates
    drain(lp.out_q)
    assert all(s.finish == "length" for s in seqs.values())
    return steps, used


@pytest.mark.parametrize("mode", ["shadow", "helper"])
def test_prepared_plans_are_the_plans_schedule_builds(loop, mode):
    """Async batch preparation (step_prepare.py) builds the next plan while the decode is in flight; whenever
    `schedule` takes it, it is row for row the plan built after the step, so every sampled token is the same
    (a new admission, a finished sequence and prefills completing make `schedule` build again)."""
    lp, vocab = loop
    plain, _ = _drive(lp, vocab, None)
    plain2, _ = _drive(lp, vocab, None)
    assert plain2 == plain
    prepare = StepPrepare(mode, lp.update, lp.scheduler, lp.clock.phases)
    try:
        prepared, used = _drive(lp, vocab, prepare)
    finally:
        prepare.close()
    assert prepared == plain
    assert 0 < used < len(prepared) - 1                  # it was used, and not everywhere
    assert lp.scheduler.prepared is None or all(s is None for s in lp.slots.seqs)


def test_a_failed_decode_undoes_what_was_prepared_for_after_it(loop):
    """The helper moves sequences on before the decode's return code is known: a decode aborted for a cancel
    puts them back, and what was prepared is dropped."""
    lp, vocab = loop
    a, b = admitted(vocab, "a", 12, 4), admitted(vocab, "b", 12, 4)
    a.req.cache_prompt = b.req.cache_prompt = False
    lp.inbox.ready(a)
    lp.inbox.ready(b)
    lp.slots.admit_ready()
    prepare = StepPrepare("helper", lp.update, lp.scheduler, lp.clock.phases)
    try:
        plan = lp.scheduler.schedule()
        k, rr = lp.scheduler._k, lp.scheduler._rr
        prepare.launch(plan)                             # as the executor does just before llama_decode
        result = StepResult(rc=2)                      # ... which a cancel aborted
        prepare.finish(plan, result.rc)
        assert (a.n_past, a.todo, a.state) != (0, 0, PREFILL)    # the helper had moved them on
        lp.update(plan, result)
        assert [(s.n_past, s.todo, s.state, s.history) for s in (a, b)] == [(0, 0, PREFILL, [])] * 2
        assert lp.scheduler.prepared is None and (lp.scheduler._k, lp.scheduler._rr) == (k, rr)   # as if unprepared
    finally:
        prepare.close()
    for seq in (a, b):
        seq.cancelled = True
    lp.slots.reap()
    drain(lp.out_q)


def test_scheduling_runs_no_model_the_draft_model_drafts_after_sampling(smollm2_path, monkeypatch):
    """With a draft model (SmolLM2 drafting for itself), every llama_decode of a step runs in the execute phase:
    the target's decode, then the draft model's after sampling; `schedule` (and `prepare`, which builds the next
    plan ahead) only decides. The drafts made after one step are verified by the next, and being the target's
    own greedy picks, mostly accepted."""
    with llama_context(smollm2_path, n_ctx=512, n_batch=N_BATCH, n_seq=2) as (model, ctx), \
            llama_context(smollm2_path, n_ctx=512, n_batch=N_BATCH, n_seq=2) as (dmodel, dctx):
        vocab = L.llama_model_get_vocab(model)
        draft = DraftModel(dmodel, dctx, 2, max_tokens=4, p_min=0.0)
        lp = StepLoop(model, ctx, [].append, vocab_out=Vocab(vocab, L.llama_vocab_n_tokens(vocab)), draft=draft)
        phase, decodes = ["between steps"], []
        real_decode = L.llama_decode

        def decode(c, batch):
            decodes.append((phase[0], "draft" if c == dctx else "target"))
            return real_decode(c, batch)

        def during(name, fn):
            def wrapped(*a, **kw):
                outer, phase[0] = phase[0], name
                try:
                    return fn(*a, **kw)
                finally:
                    phase[0] = outer
            return wrapped

        monkeypatch.setattr(L, "llama_decode", decode)
        monkeypatch.setattr(lp.scheduler, "schedule", during("schedule", lp.scheduler.schedule))
        monkeypatch.setattr(lp.scheduler, "prepare", during("schedule", lp.scheduler.prepare))
        execute = during("execute", lp.executor.execute)
        update = during("update", lp.update)
        prepare = StepPrepare("shadow", lp.update, lp.scheduler, lp.clock.phases)
        try:
            seqs = [admitted(vocab, "d1", 12, 12), admitted(vocab, "d2", 20, 12)]
            for seq in seqs:
                lp.inbox.ready(seq)
            for _ in range(40):
                lp.slots.reap()
                lp.slots.admit_ready()
                plan = lp.scheduler.schedule()
                if plan.empty:
                    break
                update(plan, execute(plan, prepare))
        finally:
            prepare.close()
            lp.abort.close()                                # (the contexts are the with-blocks' to free)
        assert all(s.finish == "length" for s in seqs)
        assert ("execute", "draft") in decodes and ("execute", "target") in decodes
        assert {p for p, _ in decodes} == {"execute"}         # never while scheduling, nor in the update
        assert all(s.n_drafted > 0 for s in seqs) and sum(s.n_accepted for s in seqs) > 0


def _two_drafting(smollm2_path, monkeypatch, cancel_at: int | None):
    """d1 and d2 through a step loop whose draft model is SmolLM2 drafting for itself; with `cancel_at`, d1 is
    cancelled by the reader thread's call (`StepLoop.cancel`) as that step's target decode ends: llama_decode
    has made its last poll of the abort flag and not returned yet, so d1 is still in flight. Returns (d2's draft
    after each step, d2's emitted tokens, the return code of every draft-model decode after the cancel)."""
    with llama_context(smollm2_path, n_ctx=512, n_batch=N_BATCH, n_seq=2) as (model, ctx), \
            llama_context(smollm2_path, n_ctx=512, n_batch=N_BATCH, n_seq=2) as (dmodel, dctx):
        vocab = L.llama_model_get_vocab(model)
        draft = DraftModel(dmodel, dctx, 2, max_tokens=4, p_min=0.0)
        lp = StepLoop(model, ctx, [].append, vocab_out=Vocab(vocab, L.llama_vocab_n_tokens(vocab)), draft=draft)
        step, draft_rcs = [0], []
        real_decode = L.llama_decode

        def decode(c, batch):
            rc = real_decode(c, batch)
            if c == ctx and step[0] == cancel_at:
                lp.cancel("d1")                         # lands as the decode ends
            elif c == dctx and cancel_at is not None and step[0] >= cancel_at:
                draft_rcs.append(rc)
            return rc

        monkeypatch.setattr(L, "llama_decode", decode)
        d1, d2 = admitted(vocab, "d1", 12, 10), admitted(vocab, "d2", 20, 10)
        drafts, emitted = [], []
        try:
            for seq in (d1, d2):
                lp.inbox.seqs[seq.id] = seq             # (what submit does: the reader's cancel finds it there)
                lp.inbox.ready(seq)
            for step[0] in range(40):
                lp.slots.reap()
                lp.slots.admit_ready()
                plan = lp.scheduler.schedule()
                if plan.empty:
                    break
                result = lp.executor.execute(plan)
                drafts.append(next((p.tokens for p in result.drafts if p.seq is d2), None))
                emitted += [t.token for s in result.sampled if s.span.seq is d2 for t in s.tokens]
                lp.update(plan, result)
        finally:
            lp.abort.close()
        assert d2.finish == "length" and d1.finish == ("cancelled" if cancel_at is not None else "length")
        return drafts, emitted, draft_rcs


def test_a_cancel_landing_as_the_step_decode_ends_does_not_stop_the_next_draft(smollm2_path, monkeypatch):
    """The abort flag belongs to one decode (decode_abort.DecodeAbort.running): a cancel of d1 that lands as the
    step's target decode ends, too late to stop it, must not stop the draft model's decode that follows in the same
    step, which holds d2 alone. d2 drafts that step what it drafts without the cancel, and every later draft
    decode runs."""
    plain, plain_tokens, _ = _two_drafting(smollm2_path, monkeypatch, None)
    k = next(i for i, d in enumerate(plain) if d)       # the first step after which d2 drafts
    cancelled, tokens, draft_rcs = _two_drafting(smollm2_path, monkeypatch, k)
    assert cancelled[k] == plain[k]                     # the draft was not lost to the cancel's leftover flag
    assert draft_rcs and set(draft_rcs) == {0}
    assert tokens == plain_tokens                        # d2's reply is the target's own either way


def test_a_step_with_a_writer_carries_the_prompt_tokens_its_measured_costs_allow(loop):
    """step_budget.py in the loop: the loop's steps teach the scheduler what they cost; while a sequence writes, a
    prompt gets the chunk those costs allow (here set by the test: 100 ms alone, 5 ms per prompt token, 3x),
    and the full batch again once nothing writes."""
    import time as _time

    from app.engine.runner.step.step_budget import PaceCosts

    lp, vocab = loop
    sched = lp.scheduler
    saved = sched.costs, sched.latency_factor
    writer, reader = admitted(vocab, "w", 2 * N_BATCH, 40), admitted(vocab, "r", 200, 2)
    writer.req.cache_prompt = reader.req.cache_prompt = False
    try:
        lp.inbox.ready(writer)
        lp.slots.admit_ready()
        for _ in range(2):                                                # its prompt, as the loop runs it
            assert lp._step(_time.perf_counter(), _time.thread_time())
        assert sched.costs.steps == 2 and sched.costs.prompt_s > 0        # prompt-only steps of N_BATCH tokens
        assert writer.state == GEN
        lp.inbox.ready(reader)
        lp.slots.admit_ready()
        sched.costs = PaceCosts(prompt_s=0.014, mixed_s=0.005, alone={1: (0.100, 5)}, steps=5)
        sched.latency_factor = 1.5                                        # 10 tokens a step: it saves up first
        plan = sched.schedule()
        assert [(s.seq.id, s.prefill, s.n) for s in plan.spans] == [("w", False, 1)]
        assert plan.allowance == pytest.approx(0.05)
        lp.update(plan, lp.executor.execute(plan))
        sched.latency_factor = 3.0                                        # 40 tokens, and the 10 saved (that
        plan = sched.schedule()                                           # step was not timed: as expected)
        assert [(s.seq.id, s.prefill, s.n) for s in plan.spans] == [("w", False, 1), ("r", True, 50)]
        assert plan.allowance == pytest.approx(0.2)                       # what the bank earns for it
        lp.update(plan, lp.executor.execute(plan))
        writer.finish = "stop"                                            # the writer ends ...
        lp.slots.reap()
        plan = sched.schedule()                                           # ... the prompt takes the batch again
        assert [(s.seq.id, s.prefill, s.n) for s in plan.spans] == [("r", True, N_BATCH)]
        lp.update(plan, lp.executor.execute(plan))
    finally:
        sched.costs, sched.latency_factor = saved
        for seq in (writer, reader):
            seq.cancelled = True
        lp.slots.reap()
        drain(lp.out_q)
    assert all(s is None for s in lp.slots.seqs)
