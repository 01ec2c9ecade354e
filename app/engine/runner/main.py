"""The runner process: loads exactly one Layout, reports progress and actual allocations, then serves requests.

Started by `client.RunnerClient` through multiprocessing's 'spawn' context; `runner_main` is the process entry.
The main thread reads the Connection (requests, cancels, stats, tokenize); the scheduler's two threads do the
work (batcher.py). A GGML_ASSERT/abort in llama.cpp ends this process only; the parent sees the pipe close.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time

log = logging.getLogger("strata.runner")


class _Sender:
    """Connection.send from several threads: one lock, and a dead pipe is not an error (the parent left)."""

    def __init__(self, conn):
        self.conn = conn
        self.lock = threading.Lock()
        self.closed = False

    def __call__(self, msg) -> None:
        if self.closed:
            return
        try:
            with self.lock:
                self.conn.send(msg)
        except (OSError, EOFError, ValueError):
            self.closed = True


def _load_error(lines: list[str], what: str) -> str:
    interesting = [ln.strip() for ln in lines if any(k in ln.lower() for k in ("error", "failed", "unable", "cannot"))]
    detail = "; ".join(interesting[-4:])
    return f"{what}: {detail}" if detail else what


def load(layout, n_threads, send):
    """Load model + context for `layout`. Returns (model, ctx, Loaded) or raises RuntimeError(message)."""
    from llama_cpp import llama_cpp as L

    from app.ggml import alloc_report, llama_log
    from app.engine.planner.llama_params import context_params, model_params
    from app.engine.protocol import Loaded, LoadProgress

    t0 = time.perf_counter()
    last = [-1.0]

    @L.llama_progress_callback
    def on_progress(p, _ud):
        if p >= last[0] + 0.01 or p >= 1.0:
            last[0] = p
            send(LoadProgress(float(min(1.0, max(0.0, p)))))
        return True

    if not os.path.isfile(layout.model_path):
        raise RuntimeError(f"model file not found: {layout.model_path}")
    with llama_log.capture_log() as lines:
        mp, keep = model_params(layout, progress_callback=on_progress)
        model = L.llama_model_load_from_file(layout.model_path.encode(), mp)
        del keep
        if not model:
            raise RuntimeError(_load_error(lines, f"llama.cpp could not load {layout.model_path}"))
        # llama_init_from_model reserves the compute graph for a full n_ubatch over n_seq_max sequences (the
        # worst-case step), so running out of memory happens here, at load, never in the middle of a request.
        cp = context_params(layout, n_threads)
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            L.llama_model_free(model)
            raise RuntimeError(_load_error(lines, "llama.cpp could not create the context (not enough memory?)"))
        _warm_up(L, model, ctx)
    device_ids = [d.device_id for d in layout.devices]
    actual = alloc_report.parse_buffer_lines(lines, device_ids)
    vocab = L.llama_model_get_vocab(model)
    loaded = Loaded(actual=actual, n_ctx=L.llama_n_ctx(ctx), n_ctx_per_seq=L.llama_n_ctx_seq(ctx),
                    n_vocab=L.llama_vocab_n_tokens(vocab), load_seconds=time.perf_counter() - t0)
    return model, ctx, loaded


def _warm_up(L, model, ctx) -> None:
    """One tiny decode on THIS (the process's main) thread, then forget it.

    Measured on a 16-core host (OpenMP build, 4 threads, SmolLM2): when the first graph of a process is computed
    on a non-main thread, every later decode runs ~3x slower (about the 1-thread speed); when the first one runs on
    the main thread, decodes from the context thread are full speed. 
    """
    from app.engine.runner.batch import NpBatch

    vocab = L.llama_model_get_vocab(model)
    tok = L.llama_vocab_bos(vocab)
    if tok < 0:
        tok = 0
    b = NpBatch(1)
    b.add(tok, 0, 0, True)
    rc = L.llama_decode(ctx, b.struct)
    mem = L.llama_get_memory(ctx)
    if mem:
        L.llama_memory_clear(mem, True)
    if rc != 0:   # e.g. encoder-decoder models cannot decode without an encoder pass: not a load failure
        log.warning("warm-up decode returned %d", rc)


def make_admit(model, n_ctx_seq: int, vocab_out):
    """The admission step (output thread): template, tokenize, truncate, grammar, sampler chain, output state."""
    from llama_cpp import llama_cpp as L

    import numpy as np

    from app.engine.runner import chat_template, grammar, sampling
    from app.engine.runner.embeddings import tokenize
    from app.engine.runner.output import MAX_TOP_LOGPROBS, Detokenizer, StopBytes, StopMatcher
    from app.engine.runner.batcher import N_KEEP

    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    raw_tpl = L.llama_model_chat_template(model, None)
    template = raw_tpl.decode("utf-8", "replace") if raw_tpl else None
    bos_id, eos_id = L.llama_vocab_bos(vocab), L.llama_vocab_eos(vocab)
    bos = vocab_out.piece(bos_id, special=True).decode("utf-8", "replace") if bos_id >= 0 else ""
    eos = vocab_out.piece(eos_id, special=True).decode("utf-8", "replace") if eos_id >= 0 else ""

    def admit(seq):
        req = seq.req
        if not isinstance(req.num_predict, int) or isinstance(req.num_predict, bool):
            raise ValueError("num_predict must be an integer")
        if not isinstance(req.top_logprobs, int) or not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"top_logprobs must be an integer in 0..{MAX_TOP_LOGPROBS}")
        if not isinstance(req.stop, list) or not all(isinstance(s, str) for s in req.stop):
            raise ValueError("stop must be a list of strings")
        if req.messages is not None and not req.raw:
            text = chat_template.render_chat(template, req.messages, bos_token=bos, eos_token=eos)
        elif req.messages is not None:
            text = "".join(str(m.get("content") or "") for m in chat_template.validate_messages(req.messages))
        elif req.prompt is not None:
            if not isinstance(req.prompt, str):
                raise ValueError("prompt must be a string")
            text = req.prompt if req.raw else chat_template.render_chat(
                template, chat_template.prompt_messages(req.prompt, req.system), bos_token=bos, eos_token=eos)
        else:
            raise ValueError("the request needs a prompt or messages")
        toks = tokenize(vocab, text, add_special=True, parse_special=True)
        if len(toks) >= 2 and toks[0] == toks[1] == bos_id:
            toks = toks[1:]                       # the template wrote BOS and the tokenizer added another
        if not toks:
            raise ValueError("the prompt is empty")
        seq.n_keep = min(N_KEEP, len(toks))
        if len(toks) > n_ctx_seq:                 # keep the start (system prompt head) and the most recent part
            toks = toks[:seq.n_keep] + toks[len(toks) - (n_ctx_seq - seq.n_keep):]
        seq.prompt = np.asarray(toks, dtype=np.int32)
        seq.n_prompt = len(toks)
        gbnf = grammar.grammar_for(req.json_mode, req.json_schema)
        seq.chain = sampling.build_chain(req.sampling, vocab, n_vocab, gbnf, n_ctx_seq)
        sampling.accept_prompt(seq.chain, seq.prompt, sampling.penalty_window(req.sampling, n_ctx_seq))
        seq.detok = Detokenizer(vocab_out)
        seq.stop = StopMatcher(list(req.stop))
        seq.stop_bytes = StopBytes(list(req.stop)) if any(req.stop) else None

    return admit


def runner_main(conn, layout_dict: dict, n_threads: int | None, model_name: str = "", log_dir: str | None = None):
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        f = open(os.path.join(log_dir, f"runner-{os.getpid()}.log"), "a", buffering=1)
        os.dup2(f.fileno(), 2)
        sys.stderr = f
    logging.basicConfig(level=os.environ.get("STRATA_RUNNER_LOG", "WARNING"),
                        format=f"runner[{model_name or os.getpid()}] %(levelname)s %(name)s: %(message)s")
    sys.setswitchinterval(0.0005)   # the context thread must get the GIL back quickly after llama_decode

    from llama_cpp import llama_cpp as L

    from app.ggml import llama_log
    from app.engine import protocol as P
    from app.engine.runner.embeddings import Embedder, tokenize
    from app.engine.planner.types import Layout
    from app.engine.planner.llama_params import context_params
    from app.engine.runner.output import Vocab
    from app.engine.runner.batcher import Batcher
    from app.engine.runner.testhooks import Hooks

    send = _Sender(conn)
    llama_log.install()
    L.llama_backend_init()
    try:
        layout = Layout.from_dict(layout_dict)
        model, ctx, loaded = load(layout, n_threads, send)
    except Exception as e:
        send(P.LoadFailed(str(e) or type(e).__name__))
        conn.close()
        return
    vocab = L.llama_model_get_vocab(model)
    vocab_out = Vocab(vocab, loaded.n_vocab)
    embedder = Embedder(model, ctx, lambda: context_params(layout, n_threads))
    engine = Batcher(model, ctx, send, vocab_out=vocab_out, embedder=embedder,
                    admit=make_admit(model, loaded.n_ctx_per_seq, vocab_out), hooks=Hooks())
    engine.start()
    send(loaded)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break                                   # the parent went away
        if isinstance(msg, P.GenerateRequest):
            engine.submit(msg)
        elif isinstance(msg, P.Cancel):
            engine.cancel(msg.id)
        elif isinstance(msg, P.EmbedRequest):
            engine.submit_embed(msg)
        elif isinstance(msg, P.StatsRequest):
            send(engine.stats(msg.id))
        elif isinstance(msg, P.TokenizeRequest):
            try:
                send(P.TokenizeResult(msg.id, tokenize(vocab, msg.text, msg.add_special, True)))
            except Exception as e:
                send(P.ErrorEvent(msg.id, f"tokenize failed: {e}", kind="invalid"))
        elif isinstance(msg, P.Shutdown):
            break
        else:
            log.warning("unknown message %r", type(msg).__name__)
    engine.stop()
    if not any(t.is_alive() for t in engine.threads):
        embedder.close()
        L.llama_free(ctx)
        L.llama_model_free(model)
    conn.close()
    os._exit(0)     # the process's memory all comes back; skip interpreter teardown racing daemon threads
