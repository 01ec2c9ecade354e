"""The one place that turns what a user asked for into `PlanOptions`, and `PlanOptions` into a `Layout`.

Every surface (the service's load path, `strata plan`, the verify tool, the what-if API) goes through here, so
the clamps below apply everywhere and the choice between a measured and a pure plan is made once. The context a
load gets when nobody sets num_ctx is chosen in context.py.
"""
from __future__ import annotations

from dataclasses import fields, replace

from app.discovery.inventory import Inventory
from app.engine.gguf.model_info import ModelInfo
from app.engine.planner.context import MIN_CTX
from app.engine.planner.dryrun import plan_measured
from app.engine.planner.search import plan
from app.engine.layout.types import KV_TYPES, Layout, PlanOptions  # noqa: F401  (KV_TYPES: re-exported)


def plan_options(overrides: dict, *, num_ctx_default: int = 4096, num_parallel: int = 1, n_ctx_train: int = 0,
                 embedding: bool = False, margin_mib: int | None = None) -> PlanOptions:
    """PlanOptions for a load: `overrides` (PlanOptions field names, e.g. from a request's options or CLI flags)
    over the defaults; num_ctx clamped to the model's training context; batch sizes raised to what llama.cpp
    needs for the slot count. ValueError naming the option for a size that is not a positive integer."""
    names = {f.name for f in fields(PlanOptions)}
    o = PlanOptions(num_ctx=num_ctx_default, num_parallel=num_parallel, embedding=embedding)
    if margin_mib is not None:               # the GPU margin setting (default: PlanOptions' own)
        o = replace(o, margin=margin_mib << 20)
    o = replace(o, **{k: v for k, v in overrides.items() if k in names and v is not None})
    for name in ("num_ctx", "num_parallel", "num_batch", "num_ubatch"):    # nonsense is refused, not clamped
        v = getattr(o, name)
        if name == "num_batch" and v is None:       # the planner decides (placement.BATCH_ALL_GPU)
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: must be a positive integer, got {v!r}")
    num_ctx = o.num_ctx
    if n_ctx_train and n_ctx_train > 0:
        num_ctx = min(num_ctx, n_ctx_train)
    num_ctx = max(num_ctx, MIN_CTX)
    # llama.cpp reserves a decode step with one output per sequence: a batch smaller than num_parallel aborts the
    # load (GGML_ASSERT n_outputs_max <= cparams.n_outputs_max), so the batch is at least num_parallel
    if o.num_batch is None:
        return replace(o, num_ctx=num_ctx, num_ubatch=max(o.num_ubatch, o.num_parallel))
    batch = max(o.num_batch, o.num_parallel)
    return replace(o, num_ctx=num_ctx, num_batch=batch, num_ubatch=max(min(o.num_ubatch, batch), o.num_parallel))


def plan_layout(info: ModelInfo, inventory: Inventory, options: PlanOptions, *, measure: bool = True) -> Layout:
    """The layout for `options`: compute buffers measured by a no_alloc dry run in a child process (cached on
    disk; falls back to estimates with a reason if the dry run fails), or estimated when `measure` is False
    (`strata plan --no-measure`, what-if planning on simulated devices that need no measurement)."""
    if measure:
        return plan_measured(info, inventory, options)
    return plan(info, inventory, options)
