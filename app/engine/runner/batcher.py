"""Continuous batching inside the runner: slots, the context thread, and the hand-off to the output thread.

Two threads (docs/architecture.md, "Process model" and "Runner"):
- the CONTEXT thread owns the llama context. Each step runs in named phases, like vLLM v1's
  schedule -> execute -> update: `_build_batch` (one token per generating sequence, then prompt chunks shared
  round-robin), `_decode` (`llama_decode`; the GIL is released there), `_sample` (each sequence's chain), and
  `_finish` (hand results to the output thread, release finished slots). Nothing else touches the context.
- the OUTPUT thread (output_thread.py) does everything else while the context thread decodes: admission
  (admission.py), and the outputs of the last step (detokenize, stop strings, logprobs, events to the parent).
The batch itself is filled by the context thread with vectorised numpy writes (tens of microseconds): a
generating sequence's next input is the token sampled at the end of the previous step, so its row cannot be
written earlier without speculation. Two numpy-backed batches alternate, so a step's rows stay intact while
the next one is built. Measured on SmolLM2 (CPU, 1 thread) the context thread spends ~97-99% of its step time
inside llama_decode (Stats.decode_fraction).

A slot comes back on every path: every sequence that reaches a slot ends in `_release`, which removes its KV
cells, frees its sampler chain and hands a 'done' item to the output thread, the only place a DoneEvent (or
ErrorEvent) is sent, so a client sees "done" only after its slot is free again.
"""
from __future__ import annotations

import ctypes
import logging
import os
import queue
import threading
import time
from collections import deque

import numpy as np
from llama_cpp import llama_cpp as L

from app.ggml import llama_log
from app.engine import protocol as P
from app.engine.runner.batch import NpBatch
from app.engine.runner.heartbeat import expected_step_s
from app.engine.runner.draft_policy import DraftGate, OpenGate
from app.engine.runner.ngram_draft import MAX_DRAFT, NgramProposer
from app.engine.runner.output_thread import OutputThread
from app.engine.runner.placement import Placement
from app.engine.runner.sequence import GEN, PREFILL, Seq
from app.engine.runner.testhooks import Hooks

log = logging.getLogger("strata.engine")

# What llama.cpp logs (ERROR/WARN) when a decode ends because our abort callback said so: ggml status 1 is
# GGML_STATUS_ABORTED and llama_decode's 2 is "aborted". While the runner itself has asked for an abort these are
# the expected result of a client's Stop/disconnect, not errors, so they go to DEBUG; a real failure (any other
# status or return code) keeps its level even then.
ABORT_LOG_LINES = ("failed with error 1", "compute status: 1", "removing memory module entries",
                   "failed to decode, ret = 2")


class Batcher:
    def __init__(self, model, ctx, send, *, vocab_out, embedder=None, admit=None, hooks: Hooks | None = None,
                 prompt_cache_bytes: int = 0, stream_interval: float = 0.0, checkpoints: int = 0,
                 checkpoint_bytes: int = 0, warmup_s: float = 0.0,
                 speculative: str | None = None, media=None, draft=None):
        self.model, self.ctx, self.send = model, ctx, send
        self.media = media                  # media.Media (the model's projector) or None
        self.stream_interval = stream_interval   # output_thread.stream_interval_s: how long new text may be held
        self.vocab_out = vocab_out          # output.Vocab (token pieces, cached)
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_slots = L.llama_n_seq_max(ctx)
        self.n_batch = L.llama_n_batch(ctx)
        self.n_ctx_seq = L.llama_n_ctx_seq(ctx)
        self.mem = L.llama_get_memory(ctx)
        self.hooks = hooks or Hooks()
        self.can_shift = bool(self.mem) and bool(L.llama_memory_can_shift(self.mem)) and not self.hooks.no_shift
        # a recurrent state is updated in place while a batch computes: a decode stopped half-way leaves every
        # sequence of the batch with a state that matches no position (it cannot be rolled back), so a cancel
        # on such a model waits for the running decode instead of aborting it
        self.abortable = not (L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model))
        self.speculative, self.max_draft, measured = speculation(model, speculative, draft is not None)
        # what drafts: the layout's draft model (draft_model.DraftModel) when it has one, else prompt lookup
        self.proposer = draft if draft is not None else NgramProposer()
        self.gate = DraftGate() if measured and self.proposer.gated else OpenGate()
        self.drafted_total = self.accepted_total = 0
        self.embedder = embedder
        self.admit_fn = admit               # output thread: Seq -> None (fills prompt/chain/detok/stop) or raises
        self.slots: list[Seq | None] = [None] * self.n_slots
        self.placement = Placement(ctx, model, self.n_slots, prompt_cache_bytes, checkpoints, checkpoint_bytes)
        self.seqs: dict[str, Seq] = {}
        self.ready: deque[Seq] = deque()
        self.embed_jobs: deque = deque()
        self.out_q: queue.SimpleQueue = queue.SimpleQueue()
        self.wake = threading.Event()
        self.stopping = False
        self.batches = (NpBatch(self.n_batch), NpBatch(self.n_batch))
        self._k = 0
        self._rr = 0
        self.in_batch: set[str] = set()
        self.steps = 0
        self._timing: deque = deque(maxlen=128)   # (seconds in llama_decode, seconds of the whole step, tokens)
        self.warmup_s = warmup_s            # the load's one-token warm-up decode: the step estimate before any step
        self._step_t0 = 0.0                 # when the step in progress began (0: none), for the heartbeat
        self._step_tokens = 0
        self._cache_reported = (0, 0, 0, 0, 0, 0)
        # abort without the GIL: strlen(flag) != 0 aborts the running decode; a Python callback would take the
        # GIL once per graph node and slow a decode by ~80% while another thread is busy (docs/architecture.md,
        # "Runner")
        self._flag = ctypes.create_string_buffer(2)
        self._abort_cb = ctypes.cast(ctypes.CDLL(None).strlen, L.ggml_abort_callback)
        L.llama_set_abort_callback(ctx, self._abort_cb, ctypes.cast(self._flag, ctypes.c_void_p))
        if draft is not None:               # a cancel stops the draft model's decode the same way
            L.llama_set_abort_callback(draft.ctx, self._abort_cb, ctypes.cast(self._flag, ctypes.c_void_p))
        llama_log.add_level_rule(self._relevel_abort_lines)
        self.output = OutputThread(self)
        self.threads = [threading.Thread(target=self._context_loop, name="strata-context", daemon=True),
                        threading.Thread(target=self.output.run, name="strata-output", daemon=True)]

    # ---- called from the reader thread -------------------------------------------------------------------
    def start(self):
        for t in self.threads:
            t.start()

    def submit(self, req: P.GenerateRequest) -> None:
        seq = Seq(req)
        if req.id in self.seqs:
            self.send(P.ErrorEvent(req.id, f"duplicate request id {req.id!r}", kind="invalid"))
            return
        self.seqs[req.id] = seq
        self.out_q.put(("admit", seq))

    def submit_embed(self, req: P.EmbedRequest) -> None:
        self.out_q.put(("embed", req))

    def cancel(self, req_id: str) -> None:
        seq = self.seqs.get(req_id)
        if seq is None:
            return
        seq.cancelled = True
        if req_id in self.in_batch and self.abortable:
            self.request_abort()
        self.wake.set()

    def request_abort(self) -> None:
        """Stop the running decode now (CPU backends poll the flag per graph node); the context thread clears
        the flag before its next step, so the flag being set means 'an abort we asked for is in flight'."""
        self._flag[0] = b"\x01"

    def _relevel_abort_lines(self, level: int, line: str) -> int:
        if level > logging.DEBUG and self._flag.raw[0] and any(k in line for k in ABORT_LOG_LINES):
            return logging.DEBUG
        return level

    def stats(self, req_id: str = "") -> P.Stats:
        t = list(self._timing)
        busy = sum(x[1] for x in t)
        return P.Stats(slots_total=self.n_slots, slots_busy=sum(s is not None for s in self.slots),
                       queued=len(self.ready), decode_fraction=(sum(x[0] for x in t) / busy) if busy else 0.0,
                       id=req_id, steps=self.steps, draft_tokens=self.drafted_total,
                       draft_accepted=self.accepted_total, **self.placement.stats())

    def step_state(self) -> tuple[int, float, int, float]:
        """For the heartbeat thread (heartbeat.py): (steps done, seconds the step in progress has run, its tokens,
        how long such a step should take). Plain attribute reads: no lock the context thread could hold."""
        t0, n = self._step_t0, self._step_tokens
        if not t0:
            return self.steps, 0.0, 0, 0.0
        return self.steps, time.perf_counter() - t0, n, expected_step_s(list(self._timing), n, self.warmup_s)

    def stop(self, timeout: float = 10.0) -> None:
        llama_log.remove_level_rule(self._relevel_abort_lines)
        self.stopping = True
        self.wake.set()
        self.out_q.put(("quit", None))
        for t in self.threads:
            if t.is_alive():
                t.join(timeout)

    # ---- context thread -----------------------------------------------------------------------------------
    def _context_loop(self):
        try:
            while not self.stopping:
                self.wake.clear()
                self._flag[0] = b"\x00"
                self._reap()
                self._admit_ready()
                self.placement.serve_waiting(self.slots)
                if self.embed_jobs and self._run_embed(self.embed_jobs[0]):
                    self.embed_jobs.popleft()
                    continue
                if not self._step():
                    self.wake.wait(0.5)
        except BaseException:  # an engine bug: end the process so the parent fails requests instead of hanging
            log.exception("context thread crashed")
            os._exit(70)

    def _reap(self):
        for seq in self.slots:
            if seq is not None and (seq.finish or seq.cancelled or seq.out_reason):
                self._release(seq, seq.out_reason or seq.finish or "cancelled")

    def _release(self, seq: Seq, reason: str):
        if seq.slot is not None:
            # the slot keeps the sequence's cells for the next request (prompt cache); not after a failure
            self.placement.release(seq, reason != "error", self.slots)
            self.slots[seq.slot] = None
            seq.slot = None
            self._report_cache()
        if seq.sampler is not None:
            seq.sampler.free()
            seq.sampler = None
        seq.free_media()
        if seq.finish is None:
            seq.finish = reason
        seq.t_done = time.perf_counter()
        self.out_q.put(("done", seq))

    def _admit_ready(self):
        while self.ready:
            if self.ready[0].cancelled:
                self._release(self.ready.popleft(), "cancelled")
                continue
            if None not in self.slots:
                return
            seq = self.ready.popleft()
            if self.hooks.abort_marker and seq.req.prompt == self.hooks.abort_marker:
                self.hooks.abort()   # test hook: die like a GGML_ASSERT would, mid-request
            i = self.placement.place(seq, self.slots)
            seq.slot, self.slots[i] = i, seq
            seq.t_admit = time.perf_counter()
            self._report_cache()

    def _report_cache(self) -> None:
        host, cps = self.placement.host, self.placement.checkpoints
        state = (host.bytes, len(host.entries), cps.bytes, cps.count, cps.hits, cps.misses)
        if state != self._cache_reported:
            self._cache_reported = state
            self.send(P.PromptCacheState(bytes=host.bytes, entries=len(host.entries), limit=host.limit,
                                         checkpoint_bytes=cps.bytes, checkpoints=cps.count,
                                         checkpoint_hits=cps.hits, checkpoint_misses=cps.misses))

    def _context_shift(self, seq: Seq):
        """The sequence filled its context: drop the oldest half after the kept prefix."""
        n_keep = min(seq.n_keep, max(0, seq.n_past - 2))
        n_discard = (seq.n_past - n_keep) // 2
        if self.can_shift and seq.slot not in self.placement.slots.shared:
            L.llama_memory_seq_rm(self.mem, seq.slot, n_keep, n_keep + n_discard)
            L.llama_memory_seq_add(self.mem, seq.slot, n_keep + n_discard, seq.n_past, -n_discard)
            self.placement.shifted(seq)
            seq.n_past -= n_discard
            seq.history = seq.history[:n_keep] + seq.history[n_keep + n_discard:]
            seq.n_exact = n_keep if seq.n_exact is None else min(seq.n_exact, n_keep)
        else:  # cannot shift (e.g. recurrent / some SWA caches), or cells shared with another sequence (a shift
            # would move them for both): clear this sequence's cells and re-process the kept window
            window = seq.history[:n_keep] + seq.history[n_keep + n_discard:] + [seq.pending]
            L.llama_memory_seq_rm(self.mem, seq.slot, -1, -1)
            self.placement.slots.shared.discard(seq.slot)
            self.placement.shifted(seq)
            seq.history, seq.n_past, seq.n_exact = [], 0, None
            seq.prompt, seq.todo, seq.state = np.asarray(window, dtype=np.int32), 0, PREFILL

    # ---- one step: build batch -> decode -> sample -> finish ---------------------------------------------------
    def _step(self) -> bool:
        """One scheduling step; False when there was nothing to decode."""
        t_start = time.perf_counter()
        b = self.batches[self._k]
        self._k ^= 1
        plan, outs = self._build_batch(b)
        if b.n == 0:
            return False
        self._step_tokens, self._step_t0 = b.n, t_start     # the heartbeat reports the step while it runs
        try:
            rc, msg, t_decode = self._decode(b, plan)
            if rc != 0:
                self._on_decode_failure(rc, msg, b, plan)
                return True
            self.steps += 1
            gen_only = all(seq.state == GEN for seq, _, _ in plan)
            drafted = b.n > len(plan)               # (generation-only steps) some sequence decoded a draft
            self._advance(plan)
            results, finished = self._sample(outs)
            if gen_only and self.speculative:
                self.gate.record(drafted, len(results), t_decode)
            self._finish(results, finished)
        finally:
            self._step_t0 = 0.0
        self._timing.append((t_decode, time.perf_counter() - t_start, b.n))
        return True

    def _build_batch(self, b: NpBatch):
        """Fill `b`: one row per generating sequence, then prompt chunks. Returns (plan, outs):
        plan = [(seq, first position in this batch, n tokens)], outs = [(seq, batch row whose logits we sample)]."""
        b.clear()
        outs: list[tuple[Seq, int]] = []
        plan: list[tuple[Seq, int, int]] = []
        active = [s for s in self.slots if s is not None]
        gen = []
        for seq in active:
            seq.draft = []
            if seq.state == GEN:
                if seq.n_past >= self.n_ctx_seq:
                    self._context_shift(seq)
                if seq.state == GEN:            # a shift without can_shift turns it back into a prefill
                    gen.append(seq)
        may_draft = self.speculative and bool(gen) and self.gate.allow()
        drafts = self._drafts(gen, b.capacity) if may_draft else {}
        for seq in gen:
            seq.draft = drafts.get(seq.id) or []
            outs.append((seq, b.add(seq.pending, seq.n_past, seq.slot, True)))
            if seq.draft:
                b.add_span(seq.draft, seq.n_past + 1, seq.slot, logits_last=True, logits_all=True)
            plan.append((seq, seq.n_past, 1 + len(seq.draft)))
        prefill = [s for s in active if s.state == PREFILL]
        if prefill:
            self._rr = (self._rr + 1) % len(prefill)
            prefill = prefill[self._rr:] + prefill[:self._rr]
            grant = prefill_grants(prefill, b.free)
            imaged = False
            for seq in prefill:
                k = grant[seq.id]
                if seq.media is not None:
                    self._image_boundary(seq)
                    nxt = seq.media.next_start(seq.todo)
                    if nxt == seq.todo:                          # an image starts here: one image per step
                        if not imaged:
                            imaged = True
                            self._eval_image(seq)
                        continue
                    if nxt is not None:
                        k = min(k, nxt - seq.todo)               # a text chunk ends where an image starts
                stops = self.placement.checkpoint_stops(seq)     # a chunk ends where a checkpoint is due
                if stops:
                    k = min(k, stops[0] - seq.todo)
                if k <= 0:
                    continue
                last = seq.todo + k == len(seq.prompt)
                row = b.add_span(seq.prompt[seq.todo:seq.todo + k], seq.n_past, seq.slot, logits_last=last)
                plan.append((seq, seq.n_past, k))
                if last:
                    outs.append((seq, row))
        return plan, outs

    def _image_boundary(self, seq: Seq) -> None:
        """A prefix found in the prompt cache must not end inside an image (its embeddings come whole): cut the
        cells back to the image's start."""
        start = seq.media.inside(seq.todo)
        if start is None:
            return
        if not L.llama_memory_seq_rm(self.mem, seq.slot, start, -1):
            L.llama_memory_seq_rm(self.mem, seq.slot, -1, -1)
            start = 0
        seq.todo = seq.n_past = start
        seq.n_cached = min(seq.n_cached, start)
        seq.history = seq.history[:start]

    def _eval_image(self, seq: Seq) -> None:
        """Encode the image at seq.todo and decode its embeddings into the sequence's cells (runner/media.py),
        outside the step's batch; a failure ends this sequence only."""
        start = seq.todo
        chunk, n = seq.media.images[start]
        t0 = time.perf_counter()
        self._step_tokens, self._step_t0 = n, t0            # one step of n tokens, for the heartbeat
        try:
            self.hooks.hit("image")
            n_past = self.media.eval_image(self.ctx, chunk, seq.n_past, seq.slot, self.n_batch)
        except Exception as e:  # noqa: BLE001 - mtmd's failure: this request fails, the runner goes on
            L.llama_memory_seq_rm(self.mem, seq.slot, start, -1)
            log.error("image of request %s: %s", seq.id, e)
            seq.error = str(e)
            self._release(seq, "error")
            return
        finally:
            self._step_t0 = 0.0
        dt = time.perf_counter() - t0
        self._timing.append((dt, dt, n))
        seq.history.extend(seq.prompt[start:start + n].tolist())
        seq.todo, seq.n_past = start + n, n_past
        self.placement.after_prefill(seq)

    def _decode(self, b: NpBatch, plan) -> tuple[int, str, float]:
        """llama_decode on `b`, unless a cancel arrived while it was built. Returns (rc, message, seconds)."""
        self.in_batch = {seq.id for seq, _, _ in plan}
        t_decode = 0.0
        try:
            self.hooks.hit("step")
            if any(seq.cancelled for seq, _, _ in plan):
                rc = 2                               # a cancel arrived while building: skip straight to rollback
            else:
                if self.hooks.hang_marker:
                    self.hooks.hang_if_marked(seq.req.prompt for seq, _, _ in plan)
                t0 = time.perf_counter()
                rc = L.llama_decode(self.ctx, b.struct)
                t_decode = time.perf_counter() - t0
                if rc == 0:
                    self.placement.pending_copy.clear()     # llama.cpp did the queued KV copies first
        except Exception as e:
            return -100, str(e), 0.0
        finally:
            self.in_batch = set()
        return rc, f"llama_decode failed with code {rc}", t_decode

    def _on_decode_failure(self, rc: int, msg: str, b: NpBatch, plan) -> None:
        for seq, pos0, _ in plan:                    # processed ubatches may remain: roll every sequence back
            if seq.slot is not None:
                L.llama_memory_seq_rm(self.mem, seq.slot, pos0, -1)
        if rc == 2:                                  # aborted for a cancel: the others just retry next step
            return
        log.error("%s (batch of %d tokens)", msg, b.n)
        for seq, _, _ in plan:
            seq.error = msg
            if seq.slot is not None:
                self._release(seq, "error")

    def _advance(self, plan) -> None:
        """After a successful decode: what each sequence now holds in KV, and which prefills became generations."""
        for seq, pos0, k in plan:
            seq.n_past = pos0 + k
            if seq.state == GEN:
                seq.history.append(seq.pending)
                seq.n_past = pos0 + 1               # a draft's cells count once accepted (_sample)
            else:
                seq.history.extend(seq.prompt[seq.todo:seq.todo + k].tolist())
                seq.todo += k
                if seq.todo == len(seq.prompt):
                    seq.state = GEN
                self.placement.after_prefill(seq)       # a context checkpoint where one is due

    def _sample(self, outs):
        """Sample every sequence that has logits this step. Returns (results for the output thread, finished)."""
        results, finished = [], []
        for seq, row in outs:
            if seq.req.num_predict == 0:                 # prompt only (like llama-server's n_predict 0): no token
                finished.append((seq, "length"))
                continue
            draft = seq.draft if seq.state == GEN else []
            end = seq.n_past + len(draft)           # one past the last drafted cell (GEN: n_past = pending + 1)
            n_ok = 0
            # speculation: sample at each drafted position with the sequence's own chain (so only tokens that are
            # really emitted reach its penalties/grammar/RNG) and go on while the sample equals the draft, as
            # llama.cpp's common_sampler_sample_and_accept_n; every token comes from the model's distribution
            while True:
                try:
                    tok, logits = self._sample_row(seq, row + n_ok)
                except Exception as e:  # GrammarStuck names the grammar; only this sequence ends
                    seq.error = f"sampling failed: {e}"
                    finished.append((seq, "error"))
                    break
                if seq.n_gen == 0:
                    seq.t_first = time.perf_counter()
                seq.pending = tok
                seq.n_gen += 1
                if seq.drafter is not None:
                    seq.drafter.push(tok)
                eog = bool(L.llama_vocab_is_eog(self.vocab, tok))
                results.append((seq, tok, logits, eog))
                reason = self._end_reason(seq, tok, eog)
                if reason:
                    finished.append((seq, reason))
                    break
                if n_ok == len(draft) or tok != draft[n_ok]:
                    break
                seq.history.append(tok)             # the drafted cell holds this very token: keep it
                seq.n_past += 1
                n_ok += 1
            if draft:
                self._settle_draft(seq, len(draft), n_ok, end)
        return results, finished

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

    # ---- speculation (docs/architecture.md, "Speculative decoding") ------------------------------------------
    def _drafts(self, gen: list[Seq], capacity: int) -> dict[str, list[int]]:
        """The tokens each generating sequence decodes after its pending token this step (request id -> draft):
        the proposer's guess (runner/proposer.py: prompt lookup, or the draft model), within each sequence's
        limit and the batch's rows. A cancel arriving meanwhile aborts a draft model's decode."""
        asks = [(seq, n) for seq in gen if (n := self._draft_limit(seq)) > 0]
        if not asks:
            return {}
        self.in_batch = {seq.id for seq, _ in asks}
        try:
            return self.proposer.propose(asks, len(gen), capacity)
        finally:
            self.in_batch = set()

    def _draft_limit(self, seq: Seq) -> int:
        """The longest draft `seq` may decode this step: 0 when speculation is off (runner, request, or a model
        whose memory cannot drop cells by position), else bounded by the context and the reply's token limit."""
        if not (self.speculative and seq.speculate) or seq.req.num_predict == 0:
            return 0
        limit = min(self.max_draft, self.n_ctx_seq - seq.n_past - 1)
        if seq.req.num_predict > 0:
            limit = min(limit, seq.req.num_predict - seq.n_gen - 1)
        return max(0, limit)

    def _settle_draft(self, seq: Seq, n_draft: int, n_ok: int, end: int) -> None:
        """After verifying a draft: count it, adapt the drafter, and remove the rejected cells from KV (from the
        first cell past what the sequence holds, so KV = history again, which the prompt cache relies on)."""
        seq.n_drafted += n_draft
        seq.n_accepted += n_ok
        self.drafted_total += n_draft
        self.accepted_total += n_ok
        seq.draft = []
        if seq.n_past < end and seq.slot is not None:
            L.llama_memory_seq_rm(self.mem, seq.slot, seq.n_past, -1)
        self.proposer.verified(seq, n_draft, n_ok)

    def _end_reason(self, seq: Seq, tok: int, eog: bool) -> str | None:
        if eog and not seq.req.ignore_eos:
            return "stop"
        if seq.stop_bytes is not None and not eog and seq.stop_bytes.push(self.vocab_out.piece(tok)):
            return "stop"                                # a stop string: no need to decode this token
        if 0 < seq.req.num_predict <= seq.n_gen:
            return "length"
        return None

    def _finish(self, results, finished) -> None:
        if results:
            self.out_q.put(("step", results))
        for seq, reason in finished:
            self._release(seq, reason)

    def _run_embed(self, job) -> bool:
        """Run one embedding job to the end; False (job kept) while a generative model has no free slot for it
        (the service leases a slot per embedding request, so one frees up as running sequences finish)."""
        req, token_lists, n_tokens = job
        seq_id = 0
        if self.embedder.is_embedding_model:
            self.placement.forget_all()     # it decodes on this context and clears its memory
        else:
            free = [i for i, s in enumerate(self.slots) if s is None]
            if not free:
                return False
            seq_id = self.placement.borrow(free)   # the least useful cached prefix goes (to the host cache)
        self._step_tokens, self._step_t0 = n_tokens, time.perf_counter()   # one long step, for the heartbeat
        try:
            vectors = self.embedder.embed(token_lists, normalize=req.normalize, seq=seq_id)
            self.send(P.EmbedResult(req.id, vectors, n_tokens))
        except Exception as e:
            log.exception("embedding failed")
            self.send(P.EmbedResult(req.id, [], 0, error=f"embedding failed: {e}"))
        finally:
            self._step_t0 = 0.0
        return True


def prefill_grants(prefill: list[Seq], budget: int) -> dict[str, int]:
    """How many prompt tokens each prefilling sequence feeds this step: equal shares of the free batch rows
    first, then the leftovers in round-robin order (the list's order), so no long prompt starves the others."""
    share = max(1, budget // len(prefill))
    grant = {}
    for seq in prefill:
        grant[seq.id] = min(len(seq.prompt) - seq.todo, share, budget)
        budget -= grant[seq.id]
    for seq in prefill:
        extra = min(len(seq.prompt) - seq.todo - grant[seq.id], budget)
        if extra > 0:
            grant[seq.id] += extra
            budget -= extra
    return grant


# Off unless asked: on this 2-core CPU "auto" made edits 1.4-1.9x faster than llama-server (Qwen2.5-Coder-0.5B) but
# free text 0.84x on a fresh runner (its gate needs ~24 drafted steps before its first verdict), and free text is
# what most replies are. Until the gate never loses there, speculation is the user's choice (STRATA_SPECULATIVE).
DEFAULT_SPECULATION = "off"


def speculation(model, setting: str | None = None, draft_model: bool = False) -> tuple[bool, int, bool]:
    """(on, longest draft, gate drafts by their measured speed) for this runner, from `setting` (the service's
    STRATA_SPECULATIVE, app/engine/runner_settings.py; empty: DEFAULT_SPECULATION): "auto" drafts while steps with
    drafts measure faster than steps without (draft_policy.DraftGate); "on" always drafts (tests); "off"/"0" never
    drafts; a number is "auto" with that longest draft. Off for a recurrent or hybrid model: its state cannot drop
    the rejected tokens by position. With a draft model (the model's `draft` option) it is on unless the setting
    says off: the user chose it."""
    raw = (setting or "").strip().lower() or ("on" if draft_model else DEFAULT_SPECULATION)
    if raw in ("off", "0", "false", "no", "none"):
        return False, 0, False
    if L.llama_model_is_recurrent(model) or L.llama_model_is_hybrid(model):
        return False, 0, False
    return True, int(raw) if raw.isdigit() else MAX_DRAFT, raw not in ("on", "always", "1", "true", "yes")
