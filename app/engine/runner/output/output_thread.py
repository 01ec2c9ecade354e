"""The runner's output thread: everything that is not the llama context, done while the context thread decodes.

It admits requests (admission.py: template, tokenize, grammar, sampler chain), turns each step's sampled tokens
into events (detokenize, stop strings, logprobs from copied logits), sends the one DoneEvent or ErrorEvent of
every request, and tokenizes embedding inputs. See docs/architecture.md, "Runner".
"""
from __future__ import annotations

import logging
import queue
import time

from app.discovery.host import cpu_cores
from app.engine import protocol as P
from app.engine.runner.cache import explain
from app.engine.runner.output.text import logprobs_from_logits
from app.engine.runner.output.output_port import (Admit, EmbedInputs, EmbedJob, LoopPort, OutputItem,
                                                  PrefillProgress, Quit, Released, StepTokens)
from app.engine.runner.sequence import Seq
from app.engine.runner.testhooks import Hooks

log = logging.getLogger("strata.engine")

# While every CPU runs a compute thread, each token's text costs Python work in two processes (this thread:
# detokenize, stop strings, send; the service: receive, render, write) that preempts a compute thread, and the
# others then wait for it at the next graph barrier: SmolLM2 on 2 of 2 CPUs decoded at 0.91-0.95x llama-server
# sending every token, 0.97-0.99x sending at most every 30 ms, 0.99x every 50 ms (docs/memory-truth.md). 50 ms is
# 20 updates a second, still smooth to read; the first token always goes at once (time to first token unchanged).
BUSY_STREAM_INTERVAL_S = 0.050


def stream_interval_s(gpu_devices, n_threads: int, setting_ms: float | None = None, cpus: int | None = None) -> float:
    """How long a sequence's new text may be held before it is sent: `setting_ms` when set (the service's
    STRATA_STREAM_INTERVAL_MS; 0 = every token), else BUSY_STREAM_INTERVAL_S when the model computes on the CPU
    with a thread on every CPU this process may use, else 0 (a spare CPU, or a GPU doing the work, absorbs the
    per-token cost)."""
    if setting_ms is not None:
        return max(0.0, setting_ms) / 1000
    busy = not gpu_devices and n_threads >= (cpus or cpu_cores())
    return BUSY_STREAM_INTERVAL_S if busy else 0.0


class OutputThread:
    """Works the loop's `out_q` (output_port.OutputItem: Admit, StepTokens, Released, EmbedInputs, Quit).
    It writes a request's admission record and output state (sequence.py) and reaches the loop only through its
    port (output_port.py)."""

    def __init__(self, port: LoopPort, *, send, out_q: queue.SimpleQueue, interval: float, admit, hooks: Hooks,
                 n_ctx_seq: int, vocab_out, embedder=None):
        self.port = port
        self.send, self.out_q = send, out_q
        self.interval = interval            # stream_interval_s: how long new text may be held
        self.admit_fn = admit               # Seq -> None (fills seq.adm and the output state) or raises
        self.hooks = hooks
        self.n_ctx_seq = n_ctx_seq
        self.vocab_out = vocab_out          # text.Vocab (token pieces, cached)
        self.embedder = embedder

    def run(self):
        while True:
            item: OutputItem = self.out_q.get()
            kind = type(item)
            if kind is Quit:
                return
            try:
                if kind is StepTokens:
                    for s in item.sampled:
                        seq = s.span.seq
                        for tok, logits, eog in s.tokens:
                            self.on_token(seq, tok, logits, eog)
                elif kind is Released:
                    self.on_done(item.seq)
                elif kind is Admit:
                    self.on_admit(item.seq)
                elif kind is EmbedInputs:
                    self.on_embed(item.req)
                elif kind is PrefillProgress:
                    seq = item.seq
                    self.send(P.PromptProgress(seq.id, total=seq.adm.n_prompt, cached=seq.n_cached,
                                               processed=item.processed,
                                               seconds=max(0.0, time.perf_counter() - seq.t_admit)))
            except Exception:
                log.exception("output thread: %s failed", kind.__name__)
                if kind is Released:
                    self.port.forget(item.seq.id)

    def on_admit(self, seq: Seq):
        if seq.cancelled:
            self._finish_unadmitted(seq, "cancelled")
            return
        adm = seq.adm
        try:
            self.hooks.hit("admit")
            self.admit_fn(seq)
        except Exception as e:
            adm.error = str(e)
            adm.error_kind = getattr(e, "kind", None) or ("invalid" if isinstance(e, ValueError) else "error")
            adm.error_data = getattr(e, "data", None)
            self._finish_unadmitted(seq, "error")
            return
        if adm.dropped_messages or adm.truncated_tokens:
            log.info("request %s: prompt fitted to %d tokens per sequence: %d oldest messages dropped, %d tokens cut",
                     seq.id, self.n_ctx_seq, adm.dropped_messages, adm.truncated_tokens)
        self.port.ready(seq)          # first: the context thread starts on the prompt while Admitted is sent (this
        if seq.req.announce:          # thread sends all of a request's events, so Admitted still comes first)
            self.send(P.Admitted(seq.id, adm.n_prompt, self.n_ctx_seq, adm.dropped_messages, adm.truncated_tokens,
                                 adm.think_budget))

    def _finish_unadmitted(self, seq: Seq, reason: str):
        """A request that never reached the loop: free what admission made and send its end."""
        adm = seq.adm
        if adm.media is not None:
            adm.media.free()
        if adm.sampler is not None:
            adm.sampler.free()
        self.on_done(seq, reason)

    def on_token(self, seq: Seq, tok: int, logits, eog: bool):
        out = seq.out
        if out.reason or seq.cancelled:
            return                                   # tokens decoded after a stop string: never shown
        try:
            self.hooks.hit("output")
            out.n_out += 1
            out.n_unsent += 1
            text = "" if eog else out.detok.push(tok)
            if seq.req.logprobs and logits is not None:
                out.pending_lp.append(logprobs_from_logits(logits, tok, seq.req.top_logprobs, self.vocab_out))
            safe, stopped = out.stop.push(text) if text else ("", False)
            if safe:
                out.held += safe
                if not self.interval or time.perf_counter() - out.t_sent >= self.interval:
                    self._send_text(seq)
            if stopped:
                out.reason = "stop"
                self.port.wake()
        except Exception as e:
            out.error = f"output processing failed: {e}"
            out.reason = "error"
            self.port.wake()

    def _send_text(self, seq: Seq):
        """Send the held text with the count (and logprobs) of every token not yet sent."""
        out = seq.out
        lp = out.pending_lp or None
        if seq.req.logprobs:
            out.pending_lp = []
        self.send(P.TokenEvent(seq.id, out.held, n_tokens=out.n_unsent, logprobs=lp))
        out.held, out.n_unsent, out.t_sent = "", 0, time.perf_counter()

    def on_done(self, seq: Seq, reason: str | None = None):
        """The one DoneEvent or ErrorEvent of a request: after the loop released it (`reason` None: the loop's
        or the output thread's own), or for a request that never reached the loop (`reason` given)."""
        self.port.forget(seq.id)
        out = seq.out
        reason = reason or out.reason or seq.finish or "stop"
        if reason == "error":
            kind, data = (seq.adm.error_kind, seq.adm.error_data) if seq.adm.error else ("error", None)
            self.send(P.ErrorEvent(seq.id, seq.error_message or "request failed", kind=kind, data=data))
            return
        if reason != "cancelled" and out.detok is not None:
            tail = out.detok.flush()
            safe = out.stop.push(tail)[0] if tail else ""
            out.held += safe + out.stop.flush()
            if out.held or out.n_unsent:
                self._send_text(seq)
        t_first = seq.t_first or seq.t_done
        ctx_tokens = None
        if seq.req.messages is None and reason != "cancelled" and seq.req.want_context:
            ctx_tokens = list(seq.history)
            if reason == "length" and seq.n_gen > 0 and seq.pending >= 0 and len(ctx_tokens) < self.n_ctx_seq:
                # the last token was sampled and sent as text but never decoded (the limit ended it first): it is
                # part of the reply, so it is part of `context` (Ollama's context is prompt + reply); a follow-up
                # decodes it with its new prompt. (A full window after context shifts stays the window.)
                ctx_tokens.append(seq.pending)
        self.send(P.DoneEvent(
            seq.id, reason, prompt_tokens=seq.adm.n_prompt,
            completion_tokens=out.n_out if out.reason else seq.n_gen,
            prompt_seconds=max(0.0, t_first - seq.t_admit) if seq.t_admit else 0.0,
            generation_seconds=max(0.0, seq.t_done - t_first) if seq.t_admit else 0.0,
            context_tokens=ctx_tokens, stop_string=out.stop.matched if out.stop is not None else None,
            cached_tokens=seq.n_cached, reused_tokens=seq.n_reused, draft_tokens=seq.n_drafted, draft_accepted=seq.n_accepted,
            report=self._report(seq)))

    def _report(self, seq: Seq) -> dict | None:
        """The request's cache report (cache/explain.py): admission's part plus what the prompt cache found."""
        try:
            return explain.finish(seq.adm.report, prompt_tokens=seq.adm.n_prompt, cached=seq.n_cached,
                                  moved=seq.n_reused, source=seq.cache_source, candidates=seq.cache_candidates,
                                  cache_prompt=bool(getattr(seq.req, "cache_prompt", True)))
        except Exception:  # noqa: BLE001 - a report is an extra: never fail the request's end for it
            log.exception("cache report of %s failed", seq.id)
            return None

    def on_embed(self, req: P.EmbedRequest):
        try:
            token_lists, n_tokens = self.embedder.prepare(req.inputs, req.truncate, req.query)
        except ValueError as e:
            self.send(P.EmbedResult(req.id, [], 0, error=str(e)))
            return
        self.port.enqueue(EmbedJob(req, token_lists, n_tokens))
