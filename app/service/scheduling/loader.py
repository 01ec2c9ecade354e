"""What a load asks of the rest of the program, through the injected collaborators (collaborators.py): the devices
(discovered once, again after a model on RPC workers ends), the model's record and GGUF facts, its vision projector
and draft model, its plan and context, its runner started, and the model marked loaded or failed. The ONE path that
starts a runner (`start_runner`) serves a first load and a context growth alike; the ONE plan (`plan_load`) serves a
load, a context growth and /api/layout's what-if alike, so a what-if layout is the layout a load would use. Routes
that ask about models without leasing one (find a model, read its GGUF, the devices, a what-if plan, the context
preview, a draft model's check) ask the scheduler's door (door.py), which asks the loader. Which models are loaded,
who waits for them and when one is unloaded to make room is the scheduler's (scheduler.py); this module keeps no
state but the inventory.
Covered by tests/unit/service/scheduling/test_scheduler_units.py (fakes),
tests/integration/service/test_service_scheduler.py (real runners) and test_service_api.py (/api/layout).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from app.discovery.inventory import Inventory, with_cap
from app.engine.gguf.errors import GGUFError
from app.engine.layout.types import Layout, PlanOptions
from app.engine.planner.context import ContextChoice

from ..collaborators import Collaborators
from ..config import ServiceConfig
from ..http.errors import ApiError
from ..http.events import EventBus
from ..http.metrics import Metrics
from ..generation.options import RequestOptions, parse_ollama_options
from .draft import check_draft
from .fit import free_memory, plan_options_for, remaining, with_draft, with_projector, with_projector_room
from .loaded_model import LoadedModel

log = logging.getLogger("strata.scheduler")


class Loader:
    def __init__(self, config: ServiceConfig, events: EventBus, metrics: Metrics, deps: Collaborators):
        self.config = config
        self.events = events
        self.metrics = metrics
        self.deps = deps
        self.inventory: Inventory | None = None
        self._inv_lock = asyncio.Lock()

    # ---- devices ---------------------------------------------------------------------------------------------

    async def refresh_inventory(self) -> Inventory:
        self.inventory = with_cap(await self.deps.discover(), self.config.max_memory)    # STRATA_MAX_MEMORY
        return self.inventory

    async def get_inventory(self) -> Inventory:
        async with self._inv_lock:
            if self.inventory is None:
                return await self.refresh_inventory()
            return self.inventory

    def forget_inventory(self) -> None:
        """Discover again before the next plan (a worker that died is left out, one a model held is offered)."""
        self.inventory = None

    # ---- the model -------------------------------------------------------------------------------------------

    async def resolve(self, name: str):
        """ModelRecord for a name; 404/400 ApiErrors for unknown or malformed names."""
        return await self.deps.resolve(name)

    async def model_info(self, path):
        return await self.deps.model_info(path)

    async def with_digest(self, record):
        """The record with its sha256 (for /api/ps), best effort."""
        return await self.deps.with_digest(record)

    async def read_info(self, record):
        """The record's GGUF facts for a load: a file that is not a usable GGUF is the client's 400, anything else
        (a file gone, a disk error) a 500, both naming the model and its file."""
        try:
            return await self.model_info(record.path)
        except Exception as e:  # noqa: BLE001 - GGUFError (the client's file: 400), a missing file, ...
            raise ApiError(400 if isinstance(e, GGUFError) else 500,
                           f"cannot read model {record.name!r} ({record.path}): {e}", param="model") from None

    async def read_projector(self, path):
        """A vision projector GGUF's facts (engine/gguf/projector.py; GGUFError, OSError)."""
        return await self.deps.projector_info(path)

    async def projector_info(self, model: LoadedModel):
        """The record's vision projector's facts, or None when it has none; a 500 naming it when unreadable."""
        path = getattr(model.record, "projector", None)
        if not path:
            return None
        try:
            return await self.read_projector(path)
        except Exception as e:  # noqa: BLE001 - GGUFError, a file gone: the model cannot take images
            raise ApiError(500, f"model {model.name!r}: its vision projector {path} cannot be read: {e}") from None

    async def draft_info(self, record, draft: str):
        """(record, ModelInfo) of the model `draft` as the draft model of `record` (None for ""); a 400 naming
        `draft` when it is unknown or has another vocabulary (scheduling/draft.py)."""
        if not draft:
            return None
        return await self.draft_for(record.path, record.name, draft)

    async def draft_for(self, target_path, target_name: str, draft: str):
        """(record, ModelInfo) of the model `draft` as the draft model of the GGUF `target_path` (a model being
        created need not be in the store yet); a 400 naming `draft` when it cannot draft for it."""
        return await check_draft(self.resolve, self.model_info, self.deps.vocab_mismatch, target_path, target_name,
                                 draft)

    def new_model(self, record, info, ro: RequestOptions, num_parallel: int | None = None) -> LoadedModel:
        """The state of a load of `record` with the request options `ro` (its PlanOptions, its asked num_ctx),
        before anything is planned: a load's, and /api/layout's what-if (`num_parallel`: another slot count)."""
        model = LoadedModel(record.name, record, info, plan_options_for(self.config, info, ro,
                                                                        num_parallel=num_parallel))
        model.asked_ctx = ro.plan.get("num_ctx")
        return model

    async def read_companions(self, model: LoadedModel) -> None:
        """`model`'s vision projector and draft model facts (None when it has none), which its plan includes."""
        model.projector = await self.projector_info(model)
        model.draft = await self.draft_info(model.record, model.options.draft)

    # ---- planning --------------------------------------------------------------------------------------------

    async def plan_load(self, model: LoadedModel, options: PlanOptions, asked: int | None, inventory: Inventory,
                        used: dict[str, int]) -> tuple[PlanOptions, Layout]:
        """THE plan of a load, a context growth and /api/layout alike: `model` (its companions read) with `options`
        and the `asked` num_ctx (None: the default from memory) on `inventory` less `used` (the other models'
        bytes, room kept for the projector where mtmd puts it, the RPC workers they hold left out): the context
        chosen, the measured layout, the draft model and the projector planned, the record's LoRA adapters (applied
        by the runner after the load, not planned: small). Whether it fits is the layout's `fits`."""
        room = free_memory(inventory, with_projector_room(used, inventory, model))
        options, layout = await self.plan_context(model.info, options, room, asked)
        layout = replace(with_draft(model, layout), lora_adapters=tuple(getattr(model.record, "adapters", ()) or ()))
        return options, with_projector(model, layout)


    async def plan(self, info, options: PlanOptions, inventory: Inventory) -> Layout:
        """The planner's layout (measured by a dry run where it can be)."""
        try:
            return await self.deps.plan(info, options, inventory)
        except ValueError as e:     # options the planner refuses (tensor_split length, main_gpu, ...)
            raise ApiError(400, f"cannot plan this load: {e}", param="options") from None

    async def choose_context(self, info, inventory: Inventory, options: PlanOptions, asked: int | None,
                             compute: dict[str, int] | None = None) -> ContextChoice:
        """The context a load with `options` gets on `inventory` and why (a pure estimate, run in a thread)."""
        return await asyncio.to_thread(self.deps.choose_context, info, inventory, options, self.config.num_ctx,
                                       asked, compute)

    async def plan_context(self, info, options: PlanOptions, inventory: Inventory, asked: int | None
                           ) -> tuple[PlanOptions, Layout]:
        """Options with their context chosen (`asked`: the request's or Modelfile's num_ctx, None for the default
        from memory) and their measured layout, which records the choice (Layout.context). A measured plan that
        does not fit at a default context chooses again with the compute buffers the dry run measured."""
        compute = None
        for _ in range(3):
            try:
                choice = await self.choose_context(info, inventory, options, asked, compute)
            except ValueError as e:
                raise ApiError(400, f"cannot plan this load: {e}", param="options") from None
            options = replace(options, num_ctx=choice.num_ctx)
            layout = await self.plan(info, options, inventory)
            if layout.fits or asked is not None:
                break
            measured = {d.device_id: d.compute for d in layout.devices}
            if measured == compute:
                break
            compute = measured
        return options, replace(layout, context=choice.to_dict())

    async def context_preview(self, record, info, loaded: LoadedModel | None, used: dict[str, int]) -> dict:
        """How `record`'s context is chosen: the `loaded` model's (its layout's record), else the one a load would
        choose now (an estimated plan on the devices less `used`, the other models' bytes), with `loaded` saying
        which: for /api/show and the model listings."""
        if loaded is not None and loaded.layout is not None and loaded.layout.context:
            return {**loaded.layout.context, "loaded": True}
        model = self.new_model(record, info, parse_ollama_options({}, getattr(record, "parameters", None)))
        free = remaining(await self.get_inventory(), used)
        try:
            choice = await self.choose_context(info, free, model.options, model.asked_ctx)
        except ValueError as e:
            return {"error": str(e), "loaded": False}
        return {**choice.to_dict(), "loaded": False}

    async def first_fit(self, model: LoadedModel, sizes: list[int], inventory: Inventory, used: dict[str, int]
                        ) -> tuple[PlanOptions, Layout] | None:
        """`model`'s options and layout (plan_load) at the first of the contexts `sizes` whose plan fits
        `inventory` less `used`; None when none does."""
        for n in sizes:
            options, layout = await self.plan_load(model, replace(model.options, num_ctx=n), n, inventory, used)
            if layout.fits:
                return options, layout
        return None

    # ---- the runner ------------------------------------------------------------------------------------------

    async def start_runner(self, model: LoadedModel):
        """Start a runner for `model.layout` and wait for its load (STRATA_LOAD_TIMEOUT): the one way a runner
        starts. The runner is `model.client` before it starts, so an unload during the load can close it; the
        load's progress is published as it comes. Returns what the runner reported (its `actual` bytes)."""
        layout = model.layout
        assert layout is not None                   # planned before the runner starts
        loop = asyncio.get_running_loop()
        self.events.publish("load_started", {"model": model.name, "layout": layout.to_dict()})
        model.client = self.deps.new_runner(layout, model.name)

        def on_progress(p: float) -> None:
            loop.call_soon_threadsafe(self._progress, model, float(p))

        return await asyncio.wait_for(model.client.start(on_progress), self.config.load_timeout_s)

    async def mark_loaded(self, model: LoadedModel, loaded) -> None:
        """`model` is loaded: what its runner reported, its record's digest, counted and published."""
        model.actual = dict(getattr(loaded, "actual", {}) or {})
        model.record = await self.with_digest(model.record)
        model.load_seconds = time.monotonic() - model.load_started
        model.state = "loaded"
        model.progress = 1.0
        assert model.layout is not None                 # planned before its runner started
        self.metrics.loads[(model.name, "ok")] += 1
        self.events.publish("loaded", {"model": model.name, "layout": model.layout.to_dict(),
                                       "actual": model.actual, "load_seconds": model.load_seconds})

    async def mark_failed(self, model: LoadedModel, e: BaseException) -> ApiError:
        """`model`'s load failed with `e`: "failed" with the reason, counted and published, its runner closed;
        returns the error its waiting requests get."""
        name = model.name
        msg = e.message if isinstance(e, ApiError) else (str(e) or type(e).__name__)
        if isinstance(e, asyncio.TimeoutError):
            msg = f"loading took longer than {self.config.load_timeout_s:.0f} s"
        log.warning("load of %s failed: %s", name, msg)
        model.state, model.error = "failed", msg
        self.metrics.loads[(name, "failed")] += 1
        self.events.publish("load_failed", {"model": name, "error": msg})
        if model.client is not None:
            try:
                await model.client.close()
            except Exception:  # noqa: BLE001 - the runner is gone either way
                pass
        return e if isinstance(e, ApiError) else ApiError(500, f"failed to load model {name!r}: {msg}",
                                                          code="load_failed")

    def _progress(self, model: LoadedModel, p: float) -> None:
        if model.state != "loading":
            return
        model.progress = max(model.progress, min(1.0, p))
        self.events.publish("load_progress", {"model": model.name, "progress": round(model.progress, 4)})
