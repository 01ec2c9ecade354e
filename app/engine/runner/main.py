"""The runner process: loads exactly one Layout, reports progress and actual allocations, then serves requests.

Started by `client.RunnerClient` through multiprocessing's 'spawn' context; `runner_main` is the process entry.
The main thread reads the Connection (requests, cancels, stats, tokenize); the step loop's two threads do the
work (step_loop.py, output_thread.py; request admission in admission.py). A GGML_ASSERT/abort in llama.cpp ends
this process only; the parent sees the pipe close (docs/architecture.md, "Process model"). From the first moment a
heartbeat thread tells the parent the process lives (heartbeat.py), and fd 2 is a pipe the parent reads
(engine/stderr_tail.py), so what an abort prints last reaches the error and the service log.
Covered by tests/integration/engine/test_runner.py (a real runner process).
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time

from llama_cpp import llama_cpp as L

from app.discovery.host import anon_huge_page_bytes
from app.engine import protocol as P
from app.engine.layout.context_rules import SWA_FULL, embed_chunk_tokens
from app.engine.layout.llama_params import context_params, model_params
from app.engine.layout.types import Layout
from app.engine.runner.batch import NpBatch
from app.engine.runner.cache.disk_cache import DiskPromptCache, build_identity, default_limit, file_identity
from app.engine.runner.embedding.embeddings import Embedder, tokenize
from app.engine.runner.heartbeat import HeartbeatThread
from app.engine.runner.output.output_thread import stream_interval_s
from app.engine.runner.output.text import Vocab
from app.engine.runner.prompt.admission import Admission
from app.engine.runner.prompt.media import Media
from app.engine.runner.speculation.draft_model import load_draft
from app.engine.runner.step.step_loop import StepLoop
from app.engine.runner.testhooks import Hooks
from app.engine.runner_settings import RunnerSettings
from app.engine.stderr_tail import InheritedFd, adopt_as_stderr
from app.ggml import alloc_report, llama_log, mtmd_lib

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
    """Load model + context for `layout`. Returns (model, ctx, Loaded, seconds of the one-token warm-up decode) or
    raises RuntimeError(message)."""
    t0 = time.perf_counter()
    last = [-1.0]

    @L.llama_progress_callback
    def on_progress(p, _ud):
        if p >= last[0] + 0.01 or p >= 1.0:
            last[0] = p
            send(P.LoadProgress(float(min(1.0, max(0.0, p)))))
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
        _apply_lora(model, ctx, layout.lora_adapters, lines)
        # warm up in a thread that then ends, so its OpenMP team ends with it and the context thread's team is the
        # only one: two live teams (main + context) hold more threads than there are CPUs at n_threads > cores/2,
        # and libgomp then all but stops spinning at barriers (docs/architecture.md, "llama.cpp facts" 16)
        t = threading.Thread(target=_warm_up, args=(model, ctx), name="strata-warm-up")
        t_warm = time.perf_counter()
        t.start()
        t.join()
        warmup_s = time.perf_counter() - t_warm
    device_ids = [d.device_id for d in layout.devices]
    actual = alloc_report.parse_buffer_lines(lines, device_ids)
    media = _load_projector(model, ctx, layout, n_threads, actual, device_ids)
    vocab = L.llama_model_get_vocab(model)
    loaded = P.Loaded(actual=actual, n_ctx=L.llama_n_ctx(ctx), n_ctx_per_seq=L.llama_n_ctx_seq(ctx),
                      n_vocab=L.llama_vocab_n_tokens(vocab), load_seconds=time.perf_counter() - t0,
                      op_offload_min_batch=_env_int("GGML_OP_OFFLOAD_MIN_BATCH"),
                      vision_missing=_vision_missing(layout, media), huge_pages=anon_huge_page_bytes())
    return model, ctx, loaded, warmup_s, media


def _env_int(name: str) -> int:
    """An integer environment variable as a C getenv + atoi would read it (0 when unset or not a number)."""
    try:
        return int(os.environ.get(name, "0"))
    except ValueError:
        return 0


def _vision_missing(layout, media) -> str:
    """Why the layout's projector was not loaded (its llama.cpp build has no vision library), or ""."""
    if not layout.mmproj_path or media is not None:
        return ""
    try:
        mtmd_lib.load()
    except mtmd_lib.VisionUnavailable as e:
        return str(e)
    return ""


def _load_projector(model, ctx, layout, n_threads, actual: dict, device_ids):
    """The model's vision projector through mtmd (runner/prompt/media.py), or None when it has none or the llama.cpp
    build has no vision library (the model then serves text; images are refused with the reason). What clip allocates
    (weights, image compute buffer) goes into `actual` as the kind "projector". Loaded in a thread that then ends:
    its warm-up encode starts an OpenMP team that must not outlive it (see _warm_up)."""
    if not layout.mmproj_path:
        return None
    try:
        llama_log.route_mtmd()
    except mtmd_lib.VisionUnavailable as e:   # a llama.cpp build without libmtmd: the model serves text
        log.warning("no vision projector loaded: %s", e)
        return None
    result: list = []

    def load_it():
        try:
            result.append(Media(model, layout.mmproj_path, n_threads or L.llama_n_threads(ctx),
                                use_gpu=bool(layout.gpu_devices)))
        except Exception as e:  # noqa: BLE001 - handed to the loading thread
            result.append(e)

    with llama_log.capture_log() as lines:
        t = threading.Thread(target=load_it, name="strata-projector")
        t.start()
        t.join()
    if isinstance(result[0], Exception):
        L.llama_free(ctx)
        L.llama_model_free(model)
        raise RuntimeError(_load_error(lines, str(result[0])))
    for dev, n in alloc_report.projector_sizes(lines, device_ids).items():
        actual.setdefault(dev, {k: 0 for k in alloc_report.KINDS})["projector"] = n
    return result[0]


def _apply_lora(model, ctx, paths, lines) -> None:
    """The model's LoRA adapters (Modelfile ADAPTER / /api/create `adapters`), each at scale 1 as Ollama applies
    them. llama.cpp frees them with the model."""
    if not paths:
        return
    adapters = []
    for p in paths:
        a = L.llama_adapter_lora_init(model, str(p).encode())
        if not a:
            L.llama_free(ctx)
            L.llama_model_free(model)
            raise RuntimeError(_load_error(lines, f"llama.cpp could not load the LoRA adapter {p}"))
        adapters.append(a)
    arr = (L.llama_adapter_lora_p_ctypes * len(adapters))(*adapters)
    scales = (ctypes.c_float * len(adapters))(*([1.0] * len(adapters)))
    if L.llama_set_adapters_lora(ctx, arr, len(adapters), scales) != 0:
        L.llama_free(ctx)
        L.llama_model_free(model)
        raise RuntimeError(_load_error(lines, "llama.cpp could not apply the LoRA adapters"))


def _warm_up(model, ctx) -> None:
    """One tiny decode, then forget it: the first graph's one-time costs (page faults, repacking, OpenMP start)
    are paid at load, not by the first request. load() runs it in a thread that ends (one OpenMP team).

    The main-thread warm-up this replaces left a second OpenMP team alive: with SmolLM2 at n_threads 2 on 2 CPUs
    the runner then made ~1300 context switches per generated token (libgomp's futex sleeps at the graph's barriers,
    `perf stat -e context-switches`) where llama-server spins; see bench/bench_threads.py.
    """
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


SHUTDOWN_SAVE_S = 6.0       # at shutdown, prefixes go to the disk cache for at most this long (the parent waits 10)


def disk_cache(layout, ctx, settings: RunnerSettings, send) -> DiskPromptCache | None:
    """The prompt cache on disk for this model and context (runner/cache/disk_cache.py), or None when off. Its key is
    everything a sequence's state depends on: the model file and adapters, the llama.cpp build, the KV types,
    flash attention (V stored transposed or not) and the KV streams (a state names its stream count)."""
    if not settings.disk_cache_dir or settings.disk_cache_mib == 0:
        return None
    from pathlib import Path
    root = Path(settings.disk_cache_dir)
    limit = default_limit(root) if settings.disk_cache_mib < 0 else settings.disk_cache_mib << 20
    n_seq = L.llama_n_seq_max(ctx)
    try:
        facts = {"model": file_identity(layout.model_path),
                 "adapters": [file_identity(p) for p in layout.lora_adapters],
                 "build": build_identity(), "type_k": layout.type_k, "type_v": layout.type_v,
                 "flash_attn": layout.flash_attn, "swa_full": SWA_FULL, "n_seq": n_seq,
                 "unified": n_seq > 1 and L.llama_n_ctx_seq(ctx) == L.llama_n_ctx(ctx)}
        cache = DiskPromptCache(root, facts, limit)
    except OSError as e:
        log.warning("prompt cache on disk off: %s", e)
        return None
    cache.on_change = lambda: send(P.DiskCacheState(**cache.state()))
    cache.on_change()
    return cache


def runner_main(conn, layout_dict: dict, n_threads: int | None, model_name: str = "", log_dir: str | None = None,
                prompt_cache_bytes: int = 0, stderr_end: InheritedFd | None = None, chat_facts=None,
                settings: RunnerSettings | None = None):
    """The runner process: route logs, load, then serve the Connection until Shutdown or the parent leaves.
    `chat_facts`: the model's ChatFacts as the parent read them from the GGUF (template choice, family, turn stops;
    None: the GGUF's own template, no family markup); the runner never reads them itself. `settings`: what the
    service's config read from the environment for runners (app/engine/runner_settings.py)."""
    settings = settings or RunnerSettings()
    adopt_as_stderr(stderr_end)
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        f = open(os.path.join(log_dir, f"runner-{os.getpid()}.log"), "a", buffering=1)
        os.dup2(f.fileno(), 2)
        sys.stderr = f
    logging.basicConfig(level=settings.log_level,
                        format=f"runner[{model_name or os.getpid()}] %(levelname)s %(name)s: %(message)s")
    sys.setswitchinterval(0.0005)   # the context thread must get the GIL back quickly after llama_decode
    send = _Sender(conn)
    hooks = Hooks()
    heartbeat = HeartbeatThread(send, muted=hooks.mute_heartbeat).start()
    llama_log.install()
    L.llama_backend_init()
    try:
        layout = Layout.from_dict(layout_dict)
        model, ctx, loaded, warmup_s, media = load(layout, n_threads, send)
    except Exception as e:
        send(P.LoadFailed(str(e) or type(e).__name__))
        conn.close()
        return
    try:
        with llama_log.capture_log() as lines:
            draft = load_draft(layout, n_threads, loaded.n_vocab)     # speculative decoding's draft model, if any
        if draft is not None:                 # what its buffers took, as one kind on each device
            for dev, kinds in alloc_report.parse_buffer_lines(lines, [d.device_id for d in layout.devices]).items():
                loaded.actual.setdefault(dev, {k: 0 for k in alloc_report.KINDS})["draft"] = sum(kinds.values())
    except Exception as e:
        send(P.LoadFailed(str(e) or type(e).__name__))
        conn.close()
        os._exit(0)
    vocab_out = Vocab(L.llama_model_get_vocab(model), loaded.n_vocab)
    embedder = Embedder(model, ctx, layout.options.num_ctx, embed_chunk_tokens(
        loaded.n_vocab, L.llama_model_n_embd(model), L.llama_n_batch(ctx)))
    admission = Admission(model, loaded.n_ctx_per_seq, vocab_out, chat_facts)
    disk = None if layout.options.embedding else disk_cache(layout, ctx, settings, send)
    loop = StepLoop(model, ctx, send, vocab_out=vocab_out, embedder=embedder, admit=admission, hooks=hooks,
                    prompt_cache_bytes=prompt_cache_bytes, disk_cache=disk,
                    stream_interval=stream_interval_s(layout.gpu_devices, L.llama_n_threads(ctx),
                                                      settings.stream_interval_ms),
                    checkpoints=layout.options.ctx_checkpoints,
                    checkpoint_bytes=max(0, layout.options.checkpoint_mib) << 20,
                    cache_reuse=layout.options.cache_reuse,
                    warmup_s=warmup_s, media=media, draft=draft, speculative=settings.speculative,
                    async_prep=settings.async_prep, gpu=bool(layout.n_gpu_layers and layout.gpu_devices),
                    latency_factor=settings.decode_latency_factor)
    admission.media = media
    admission.vision_missing = loaded.vision_missing
    admission.mark_last_user = loop.prompt_cache.checkpoints_enabled()
    if loop.drafting.on and loop.drafting.proposer.kind == "ngram":
        admission.enable_views()
    heartbeat.state = loop.step_state
    loop.start()
    send(loaded)
    _serve(conn, loop, send, L.llama_model_get_vocab(model), admission)
    heartbeat.stop()
    loop.stop()
    if not any(t.is_alive() for t in loop.threads):
        _save_prefixes(loop, disk)
        embedder.close()
        if media is not None:
            media.close()
        if draft is not None:
            draft.close()
        L.llama_free(ctx)
        L.llama_model_free(model)
    conn.close()
    os._exit(0)     # the process's memory all comes back; skip interpreter teardown racing daemon threads


def _save_prefixes(loop: StepLoop, disk: DiskPromptCache | None) -> None:
    """The slots' prefixes (running sequences' too) to the disk cache before the process ends, so the next runner
    of this model (a reload, the app started again) continues them instead of computing them again."""
    if disk is None:
        return
    deadline = time.monotonic() + SHUTDOWN_SAVE_S
    try:
        n = loop.prompt_cache.save_all_to_disk(loop.scheduler.slots, deadline)
        disk.flush(max(0.0, deadline - time.monotonic()))
        if n:
            log.info("saved %d prefixes to the prompt cache on disk at shutdown", n)
    except Exception:  # noqa: BLE001 - a failed save must not keep the process from ending
        log.exception("saving prefixes to the prompt cache on disk")


def _serve(conn, loop: StepLoop, send, vocab, admission: Admission) -> None:
    """The reader loop (main thread): hand each message to the step loop; returns on Shutdown or a closed pipe."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return                                  # the parent went away
        if isinstance(msg, P.GenerateRequest):
            loop.submit(msg)
        elif isinstance(msg, P.Cancel):
            loop.cancel(msg.id)
        elif isinstance(msg, P.EmbedRequest):
            loop.submit_embed(msg)
        elif isinstance(msg, P.StatsRequest):
            send(loop.stats(msg.id))
        elif isinstance(msg, P.TokenizeRequest):
            try:
                if msg.chat is not None:       # a chat's prompt: template, tools, thinking switches
                    toks = admission.prompt_tokens(msg.chat)
                    text = None if msg.chat.suffix is not None else admission.prompt_text(msg.chat)
                    send(P.TokenizeResult(msg.id, toks, text))
                else:
                    send(P.TokenizeResult(msg.id, tokenize(vocab, msg.text, msg.add_special, True)))
            except Exception as e:
                send(P.ErrorEvent(msg.id, f"tokenize failed: {e}", kind="invalid"))
        elif isinstance(msg, P.Shutdown):
            return
        else:
            log.warning("unknown message %r", type(msg).__name__)
