"""Prometheus text exposition (format 0.0.4) without a client library: a few counters and gauges kept in plain
dicts on the loop thread, rendered on demand. Gauges about models and devices are read live from the scheduler."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from app.discovery.inventory import Inventory


class ModelGauges(Protocol):
    """What the metrics and the Server window's stats (request_log.server_stats) read of a loaded model
    (scheduling/loaded_model.LoadedModel)."""
    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...                 # "loading" | "loaded" | "failed"
    @property
    def slots_busy(self) -> int: ...
    @property
    def slots_total(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def predicted(self) -> dict[str, int]: ...  # bytes per device
    @property
    def predicted_kinds(self) -> dict[str, dict[str, int]]: ...     # per device, bytes per kind

    def prompt_cache(self) -> dict: ...


class LoadedModels(Protocol):
    """The model scheduler as the gauges see it (scheduling/door.py: ServiceHost)."""
    def snapshot(self) -> Sequence[ModelGauges]: ...


def _escape(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


class Metrics:
    def __init__(self):
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)     # (route, method, status) -> n
        self.tokens: dict[tuple[str, str], int] = defaultdict(int)            # (model, "prompt"|"completion") -> n
        self.gen_seconds: dict[str, float] = defaultdict(float)               # model -> seconds generating
        self.rejected: dict[str, int] = defaultdict(int)                      # model -> 503s for a full queue
        self.loads: dict[tuple[str, str], int] = defaultdict(int)             # (model, "ok"|"failed") -> n
        self.last_tok_s: dict[str, float] = {}                                # model -> tok/s of the last request
        self.cached_tokens: dict[str, int] = defaultdict(int)                 # model -> prompt tokens from cache
        self.reused_tokens: dict[str, int] = defaultdict(int)                 # ... of them moved by cache reuse
        self.drafts: dict[tuple[str, str], int] = defaultdict(int)            # (model, "drafted"|"accepted") -> n

    def count_request(self, route: str, method: str, status: int) -> None:
        self.requests[(route, method, status)] += 1

    def count_tokens(self, model: str, prompt: int, completion: int, gen_seconds: float, cached: int = 0,
                     reused: int = 0) -> None:
        self.tokens[(model, "prompt")] += prompt
        if cached:
            self.cached_tokens[model] += cached
        if reused:
            self.reused_tokens[model] += reused
        self.tokens[(model, "completion")] += completion
        self.gen_seconds[model] += gen_seconds
        if gen_seconds > 0 and completion > 0:
            self.last_tok_s[model] = completion / gen_seconds

    def count_drafts(self, model: str, drafted: int, accepted: int) -> None:
        if drafted:
            self.drafts[(model, "drafted")] += drafted
            self.drafts[(model, "accepted")] += accepted

    def render(self, scheduler: LoadedModels | None = None, inventory: Inventory | None = None) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help: str, samples: Sequence[tuple[dict, float]]):
            out.append(f"# HELP {name} {help}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                out.append(f"{name}{_labels(labels)} {value:g}" if isinstance(value, float) else
                           f"{name}{_labels(labels)} {value}")

        family("strata_http_requests_total", "counter", "HTTP requests answered, by route and status.",
               [({"route": r, "method": m, "status": str(s)}, n) for (r, m, s), n in sorted(self.requests.items())])
        family("strata_tokens_total", "counter", "Tokens processed, by model and kind (prompt, completion).",
               [({"model": m, "kind": k}, n) for (m, k), n in sorted(self.tokens.items())])
        family("strata_generation_seconds_total", "counter", "Seconds spent generating completion tokens.",
               [({"model": m}, float(s)) for m, s in sorted(self.gen_seconds.items())])
        family("strata_tokens_per_second", "gauge", "Completion tokens per second of the last finished request.",
               [({"model": m}, float(v)) for m, v in sorted(self.last_tok_s.items())])
        family("strata_prompt_cache_hit_tokens_total", "counter",
               "Prompt tokens taken from the prompt cache instead of decoded (part of the prompt tokens).",
               [({"model": m}, n) for m, n in sorted(self.cached_tokens.items())])
        family("strata_prompt_cache_reused_tokens_total", "counter",
               "Of the prompt cache's hit tokens, those cache reuse moved to other positions (after a change in the "
               "prompt; approximate: computed next to the old text).",
               [({"model": m}, n) for m, n in sorted(self.reused_tokens.items())])
        family("strata_speculative_tokens_total", "counter",
               "Speculative decoding: tokens drafted and verified, and of those accepted, by model.",
               [({"model": m, "kind": k}, n) for (m, k), n in sorted(self.drafts.items())])
        family("strata_queue_rejected_total", "counter", "Requests refused with 503 because the model's queue was full.",
               [({"model": m}, n) for m, n in sorted(self.rejected.items())])
        family("strata_model_loads_total", "counter", "Model loads, by result.",
               [({"model": m, "result": r}, n) for (m, r), n in sorted(self.loads.items())])
        if scheduler is not None:
            models = [m for m in scheduler.snapshot() if m.state != "failed"]
            family("strata_models_loaded", "gauge", "Models loaded (or loading).", [({}, len(models))])
            family("strata_slots_busy", "gauge", "Slots generating now, per model.",
                   [({"model": m.name}, m.slots_busy) for m in models])
            family("strata_slots_total", "gauge", "Slots per model.",
                   [({"model": m.name}, m.slots_total) for m in models])
            family("strata_queue_depth", "gauge", "Requests waiting for a slot, per model.",
                   [({"model": m.name}, m.queued) for m in models])
            samples = []
            for m in models:
                for dev, b in m.predicted.items():
                    samples.append(({"model": m.name, "device": dev}, b))
            family("strata_model_memory_bytes", "gauge", "Predicted bytes per model and device.", samples)
            family("strata_prompt_cache_bytes", "gauge", "Host RAM held by each model's prompt cache.",
                   [({"model": m.name}, m.prompt_cache()["bytes"]) for m in models])
            family("strata_prompt_cache_limit_bytes", "gauge", "The bound of each model's prompt cache (0 = off).",
                   [({"model": m.name}, m.prompt_cache()["limit"]) for m in models])
            caches = [(m.name, m.prompt_cache()) for m in models]
            family("strata_ctx_checkpoint_bytes", "gauge",
                   "Host RAM held by each model's context checkpoints (recurrent, hybrid, sliding-window models).",
                   [({"model": n}, pc["checkpoint_bytes"]) for n, pc in caches])
            family("strata_ctx_checkpoint_hits_total", "counter",
                   "Prompts continued from a context checkpoint, since the model loaded.",
                   [({"model": n}, pc["checkpoint_hits"]) for n, pc in caches])
            family("strata_ctx_checkpoint_misses_total", "counter",
                   "Prompts that shared a cached prefix no state or checkpoint could continue from (processed "
                   "again from the start), since the model loaded.",
                   [({"model": n}, pc["checkpoint_misses"]) for n, pc in caches])
            family("strata_prompt_disk_cache_bytes", "gauge",
                   "Bytes of prompt-cache files on disk that each model's runner can load.",
                   [({"model": n}, pc["disk"]["bytes"]) for n, pc in caches])
            family("strata_prompt_disk_cache_limit_bytes", "gauge",
                   "The bound of the prompt cache's folder on disk, all models together (0 = off).",
                   [({"model": n}, pc["disk"]["limit"]) for n, pc in caches])
            family("strata_prompt_disk_cache_hit_tokens_total", "counter",
                   "Prompt tokens restored from the prompt cache on disk, since the model loaded.",
                   [({"model": n}, pc["disk"]["hit_tokens"]) for n, pc in caches])
        if inventory is not None:
            samples_t, samples_f = [({"device": "CPU"}, inventory.host_ram_total)], [({"device": "CPU"}, inventory.host_ram_available)]
            for d in inventory.devices:
                samples_t.append(({"device": d.id}, d.total))
                samples_f.append(({"device": d.id}, d.free))
            family("strata_device_memory_total_bytes", "gauge", "Memory per device (CPU = host RAM).", samples_t)
            family("strata_device_memory_free_bytes", "gauge", "Free memory per device when last discovered.", samples_f)
        return "\n".join(out) + "\n"
