"""Request options -> what the engine takes: load-time `PlanOptions` fields and per-request `SamplingParams`.

Ollama's `options` mix both kinds (num_ctx and num_gpu change how the model is loaded; temperature and stop
change one request). Model defaults from a Modelfile's PARAMETER lines sit under the request's own options.
Unknown keys are ignored, as Ollama does; a known key with a wrong type or an out-of-range value is a 400.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from app.engine.planner.types import PlanOptions
from app.engine.protocol import SamplingParams

from .errors import ApiError

# Options that change how the model is loaded (a different value means a different runner).
LOAD_KEYS = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "tensor_split", "cpu_moe", "kv_type",
             "flash_attn")
# Accepted and ignored: they have no meaning here (mmap, NUMA, ...) or are deprecated in Ollama.
IGNORED_KEYS = ("numa", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mmap", "use_mlock", "embedding_only",
                "num_keep", "tfs_z", "penalize_newline")
KV_TYPES = ("f16", "q8_0", "q4_0")


@dataclass
class RequestOptions:
    plan: dict = field(default_factory=dict)         # PlanOptions fields set explicitly (load-time)
    n_threads: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    num_predict: int = -1
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False


def _bad(key: str, msg: str) -> ApiError:
    return ApiError(400, f"option {key!r} {msg}", param=key)


def _num(key: str, v, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise _bad(key, f"must be a number, got {v!r}")
    if lo is not None and v < lo:
        raise _bad(key, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise _bad(key, f"must be <= {hi}, got {v}")
    return float(v)


def _int(key: str, v, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(key, f"must be an integer, got {v!r}")
    if lo is not None and v < lo:
        raise _bad(key, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise _bad(key, f"must be <= {hi}, got {v}")
    return v


def _bool(key: str, v) -> bool:
    if not isinstance(v, bool):
        raise _bad(key, f"must be true or false, got {v!r}")
    return v


def parse_stop(key: str, v) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v] if v else []
    if isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v):
        return [s for s in v if s]
    raise _bad(key, f"must be a string or a list of strings, got {v!r}")


def parse_ollama_options(options, defaults: dict | None = None) -> RequestOptions:
    """`options` from an Ollama request over the model's Modelfile PARAMETERs (`defaults`)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ApiError(400, f"'options' must be an object, got {type(options).__name__}", param="options")
    merged = dict(defaults or {})
    merged.update({k: v for k, v in options.items() if v is not None})
    ro = RequestOptions()
    s = ro.sampling
    for key, v in merged.items():
        if key in IGNORED_KEYS:
            continue
        if key == "temperature":
            s.temperature = _num(key, v, 0, 100)
        elif key == "top_k":
            s.top_k = _int(key, v, 0)
        elif key == "top_p":
            s.top_p = _num(key, v, 0, 1)
        elif key == "min_p":
            s.min_p = _num(key, v, 0, 1)
        elif key == "typical_p":
            s.typical_p = _num(key, v, 0, 1)
        elif key == "repeat_penalty":
            s.repeat_penalty = _num(key, v, 0, 100)
        elif key == "repeat_last_n":
            s.repeat_last_n = _int(key, v, -1)
        elif key == "presence_penalty":
            s.presence_penalty = _num(key, v, -100, 100)
        elif key == "frequency_penalty":
            s.frequency_penalty = _num(key, v, -100, 100)
        elif key == "seed":
            seed = _int(key, v)
            s.seed = None if seed < 0 else seed & 0xFFFFFFFF   # Ollama: -1 = random
        elif key == "mirostat":
            s.mirostat = _int(key, v, 0, 2)
        elif key == "mirostat_tau":
            s.mirostat_tau = _num(key, v, 0)
        elif key == "mirostat_eta":
            s.mirostat_eta = _num(key, v, 0)
        elif key == "num_predict":
            n = _int(key, v, -2)
            ro.num_predict = -1 if n < 0 else n            # -2 (fill the context) behaves as -1 here
        elif key == "stop":
            ro.stop = parse_stop(key, v)
        elif key == "ignore_eos":
            ro.ignore_eos = _bool(key, v)
        elif key == "num_thread":
            n = _int(key, v, 0, 1024)
            ro.n_threads = n or None
        elif key == "num_ctx":
            ro.plan["num_ctx"] = _int(key, v, 1, 1 << 24)
        elif key == "num_batch":
            ro.plan["num_batch"] = _int(key, v, 1, 1 << 16)
        elif key == "num_gpu":
            n = _int(key, v, -1, 100000)
            ro.plan["num_gpu"] = None if n < 0 else n       # -1 = as many as fit
        elif key == "main_gpu":
            ro.plan["main_gpu"] = _int(key, v, 0, 64)
        elif key == "cpu_moe":
            ro.plan["cpu_moe"] = _int(key, v, 0, 100000)
        elif key == "tensor_split":
            if not isinstance(v, (list, tuple)) or not v:
                raise _bad(key, "must be a non-empty list of numbers")
            ro.plan["tensor_split"] = tuple(_num(key, x, 0) for x in v)
        elif key == "kv_type":
            if v not in KV_TYPES:
                raise _bad(key, f"must be one of {', '.join(KV_TYPES)}, got {v!r}")
            ro.plan["kv_type"] = v
        elif key == "flash_attn":
            ro.plan["flash_attn"] = _bool(key, v)
        # anything else: ignored like Ollama does (it only logs "invalid option")
    return ro


def plan_options(overrides: dict, *, num_ctx_default: int, num_parallel: int, n_ctx_train: int,
                 embedding: bool = False, margin_mib: int | None = None) -> PlanOptions:
    """PlanOptions for a load: request overrides over the server defaults; num_ctx clamped to the training context."""
    names = {f.name for f in fields(PlanOptions)}
    o = PlanOptions(num_ctx=num_ctx_default, num_parallel=num_parallel, embedding=embedding)
    if margin_mib is not None:               # the GPU margin setting (default: PlanOptions' own)
        o = replace(o, margin=margin_mib << 20)
    o = replace(o, **{k: v for k, v in overrides.items() if k in names})
    num_ctx = o.num_ctx
    if n_ctx_train and n_ctx_train > 0:
        num_ctx = min(num_ctx, n_ctx_train)
    num_ctx = max(num_ctx, 64)
    # llama.cpp reserves a decode step with one output per sequence: a batch smaller than num_parallel aborts the
    # load (GGML_ASSERT n_outputs_max <= cparams.n_outputs_max), so the batch is at least num_parallel
    batch = max(o.num_batch, o.num_parallel)
    return replace(o, num_ctx=num_ctx, num_batch=batch, num_ubatch=max(min(o.num_ubatch, batch), o.num_parallel))


# ---- OpenAI request parameters -------------------------------------------------------------------------------

def parse_openai_sampling(body: dict, defaults: dict | None = None) -> RequestOptions:
    """OpenAI's top-level sampling fields, over the model's Modelfile defaults."""
    ro = parse_ollama_options({}, defaults)
    s = ro.sampling
    if body.get("temperature") is not None:
        s.temperature = _num("temperature", body["temperature"], 0, 2)
    if body.get("top_p") is not None:
        s.top_p = _num("top_p", body["top_p"], 0, 1)
    if body.get("presence_penalty") is not None:
        s.presence_penalty = _num("presence_penalty", body["presence_penalty"], -2, 2)
    if body.get("frequency_penalty") is not None:
        s.frequency_penalty = _num("frequency_penalty", body["frequency_penalty"], -2, 2)
    if body.get("seed") is not None:
        s.seed = _int("seed", body["seed"]) & 0xFFFFFFFF
    for key in ("max_completion_tokens", "max_tokens"):
        if body.get(key) is not None:
            ro.num_predict = _int(key, body[key], 1)
            break
    if body.get("stop") is not None:
        ro.stop = parse_stop("stop", body["stop"])
    lb = body.get("logit_bias")
    if lb is not None:
        if not isinstance(lb, dict):
            raise _bad("logit_bias", "must be an object of token id -> bias")
        bias = {}
        for k, v in lb.items():
            try:
                tok = int(k)
            except (TypeError, ValueError):
                raise _bad("logit_bias", f"keys must be token ids, got {k!r}") from None
            bias[tok] = _num("logit_bias", v, -100, 100)
        s.logit_bias = bias
    return ro
