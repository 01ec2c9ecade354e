"""One model as the scheduler keeps it: its plan, its runner, its slots and queue, its keep-alive timer.
Plain state; the Scheduler changes it (from the event loop thread only)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime

from app.engine.client import RunnerClient
from app.engine.gguf.projector import ProjectorInfo
from app.engine.planner.compare import predicted_of
from app.engine.layout.types import Layout, PlanOptions

from .fair_slots import FairSlots


@dataclass
class Lease:
    """A request's hold on a loaded model and one of its slots (Scheduler.lease)."""
    model: "LoadedModel"
    load_wait: float          # seconds this request waited for the model to load
    queue_wait: float         # seconds it waited for a slot

    @property
    def client(self) -> RunnerClient:
        """The model's runner: set before a lease is granted (a load starts it first) and while it is held (only
        the holder's own growth replaces it, and a failed growth ends the request)."""
        client = self.model.client
        assert client is not None, f"model {self.model.name!r} has no runner"
        return client


@dataclass(frozen=True)
class ModelSettings:
    """What a user set for one model (the store's model_settings table; `strata pin`, POST /api/pin, the model
    manager): a pin keeps it loaded and never evicted for another model; `keep_alive` its default (a duration as
    keep_alive takes it; None: the server's)."""
    pinned: bool = False
    keep_alive: str | None = None

    def to_dict(self) -> dict:
        return {"pinned": self.pinned, "keep_alive": self.keep_alive}


class LoadedModel:
    def __init__(self, name: str, record, info, options: PlanOptions):
        self.name = name
        self.record = record
        self.info = info
        self.options = options
        self.layout: Layout | None = None
        self.client: RunnerClient | None = None      # the runner (or a test's fake of the same shape)
        self.state = "loading"           # "loading" | "loaded" | "failed"
        self.progress = 0.0
        self.error: str | None = None
        self.actual: dict = {}
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.slots = FairSlots(options.num_parallel)     # handed out watched first, round-robin across clients
        self.slots_total = options.num_parallel
        self.slots_busy = 0
        self.queued = 0              # admitted, waiting for a slot (or for the load)
        self.pending = 0             # admitted and not yet finished (queued + busy)
        self.last_used = time.monotonic()
        self.keep_alive: float | None = 300.0
        self.expires_at: datetime | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.load_started = time.monotonic()
        self.load_seconds = 0.0
        self.closing = False
        self.unload_requested = False    # keep_alive 0 on an empty request while busy: unload when idle
        self.pinned = False              # never expires, never evicted for another model (Scheduler.settings)
        self.asked_ctx: int | None = None    # num_ctx the request / Modelfile set; None: chosen from memory
        self.growth_refused = 0          # the smallest larger context that did not fit the free memory (0: none)
        self.runner_ended: str | None = None     # why its runner process ended (then its queue moves on)
        self.projector: ProjectorInfo | None = None  # of its vision projector, when it has one
        self.draft = None                # (record, ModelInfo) of its draft model (the `draft` option), or None

    def begin_reload(self, options: PlanOptions, layout: Layout) -> RunnerClient | None:
        """Back to "loading" with new options and layout (a larger context): the same object, so leases on it stay
        valid, with a fresh `ready` for newcomers to wait on. Returns the old runner, detached first so that its
        exit is not taken for a crash; the caller closes it."""
        old, self.client = self.client, None
        self.state, self.progress, self.ready = "loading", 0.0, asyncio.get_running_loop().create_future()
        self.load_started = time.monotonic()
        self.options, self.layout, self.asked_ctx = options, layout, None
        return old

    @property
    def predicted(self) -> dict[str, int]:
        if self.layout is None:
            return {}
        return {d.device_id: d.total for d in self.layout.devices if d.total}

    @property
    def predicted_kinds(self) -> dict[str, dict[str, int]]:
        """Per device, what llama.cpp's buffer lines will say, in the same kinds as `actual` (model, repack, kv,
        compute, output): "model" includes the mapped file pages beyond what the CPU reads (DevicePlan.mapped,
        reclaimable page cache) because llama.cpp counts them in CPU_Mapped; "output" is the buffer at load, without
        its planned growth on an embedding request (DevicePlan.output_reserve). `predicted` (totals without those
        pages, with that growth) stays what the memory accounting and the metrics use."""
        return predicted_of(self.layout) if self.layout is not None else {}

    @property
    def size(self) -> int:
        return sum(self.predicted.values())

    @property
    def size_vram(self) -> int:
        return sum(b for dev, b in self.predicted.items() if dev != "CPU")

    def strata_info(self) -> dict:
        loaded = getattr(self.client, "loaded", None)      # the runner's report of its load (None before)
        return {
            "state": self.state,
            "progress": round(self.progress, 4),
            "layout": self.layout.to_dict() if self.layout else None,
            "predicted": self.predicted,
            "predicted_kinds": self.predicted_kinds,
            "actual": self.actual,
            "error": self.error,
            "slots_busy": self.slots_busy,
            "slots_total": self.slots_total,
            "queued": max(0, self.queued),
            # the requests waiting for a slot, in the order they will get one (fair_slots.py)
            "waiting": [{"client": c, "watched": p > 0} for c, p in self.slots.order()],
            "keep_alive": self.keep_alive,
            "pinned": self.pinned,
            "pid": getattr(self.client, "pid", None),
            "prompt_cache": self.prompt_cache(),
            "context": dict(self.layout.context) if self.layout else {},
            # why the layout's vision projector was not loaded (a llama.cpp build without libmtmd); "" otherwise
            "vision_missing": getattr(loaded, "vision_missing", "") or "",
            # bytes of the runner's memory in 2 MiB pages after its load (a plan that reads its weights: Layout.load_mode)
            "huge_pages": getattr(loaded, "huge_pages", 0) or 0,
            # speculative decoding's draft model: its name and planned bytes (in `predicted` as the kind "draft")
            "draft": ({"model": self.layout.draft.name, "device": self.layout.draft.device_id,
                       "weights": self.layout.draft.weights, "kv": self.layout.draft.kv,
                       "compute": self.layout.draft.compute}
                      if self.layout is not None and self.layout.draft is not None else None),
        }

    def prompt_cache(self) -> dict:
        """The runner's host-RAM prompt cache: its own memory kind, on the host (CPU), apart from `predicted`;
        and its context checkpoints (recurrent, hybrid and sliding-window models): held now, planned for
        (`checkpoint_limit`, in the CPU plan's total), and how often a prompt continued from one or found none;
        `disk`: the prompt cache on disk (files this model can load, the folder's bound, restores since load)."""
        c = self.client
        cps = getattr(c, "checkpoints", None)
        disk = getattr(c, "disk_cache", None)
        cpu = next((d for d in self.layout.devices if d.device_id == "CPU"), None) if self.layout else None
        return {"bytes": getattr(c, "prompt_cache_used", 0), "limit": getattr(c, "prompt_cache_bytes", 0),
                "entries": getattr(c, "prompt_cache_entries", 0),
                "checkpoint_bytes": getattr(cps, "checkpoint_bytes", 0), "checkpoints": getattr(cps, "checkpoints", 0),
                "checkpoint_limit": getattr(cpu, "checkpoints", 0),
                "checkpoint_hits": getattr(cps, "checkpoint_hits", 0),
                "checkpoint_misses": getattr(cps, "checkpoint_misses", 0),
                "disk": {"bytes": getattr(disk, "bytes", 0), "entries": getattr(disk, "entries", 0),
                         "limit": getattr(disk, "limit", 0), "hits": getattr(disk, "hits", 0),
                         "hit_tokens": getattr(disk, "hit_tokens", 0),
                         "restore_seconds": round(getattr(disk, "restore_s", 0.0), 3),
                         "writes": getattr(disk, "writes", 0), "refused": getattr(disk, "refused", 0)}}
