"""Continuous batching inside the runner: slots, the context thread and the output thread.

Two threads (DESIGN.md "Process model"):
- the CONTEXT thread owns the llama context: it admits ready requests into free slots, builds each step's batch
  (one token per generating sequence, then prompt chunks shared round-robin), calls `llama_decode` (the GIL is
  released there), samples with each sequence's chain, and releases slots. Nothing else touches the context.
- the OUTPUT thread does everything else while the context thread decodes: admission work (chat template,
  tokenize, grammar, sampler chain), and the outputs of the last step (detokenize, stop strings, logprobs from
  copied logits, events to the parent).
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
from app.engine.runner.output import logprobs_from_logits
from app.engine.runner.testhooks import Hooks

log = logging.getLogger("strata.engine")

PREFILL, GEN = "prefill", "gen"
N_KEEP = 4                      # tokens kept at the start of a sequence on context shift (Ollama's num_keep)
# What llama.cpp logs (ERROR/WARN) when a decode ends because our abort callback said so: ggml status 1 is
# GGML_STATUS_ABORTED and llama_decode's 2 is "aborted". While the runner itself has asked for an abort these are
# the expected result of a client's Stop/disconnect, not errors, so they go to DEBUG; a real failure (any other
# status or return code) keeps its level even then.
ABORT_LOG_LINES = ("failed with error 1", "compute status: 1", "removing memory module entries",
                   "failed to decode, ret = 2")


class Seq:
    """One request's state from arrival to done. Fields are written by one thread at a time (see comments)."""

    def __init__(self, req):
        self.req = req
        self.id = req.id
        self.cancelled = False          # set by the reader thread
        self.finish: str | None = None  # requested end reason (context or output thread)
        self.out_reason: str | None = None   # reason the output thread saw first (a stop string)
        self.error: str | None = None
        self.error_kind = "error"
        self.slot: int | None = None
        self.state = PREFILL
        self.prompt = np.zeros(0, dtype=np.int32)   # tokens still to feed (prefill, or re-process window)
        self.todo = 0                   # index of the next prompt token to feed
        self.n_prompt = 0
        self.n_past = 0                 # tokens in this sequence's KV cells
        self.history: list[int] = []    # the tokens in KV, for the re-process fallback and `context`
        self.pending = -1               # sampled, not yet decoded
        self.n_gen = 0
        self.chain = None
        self.n_keep = 0
        self.t_admit = self.t_first = self.t_done = 0.0
        # output-thread state
        self.detok = None
        self.stop = None
        self.stop_bytes = None          # output.StopBytes, read by the context thread after sampling
        self.n_unsent = 0
        self.n_out = 0
        self.pending_lp: list = []


class Batcher:
    def __init__(self, model, ctx, send, *, vocab_out, embedder=None, admit=None, hooks: Hooks | None = None):
        self.model, self.ctx, self.send = model, ctx, send
        self._vocab_out = vocab_out         # output.Vocab (token pieces, cached)
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_slots = L.llama_n_seq_max(ctx)
        self.n_batch = L.llama_n_batch(ctx)
        self.n_ctx_seq = L.llama_n_ctx_seq(ctx)
        self.mem = L.llama_get_memory(ctx)
        self.hooks = hooks or Hooks()
        self.can_shift = bool(self.mem) and bool(L.llama_memory_can_shift(self.mem)) and not self.hooks.no_shift
        self.embedder = embedder
        self.admit_fn = admit               # output thread: Seq -> None (fills prompt/chain/detok/stop) or raises
        self.slots: list[Seq | None] = [None] * self.n_slots
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
        self._timing: deque = deque(maxlen=128)   # (seconds in llama_decode, seconds of the whole step)
        # abort without the GIL: strlen(flag) != 0 aborts the running decode (ENGINE-NOTES section 11)
        self._flag = ctypes.create_string_buffer(2)
        self._abort_cb = ctypes.cast(ctypes.CDLL(None).strlen, L.ggml_abort_callback)
        L.llama_set_abort_callback(ctx, self._abort_cb, ctypes.cast(self._flag, ctypes.c_void_p))
        llama_log.add_level_rule(self._relevel_abort_lines)
        self.threads = [threading.Thread(target=self._context_loop, name="strata-context", daemon=True),
                        threading.Thread(target=self._output_loop, name="strata-output", daemon=True)]

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
        if req_id in self.in_batch:
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
                       id=req_id, steps=self.steps)

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
                if self.embed_jobs:
                    self._run_embed(self.embed_jobs.popleft())
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
            L.llama_memory_seq_rm(self.mem, seq.slot, -1, -1)
            self.slots[seq.slot] = None
            seq.slot = None
        if seq.chain:
            L.llama_sampler_free(seq.chain)
            seq.chain = None
        if seq.finish is None:
            seq.finish = reason
        seq.t_done = time.perf_counter()
        self.out_q.put(("done", seq))

    def _admit_ready(self):
        while self.ready:
            if self.ready[0].cancelled:
                self._release(self.ready.popleft(), "cancelled")
                continue
            try:
                i = self.slots.index(None)
            except ValueError:
                return
            seq = self.ready.popleft()
            if self.hooks.abort_marker and seq.req.prompt == self.hooks.abort_marker:
                os.abort()   # test hook: die like a GGML_ASSERT would, mid-request
            L.llama_memory_seq_rm(self.mem, i, -1, -1)
            seq.slot, self.slots[i] = i, seq
            seq.t_admit = time.perf_counter()

    def _context_shift(self, seq: Seq):
        """The sequence filled its context: drop the oldest half after the kept prefix."""
        n_keep = min(seq.n_keep, max(0, seq.n_past - 2))
        n_discard = (seq.n_past - n_keep) // 2
        if self.can_shift:
            L.llama_memory_seq_rm(self.mem, seq.slot, n_keep, n_keep + n_discard)
            L.llama_memory_seq_add(self.mem, seq.slot, n_keep + n_discard, seq.n_past, -n_discard)
            seq.n_past -= n_discard
            seq.history = seq.history[:n_keep] + seq.history[n_keep + n_discard:]
        else:  # cannot shift (e.g. recurrent / some SWA caches): clear and re-process the kept window
            window = seq.history[:n_keep] + seq.history[n_keep + n_discard:] + [seq.pending]
            L.llama_memory_seq_rm(self.mem, seq.slot, -1, -1)
            seq.history, seq.n_past = [], 0
            seq.prompt, seq.todo, seq.state = np.asarray(window, dtype=np.int32), 0, PREFILL

    def _step(self) -> bool:
        t_start = time.perf_counter()
        b = self.batches[self._k]
        self._k ^= 1
        b.clear()
        outs: list[tuple[Seq, int]] = []            # (seq, batch row with logits)
        plan: list[tuple[Seq, int, int]] = []       # (seq, first pos in this batch, n tokens)
        active = [s for s in self.slots if s is not None]
        for seq in active:
            if seq.state == GEN:
                if seq.n_past >= self.n_ctx_seq:
                    self._context_shift(seq)
                if seq.state == GEN:
                    outs.append((seq, b.add(seq.pending, seq.n_past, seq.slot, True)))
                    plan.append((seq, seq.n_past, 1))
        prefill = [s for s in active if s.state == PREFILL]
        if prefill:
            self._rr = (self._rr + 1) % len(prefill)
            prefill = prefill[self._rr:] + prefill[:self._rr]
            budget = b.free
            share = max(1, budget // len(prefill))
            grant = {}
            for seq in prefill:                      # equal shares first, then leftovers round-robin
                grant[seq.id] = min(len(seq.prompt) - seq.todo, share, budget)
                budget -= grant[seq.id]
            for seq in prefill:
                extra = min(len(seq.prompt) - seq.todo - grant[seq.id], budget)
                if extra > 0:
                    grant[seq.id] += extra
                    budget -= extra
            for seq in prefill:
                k = grant[seq.id]
                if k <= 0:
                    continue
                last = seq.todo + k == len(seq.prompt)
                row = b.add_span(seq.prompt[seq.todo:seq.todo + k], seq.n_past, seq.slot, logits_last=last)
                plan.append((seq, seq.n_past, k))
                if last:
                    outs.append((seq, row))
        if b.n == 0:
            return False
        self.in_batch = {seq.id for seq, _, _ in plan}
        try:
            self.hooks.hit("step")
            if any(seq.cancelled for seq, _, _ in plan):
                rc = 2                               # a cancel arrived while building: skip straight to rollback
            else:
                t0 = time.perf_counter()
                rc = L.llama_decode(self.ctx, b.struct)
                t_decode = time.perf_counter() - t0
        except Exception as e:
            rc, t_decode = -100, 0.0
            msg = str(e)
        else:
            msg = f"llama_decode failed with code {rc}"
        finally:
            self.in_batch = set()
        if rc != 0:
            for seq, pos0, _ in plan:                # processed ubatches may remain: roll every sequence back
                if seq.slot is not None:
                    L.llama_memory_seq_rm(self.mem, seq.slot, pos0, -1)
            if rc == 2:                              # aborted for a cancel: the others just retry next step
                return True
            log.error("%s (batch of %d tokens)", msg, b.n)
            for seq, _, _ in plan:
                seq.error = msg
                if seq.slot is not None:
                    self._release(seq, "error")
            return True
        self.steps += 1
        for seq, pos0, k in plan:
            if seq.state == GEN:
                seq.history.append(seq.pending)
            else:
                seq.history.extend(seq.prompt[seq.todo:seq.todo + k].tolist())
                seq.todo += k
                if seq.todo == len(seq.prompt):
                    seq.state = GEN
            seq.n_past = pos0 + k
        results = []
        finished = []
        for seq, row in outs:
            if seq.req.num_predict == 0:                 # prompt only (like llama-server's n_predict 0): no token
                finished.append((seq, "length"))
                continue
            try:
                self.hooks.hit("sample")
                tok = L.llama_sampler_sample(seq.chain, self.ctx, row)
                logits = None
                if seq.req.logprobs:
                    ptr = L.llama_get_logits_ith(self.ctx, row)
                    if ptr:
                        logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()
            except Exception as e:
                seq.error = f"sampling failed: {e}"
                finished.append((seq, "error"))
                continue
            if seq.n_gen == 0:
                seq.t_first = time.perf_counter()
            seq.pending = tok
            seq.n_gen += 1
            eog = bool(L.llama_vocab_is_eog(self.vocab, tok))
            results.append((seq, tok, logits, eog))
            if eog and not seq.req.ignore_eos:
                finished.append((seq, "stop"))
            elif seq.stop_bytes is not None and not eog and seq.stop_bytes.push(self._vocab_out.piece(tok)):
                finished.append((seq, "stop"))           # a stop string: no need to decode this token
            elif 0 < seq.req.num_predict <= seq.n_gen:
                finished.append((seq, "length"))
        if results:
            self.out_q.put(("step", results))
        for seq, reason in finished:
            self._release(seq, reason)
        t_end = time.perf_counter()
        self._timing.append((t_decode, t_end - t_start))
        return True

    def _run_embed(self, job):
        req, token_lists, n_tokens = job
        try:
            vectors = self.embedder.embed(token_lists, normalize=req.normalize)
            self.send(P.EmbedResult(req.id, vectors, n_tokens))
        except Exception as e:
            log.exception("embedding failed")
            self.send(P.EmbedResult(req.id, [], 0, error=f"embedding failed: {e}"))

    # ---- output thread ------------------------------------------------------------------------------------
    def _output_loop(self):
        while True:
            kind, item = self.out_q.get()
            if kind == "quit":
                return
            try:
                if kind == "step":
                    for seq, tok, logits, eog in item:
                        self._on_token(seq, tok, logits, eog)
                elif kind == "done":
                    self._on_done(item)
                elif kind == "admit":
                    self._on_admit(item)
                elif kind == "embed":
                    self._on_embed(item)
            except Exception:
                log.exception("output thread: %s failed", kind)
                if kind == "done":
                    self.seqs.pop(item.id, None)

    def _on_admit(self, seq: Seq):
        if seq.cancelled:
            self._finish_unadmitted(seq, "cancelled")
            return
        try:
            self.hooks.hit("admit")
            self.admit_fn(seq)
        except Exception as e:
            seq.error = str(e)
            seq.error_kind = "invalid" if isinstance(e, ValueError) else "error"
            self._finish_unadmitted(seq, "error")
            return
        self.ready.append(seq)
        self.wake.set()

    def _finish_unadmitted(self, seq: Seq, reason: str):
        if seq.chain:
            L.llama_sampler_free(seq.chain)
            seq.chain = None
        seq.finish = reason
        self._on_done(seq)

    def _on_token(self, seq: Seq, tok: int, logits, eog: bool):
        if seq.out_reason or seq.cancelled:
            return                                   # tokens decoded after a stop string: never shown
        try:
            self.hooks.hit("output")
            seq.n_out += 1
            seq.n_unsent += 1
            text = "" if eog else seq.detok.push(tok)
            if seq.req.logprobs and logits is not None:
                seq.pending_lp.append(logprobs_from_logits(logits, tok, seq.req.top_logprobs, self._vocab_out))
            safe, stopped = seq.stop.push(text) if text else ("", False)
            if safe:
                self._send_text(seq, safe)
            if stopped:
                seq.out_reason = "stop"
                self.wake.set()
        except Exception as e:
            seq.error = f"output processing failed: {e}"
            seq.out_reason = "error"
            self.wake.set()

    def _send_text(self, seq: Seq, text: str):
        lp = seq.pending_lp or None
        if seq.req.logprobs:
            seq.pending_lp = []
        self.send(P.TokenEvent(seq.id, text, n_tokens=seq.n_unsent, logprobs=lp))
        seq.n_unsent = 0

    def _on_done(self, seq: Seq):
        self.seqs.pop(seq.id, None)
        reason = seq.out_reason or seq.finish or "stop"
        if reason == "error":
            self.send(P.ErrorEvent(seq.id, seq.error or "request failed", kind=seq.error_kind))
            return
        if reason != "cancelled" and seq.detok is not None:
            tail = seq.detok.flush()
            safe = seq.stop.push(tail)[0] if tail else ""
            safe += seq.stop.flush()
            if safe or seq.n_unsent:
                self._send_text(seq, safe)
        t_first = seq.t_first or seq.t_done
        ctx_tokens = None
        if seq.req.messages is None and reason != "cancelled":
            ctx_tokens = list(seq.history)
        self.send(P.DoneEvent(
            seq.id, reason, prompt_tokens=seq.n_prompt,
            completion_tokens=seq.n_out if seq.out_reason else seq.n_gen,
            prompt_seconds=max(0.0, t_first - seq.t_admit) if seq.t_admit else 0.0,
            generation_seconds=max(0.0, seq.t_done - t_first) if seq.t_admit else 0.0,
            context_tokens=ctx_tokens))

    def _on_embed(self, req: P.EmbedRequest):
        try:
            token_lists, n_tokens = self.embedder.prepare(req.inputs, req.truncate)
        except ValueError as e:
            self.send(P.EmbedResult(req.id, [], 0, error=str(e)))
            return
        self.embed_jobs.append((req, token_lists, n_tokens))
        self.wake.set()
