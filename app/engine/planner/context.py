"""The context per sequence a load gets, and why: the request's or Modelfile's num_ctx (clamped to the model's
training context), or by default the largest one the free memory holds (docs/architecture.md, "Context").
The service's scheduler asks this through its collaborators (`choose_context`); `ContextChoice` rides on the
load's Layout (`Layout.context`) to /api/ps, /api/show and the memory view.
Covered by tests/unit/engine/planner/test_context_default.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from app.discovery.inventory import Inventory
from app.engine.gguf.model_info import ModelInfo
from app.engine.layout.types import Layout, PlanOptions
from app.engine.planner.placement import place
from app.engine.planner.validate import validate

MIN_CTX = 64          # below this a chat template alone does not fit
CTX_STEP = 256        # llama.cpp pads n_ctx to 256: a default context is a multiple of it
FLOOR_CTX = 2048      # the default context never goes below this (or the model's training context) for memory:
                      # where even this does not fit, the load's own 507 and suggestions say what would
# what decided a load's context per sequence (ContextChoice.limit)
LIMIT_TRAINING, LIMIT_MEMORY, LIMIT_SETTING, LIMIT_REQUEST = "training context", "memory", "setting", "request"


@dataclass(frozen=True)
class ContextChoice:
    """A load's context per sequence and why: `limit` is what decided it (one of the LIMIT_* names)."""
    num_ctx: int
    limit: str
    reason: str

    def to_dict(self) -> dict:
        return {"num_ctx": self.num_ctx, "limit": self.limit, "reason": self.reason}


def _gpu_bytes(layout: Layout) -> int:
    return sum(d.weights_total for d in layout.devices if d.device_id != "CPU")


def default_context(info: ModelInfo, inventory: Inventory, options: PlanOptions, ceiling: int,
                    compute: dict[str, int] | None = None) -> ContextChoice:
    """The default context per sequence when neither the request nor the Modelfile sets num_ctx: the largest
    multiple of 256 up to the model's training context and `ceiling` (the STRATA_NUM_CTX setting) whose plan fits
    `inventory` (what other models leave free) with `options`' parallelism, KV type and margins, and keeps on the
    GPUs every weight the smallest context keeps there (context never pushes layers off a GPU).
    Estimated plans (~1-2 ms each, a binary search); `compute`: measured compute buffers to plan with instead
    (a measurement at a larger context is an upper bound). docs/architecture.md, "Context"."""
    train = info.context_length if info.context_length and info.context_length > 0 else 0
    top = max(MIN_CTX, min(ceiling, train) if train else ceiling)
    top_limit = LIMIT_TRAINING if train and train <= ceiling else LIMIT_SETTING
    floor = min(top, FLOOR_CTX)

    def layout(n: int) -> Layout:
        o = replace(options, num_ctx=n)
        validate(info, inventory, o)
        return place(info, inventory, o, compute)

    seqs = f"{options.num_parallel} sequence{'s' if options.num_parallel != 1 else ''}"
    base = layout(floor)
    if not base.fits:
        return ContextChoice(floor, LIMIT_MEMORY, f"num_ctx {floor}: the smallest default; even this does not fit "
                                                  f"the free memory with {seqs}")
    keep = _gpu_bytes(base)

    def ok(n: int) -> bool:
        lay = layout(n)
        return lay.fits and _gpu_bytes(lay) >= keep

    if ok(top):
        why = (f"the model's training context" if top_limit == LIMIT_TRAINING
               else f"the STRATA_NUM_CTX bound (the model was trained for {train or 'an unknown length'})")
        return ContextChoice(top, top_limit, f"num_ctx {top}: {why}; fits the free memory with {seqs}")
    lo, hi = floor // CTX_STEP, (top - 1) // CTX_STEP          # ok(lo * STEP) holds (or lo*STEP == floor < STEP)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid * CTX_STEP):
            lo = mid
        else:
            hi = mid - 1
    n = max(floor, lo * CTX_STEP)
    return ContextChoice(n, LIMIT_MEMORY, f"num_ctx {n}: the largest context the free memory holds with {seqs} "
                                          f"(asked up to {top}; more would not fit or would move weights off a GPU)")


def context_for(info: ModelInfo, inventory: Inventory, options: PlanOptions, ceiling: int, asked: int | None,
                compute: dict[str, int] | None = None) -> ContextChoice:
    """The context of a load and why. `asked`: the num_ctx the request or Modelfile set (`options.num_ctx` is it,
    clamped by `plan_options`), None for the default from memory (`default_context`)."""
    if asked is None:
        return default_context(info, inventory, options, ceiling, compute)
    n = options.num_ctx
    if n < asked:
        return ContextChoice(n, LIMIT_TRAINING, f"num_ctx {n}: {asked} was asked for, clamped to the model's "
                                                f"training context")
    return ContextChoice(n, LIMIT_REQUEST, f"num_ctx {n}: set by the request or the Modelfile")
