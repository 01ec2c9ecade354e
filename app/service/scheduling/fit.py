"""What fits where, as the scheduler decides it: pure functions of the loaded models, the inventory and the
layouts the planner returned (no I/O, no await, no scheduler state), so each rule is tested alone.

- Memory in use: the loaded models' predicted bytes plus what their prompt caches hold (`used_bytes`), taken off
  the inventory with the RPC workers other models hold left out (`free_memory`), and room kept for a vision
  projector where mtmd puts it (`with_projector_room`).
- A model's plan completed with its draft model and projector (`with_draft`, `with_projector`).
- Eviction: the least recently used idle model goes first, a pinned one never (`eviction_victim`); what cannot fit
  is a 507 naming the size, a 503 when max_loaded_models busy models are in the way (`no_room`), or a 503 naming
  the pinned models whose memory it needs (`pinned_in_the_way`).
- Context growth (docs/architecture.md, "Context"): how far a model may grow (`growth_ceiling`) and the sizes to
  try, largest first (`growth_sizes`).
Covered by tests/unit/service/scheduling/test_fit.py and test_scheduler_units.py.
"""
from __future__ import annotations

from typing import Iterable

from app.discovery.inventory import Inventory, subtract
from app.discovery.remote import reserve_workers
from app.engine.layout.types import Layout, PlanOptions
from app.engine.planner.context import CTX_STEP, LIMIT_REQUEST
from app.engine.planner.draft import with_draft as plan_with_draft
from app.engine.planner.options import plan_options
from app.engine.planner.projector import projector_bytes, projector_device, with_projector as plan_with_projector
from app.ggml import rpc

from ..config import ServiceConfig
from ..generation.options import RequestOptions
from ..http.errors import ApiError
from .loaded_model import LoadedModel


def plan_options_for(config: ServiceConfig, info, ro: RequestOptions, embedding: bool = False,
                     num_parallel: int | None = None) -> PlanOptions:
    """A load's PlanOptions: the request's load options over the server's settings, clamped by the planner
    (`num_parallel`: another slot count than STRATA_NUM_PARALLEL, for a what-if plan)."""
    overrides = {**config.plan_defaults(), **ro.plan, "n_threads": ro.n_threads or config.n_threads}
    return plan_options(overrides, num_ctx_default=config.num_ctx, num_parallel=num_parallel or config.num_parallel,
                        n_ctx_train=getattr(info, "context_length", 0), embedding=embedding,
                        margin_mib=config.gpu_margin_mib)


def used_bytes(models: Iterable[LoadedModel], exclude: str | None = None) -> dict[str, int]:
    """Bytes per device the loaded models hold (all but `exclude`): their plans, and on the host what their prompt
    caches hold now (bounded by each cache's limit)."""
    used: dict[str, int] = {}
    for m in models:
        if m.name == exclude:
            continue
        for dev, b in m.predicted.items():
            used[dev] = used.get(dev, 0) + b
        cache = m.prompt_cache()["bytes"]
        if cache:
            used["CPU"] = used.get("CPU", 0) + cache
    return used


def remaining(inventory: Inventory, used: dict[str, int]) -> Inventory:
    """`inventory` less what the loaded models use (as /api/ps, the memory view and /api/show's preview see it)."""
    return subtract(inventory, used)


def free_memory(inventory: Inventory, used: dict[str, int]) -> Inventory:
    """What is left to plan a load on: `inventory` less `used`, without the RPC workers a loaded model holds (a
    worker serves one runner at a time)."""
    return reserve_workers(subtract(inventory, used), used)


def with_projector_room(used: dict[str, int], inventory: Inventory, model: LoadedModel) -> dict[str, int]:
    """`used` with room for `model`'s vision projector on the device mtmd puts it on (none without one)."""
    if model.projector is None:
        return used
    dev = projector_device([g.id for g in inventory.gpus])
    return {**used, dev: used.get(dev, 0) + projector_bytes(model.projector, model.info.n_embd)}


def with_draft(model: LoadedModel, layout: Layout) -> Layout:
    """`layout` with the draft model's weights, KV and compute planned (planner/draft.py), when it has one: planned
    before the load, since llama.cpp's own fit would not count it."""
    d = model.draft
    return plan_with_draft(layout, d[1], d[0].name) if d is not None else layout


def with_projector(model: LoadedModel, layout: Layout) -> Layout:
    """`layout` with the vision projector's weights and image compute (planner/projector.py), when it has one."""
    p = model.projector
    return plan_with_projector(layout, p, model.info.n_embd) if p is not None else layout


def on_rpc_workers(layout: Layout | None) -> bool:
    """Whether a layout uses RPC workers' devices (then the devices are discovered again after it ends)."""
    return layout is not None and bool(rpc.endpoints_of(layout.gpu_devices))


def eviction_victim(others: Iterable[LoadedModel], pinned=lambda name: False) -> LoadedModel | None:
    """The idle model to unload first (least recently used), never a pinned one (`pinned(name)`); None when every
    one has requests or is pinned."""
    idle = sorted((m for m in others if m.pending == 0 and not pinned(m.name)), key=lambda m: m.last_used)
    return idle[0] if idle else None


def pinned_in_the_way(model: LoadedModel, pinned: list[LoadedModel]) -> ApiError:
    """A load that needs the memory (or the place, under max_loaded_models) pinned models hold: a 503 naming them
    and what would free it; pins are never evicted, so waiting would not help."""
    names = ", ".join(sorted(m.name for m in pinned))
    return ApiError(503, f"model {model.name!r} cannot be loaded: it needs the memory held by pinned "
                         f"model{'s' if len(pinned) > 1 else ''} {names}, which stay loaded until unpinned "
                         f"(strata pin --off NAME, or unload one with strata stop NAME)", code="pinned_models")


def no_room(model: LoadedModel, layout: Layout | None, n_others: int, max_loaded_models: int) -> ApiError:
    """Why `model` cannot be loaded: too many busy models (503, `layout` None: not planned), or it does not fit
    even alone (507, with its size and the planner's suggestions)."""
    if layout is None:
        return ApiError(503, f"{n_others} models are loaded and busy (max_loaded_models="
                             f"{max_loaded_models}); try again later")
    need = sum(d.total for d in layout.devices)
    hint = ("; " + "; ".join(layout.suggestions)) if layout.suggestions else ""
    return ApiError(507, f"model {model.name!r} does not fit in memory (needs about {need / 2**20:.0f} MiB "
                         f"with num_ctx={model.options.num_ctx}, num_parallel={model.options.num_parallel})"
                         f"{hint}", code="insufficient_memory")


def _round_up(n: int) -> int:
    return -(-n // CTX_STEP) * CTX_STEP


def growth_ceiling(model: LoadedModel) -> int:
    """The largest context per sequence `model` may grow to: its training context, below the smallest larger
    one that did not fit the free memory (0: cannot grow)."""
    top = getattr(model.info, "context_length", 0) or 0
    if model.growth_refused:
        top = min(top, model.growth_refused - CTX_STEP)
    return top if top > model.options.num_ctx else 0


def growth_sizes(cur: int, ceiling: int, needed: int, at_least: int) -> tuple[int, list[int]] | None:
    """The context a request that needs `needed` tokens wants (rounded up, capped at `ceiling`) and the sizes to
    try for it, largest first: twice the present `cur` when that is more (a growing conversation does not reload
    every turn), the wanted one, and the smallest that holds `at_least` tokens. None when nothing beyond `cur`
    holds `at_least`."""
    want = min(ceiling, _round_up(needed))
    if want <= cur or at_least > want:
        return None
    least = _round_up(max(at_least, 1))
    sizes = {min(ceiling, max(want, 2 * cur)), want} | ({least} if cur < least < want else set())
    return want, sorted(sizes, reverse=True)


def grown_context(num_ctx: int, cur: int, needed: int) -> dict:
    """The Layout.context record of a context grown for a request (planner.context.ContextChoice's shape)."""
    return {"num_ctx": num_ctx, "limit": LIMIT_REQUEST,
            "reason": f"num_ctx {num_ctx}: grown from {cur} for a request that needs {needed} tokens"}
