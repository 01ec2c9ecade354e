"""Request options -> what the engine takes: load-time `PlanOptions` fields and per-request `SamplingParams`.

Ollama's `options` mix both kinds (num_ctx and num_gpu change how the model is loaded; temperature and stop
change one request). Model defaults from a Modelfile's PARAMETER lines sit under the request's own options.
Unknown keys are ignored, as Ollama does; a known key with a wrong type or an out-of-range value is a 400.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from app.engine.planner.options import KV_TYPES, plan_options  # noqa: F401  (plan_options: re-exported for the service)
from app.engine.protocol import SamplingParams

from ..http.errors import ApiError
from .request import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

# Accepted and ignored: they have no meaning here (mmap, NUMA, ...) or are deprecated in Ollama.
IGNORED_KEYS = ("numa", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mlock", "embedding_only", "num_keep",
                "tfs_z", "penalize_newline")


@dataclass
class RequestOptions:
    plan: dict = field(default_factory=dict)         # PlanOptions fields set explicitly (load-time)
    n_threads: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    num_predict: int = -1
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    think_budget: int | None = None                  # thinking tokens at most (-1: no cap); None: not set
    answer_after_tools: bool = True                  # a reply that only repeats the last round's calls is
                                                     # written again as an answer (repeat_guard.py)
    stop_repeated_calls: bool = True                 # a reply ends at a call it already made (call_repeats.py)
    # where each sampling option set came from: "request", "modelfile" (a PARAMETER) or "gguf" (the publisher's
    # general.sampling.*); an option in none of them has the engine's default (SamplingParams)
    sources: dict[str, str] = field(default_factory=dict)


def _bad(key: str, msg: str) -> ApiError:
    return ApiError(400, f"option {key!r} {msg}", param=key)


def check_number(key: str, v, lo: float | None = None, hi: float | None = None) -> float:
    """A finite number within [lo, hi]; else a 400 naming the option."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise _bad(key, f"must be a number, got {v!r}")
    if lo is not None and v < lo:
        raise _bad(key, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise _bad(key, f"must be <= {hi}, got {v}")
    return float(v)


def check_int(key: str, v, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
    """An integer (2.0 counts, 2.5 does not) within [lo, hi], int32 unless said otherwise; else a 400."""
    given = v
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(key, f"must be an integer, got {v!r}")
    if v < lo:
        raise _bad(key, f"must be >= {lo}, got {given}")
    if v > hi:
        raise _bad(key, f"must be <= {hi}, got {given}")
    return v


def check_bool(key: str, v) -> bool:
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


def _number(lo: float | None = None, hi: float | None = None):
    return lambda key, v: check_number(key, v, lo, hi)


def _integer(lo: int = INT32_MIN, hi: int = INT32_MAX):
    return lambda key, v: check_int(key, v, lo, hi)


def _seed(key: str, v) -> int | None:
    seed = check_int(key, v, INT64_MIN, INT64_MAX)      # Go's int: Ollama takes any 64-bit seed
    return None if seed < 0 else seed & 0xFFFFFFFF      # Ollama: -1 = random; llama.cpp's seed is 32 bits


def _num_gpu(key: str, v) -> int | None:
    n = check_int(key, v, -1, 100000)
    return None if n < 0 else n                         # -1 = as many as fit


def _tensor_split(key: str, v) -> tuple[float, ...]:
    if not isinstance(v, (list, tuple)) or not v:
        raise _bad(key, "must be a non-empty list of numbers")
    return tuple(check_number(key, x, 0) for x in v)


def _kv_type(key: str, v) -> str:
    if v not in KV_TYPES:
        raise _bad(key, f"must be one of {', '.join(KV_TYPES)}, got {v!r}")
    return v


# option name (= SamplingParams field) -> its check
SAMPLING_OPTIONS = {
    "temperature": _number(0, 100), "top_k": _integer(0), "top_p": _number(0, 1), "min_p": _number(0, 1),
    "typical_p": _number(0, 1), "repeat_penalty": _number(0, 100), "repeat_last_n": _integer(-1),
    "presence_penalty": _number(-100, 100), "frequency_penalty": _number(-100, 100), "seed": _seed,
    "mirostat": _integer(0, 2), "mirostat_tau": _number(0), "mirostat_eta": _number(0),
}
def _model_name(key: str, v) -> str:
    if not isinstance(v, str) or len(v) > 512:
        raise _bad(key, f"must be a model name, got {v!r}")
    return v.strip()


# option name (= PlanOptions field) -> its check. These change how the model is loaded (another runner).
LOAD_OPTIONS = {
    "num_ctx": _integer(1, 1 << 24), "num_batch": _integer(1, 1 << 16), "num_gpu": _num_gpu,
    "main_gpu": _integer(0, 64), "cpu_moe": _integer(0, 100000), "tensor_split": _tensor_split,
    "kv_type": _kv_type, "flash_attn": check_bool,
    "use_mmap": check_bool,         # map the weights' file (true) or read it into memory (false); unset: the planner
    "draft": _model_name,           # speculative decoding's draft model (scheduling/draft.py checks it at load)
    "draft_max": _integer(1, 64), "draft_p_min": _number(0, 1),
    "cache_reuse": _integer(0, 1 << 20),   # cache reuse's minimum chunk (llama-server's --cache-reuse); 0 = off
}


def parse_ollama_options(options, defaults: dict | None = None, publisher=()) -> RequestOptions:
    """`options` from an Ollama request over the model's Modelfile PARAMETERs (`defaults`) over the publisher's
    sampling defaults in the GGUF (`publisher`: (option, value) pairs, ModelInfo.sampling; a value out of range
    there is left out, never the request's 400)."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ApiError(400, f"'options' must be an object, got {type(options).__name__}", param="options")
    merged = dict(defaults or {})
    merged.update({k: v for k, v in options.items() if v is not None})
    ro = RequestOptions()
    for key, v in publisher or ():
        if key in SAMPLING_OPTIONS and key not in merged:
            try:
                setattr(ro.sampling, key, SAMPLING_OPTIONS[key](key, v))
                ro.sources[key] = "gguf"
            except ApiError:
                continue
    for key in merged:
        if key in SAMPLING_OPTIONS:
            ro.sources[key] = "request" if options.get(key) is not None else "modelfile"
    for key, v in merged.items():
        if key in IGNORED_KEYS:
            continue
        if key in SAMPLING_OPTIONS:
            setattr(ro.sampling, key, SAMPLING_OPTIONS[key](key, v))
        elif key in LOAD_OPTIONS:
            ro.plan[key] = LOAD_OPTIONS[key](key, v)
        elif key == "num_predict":
            n = check_int(key, v, -2)
            ro.num_predict = -1 if n < 0 else n            # -2 (fill the context) behaves as -1 here
        elif key == "stop":
            ro.stop = parse_stop(key, v)
        elif key == "ignore_eos":
            ro.ignore_eos = check_bool(key, v)
        elif key == "answer_after_tools":
            ro.answer_after_tools = check_bool(key, v)
        elif key == "stop_repeated_calls":
            ro.stop_repeated_calls = check_bool(key, v)
        elif key == "think_budget":
            ro.think_budget = check_int(key, v, -1)       # -1: no cap (over a Modelfile's), 0: no thinking at all
        elif key == "num_thread":
            ro.n_threads = check_int(key, v, 0, 1024) or None
        # anything else: ignored like Ollama does (it only logs "invalid option")
    return ro


def sampling_view(parameters: dict | None, publisher=()) -> dict:
    """What a request that sets nothing is sampled with, and where each value comes from ("modelfile", "gguf": the
    publisher's general.sampling.*, or "default": the engine's): /api/show's `strata.sampling`, `strata show`, the
    model manager. {"temperature": {"value": 0.6, "source": "gguf"}, ...}"""
    try:
        ro = parse_ollama_options({}, parameters, publisher)
    except ApiError:                  # a stored PARAMETER out of range: its requests say so; here, the defaults
        ro = parse_ollama_options({}, None, publisher)
    return {k: {"value": getattr(ro.sampling, k), "source": ro.sources.get(k, "default")}
            for k in SAMPLING_OPTIONS if k != "seed"}
