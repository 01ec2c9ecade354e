"""Model scheduler: which models are loaded, where, and who may use them. Leases, queues, LRU eviction and
keep-alive expiry only; finding models, reading GGUFs, discovering devices, planning and starting runners are
its collaborators (collaborators.py), injected, so its rules are tested with fakes in milliseconds.

- A request asks for a lease (`async with scheduler.lease(name, opts, keep_alive) as lease:`). The model is
  loaded if it is not (other requests for it wait on the same load), then the request waits for one of the
  model's `num_parallel` slots. Beyond `num_parallel + max_queue` requests per model, a 503 with Retry-After.
- Before a load, the planner lays the model out on what is left of each device after the models already
  loaded (their predicted bytes). If it does not fit, idle models are unloaded least recently used first and
  the plan is made again; a model with requests is never unloaded under them (the load waits for one to go idle).
- Context: unless the request or Modelfile sets num_ctx, a load gets the largest context per sequence the free
  memory holds, up to the model's training context and STRATA_NUM_CTX (planner.context.context_for); a request
  whose prompt outgrows it reloads the model with a larger one when that fits and nothing else runs on it
  (`grow_context`). Both are logged and published (docs/architecture.md, "Context").
- keep_alive: after a model's last request ends, it stays loaded that long (None = forever, 0 = unload now).
- A failed load answers every waiting request with the error, and shows as "failed" in /api/ps until the next try.
- The runner is a child process: if it dies (or its watchdog kills it), the model is dropped and the next request
  loads it again. Requests that were only queued for it (waiting for a slot, never sent to the runner) are not
  failed: they go back through admission and are served by the reloaded model (at most REROUTES times each).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from app.discovery.inventory import Inventory, subtract
from app.discovery.remote import reserve_workers
from app.engine.gguf.errors import GGUFError
from app.engine.gguf.projector import read_projector
from app.ggml import rpc
from app.engine.planner.context import CTX_STEP
from app.engine.planner.draft import with_draft
from app.engine.planner.projector import projector_bytes, projector_device, with_projector
from app.engine.layout.types import Layout, PlanOptions

from ..collaborators import Collaborators
from ..config import ServiceConfig
from ..generation.options import RequestOptions, parse_ollama_options, plan_options
from ..http.errors import ApiError
from ..http.events import EventBus
from ..http.metrics import Metrics
from .draft import check_draft
from ..generation.keep_alive import DEFAULT, FOREVER, Default, KeepAlive, parse_keep_alive
from .loaded_model import Lease, LoadedModel

log = logging.getLogger("strata.scheduler")

REROUTES = 3        # times one queued request follows its model to a new runner before it fails with the last error

__all__ = ["Lease", "LoadedModel", "Scheduler"]


class Scheduler:
    def __init__(self, config: ServiceConfig, events: EventBus, metrics: Metrics, deps: Collaborators):
        self.config = config
        self.events = events
        self.metrics = metrics
        self.deps = deps
        self.models: dict[str, LoadedModel] = {}
        self.failed: dict[str, LoadedModel] = {}
        self.inventory: Inventory | None = None
        self._load_lock = asyncio.Lock()
        self._inv_lock = asyncio.Lock()
        self._idle = asyncio.Condition()
        self._closed = False
        self._tasks: set[asyncio.Task] = set()     # loads and keep-alive unloads running in the background

    def _background(self, coro, name: str) -> asyncio.Task:
        """A task close() waits for: one still running when the loop stops would be destroyed half-way."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- inventory, models and planning (through the collaborators) ---------------------------------------

    async def refresh_inventory(self) -> Inventory:
        self.inventory = await self.deps.discover()
        return self.inventory

    async def get_inventory(self) -> Inventory:
        async with self._inv_lock:
            if self.inventory is None:
                return await self.refresh_inventory()
            return self.inventory

    def used_bytes(self, exclude: str | None = None) -> dict[str, int]:
        used: dict[str, int] = {}
        for m in self.models.values():
            if m.name == exclude:
                continue
            for dev, b in m.predicted.items():
                used[dev] = used.get(dev, 0) + b
            cache = m.prompt_cache()["bytes"]       # what the prompt cache holds now (bounded by its limit)
            if cache:
                used["CPU"] = used.get("CPU", 0) + cache
        return used

    def effective_inventory(self) -> Inventory | None:
        return subtract(self.inventory, self.used_bytes()) if self.inventory else None

    async def resolve(self, name: str):
        """ModelRecord for a name; 404/400 ApiErrors for unknown or malformed names."""
        return await self.deps.resolve(name)

    async def model_info(self, path):
        return await self.deps.model_info(path)

    async def plan(self, info, options: PlanOptions, inventory: Inventory) -> Layout:
        """The planner's layout (measured by a dry run where it can be)."""
        try:
            return await self.deps.plan(info, options, inventory)
        except ValueError as e:     # options the planner refuses (tensor_split length, main_gpu, ...)
            raise ApiError(400, f"cannot plan this load: {e}", param="options") from None

    async def plan_context(self, info, options: PlanOptions, inventory: Inventory, asked: int | None
                           ) -> tuple[PlanOptions, Layout]:
        """Options with their context chosen (`asked`: the request's or Modelfile's num_ctx, None for the default
        from memory) and their measured layout, which records the choice (Layout.context). A measured plan that
        does not fit at a default context chooses again with the compute buffers the dry run measured."""
        compute = None
        for _ in range(3):
            try:
                choice = await asyncio.to_thread(self.deps.choose_context, info, inventory, options,
                                                 self.config.num_ctx, asked, compute)
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

    async def context_preview(self, record, info) -> dict:
        """How `record`'s context is (loaded) or would be chosen now (not loaded: an estimated plan on what the
        loaded models leave free), with `loaded` saying which: for /api/show."""
        m = self.models.get(record.name)
        if m is not None and m.layout is not None and m.layout.context:
            return {**m.layout.context, "loaded": True}
        ro = parse_ollama_options({}, getattr(record, "parameters", None))
        inventory = await self.get_inventory()
        free = subtract(inventory, self.used_bytes(record.name))
        try:
            choice = await asyncio.to_thread(self.deps.choose_context, info, free, self.plan_options_for(info, ro),
                                             self.config.num_ctx, ro.plan.get("num_ctx"))
        except ValueError as e:
            return {"error": str(e), "loaded": False}
        return {**choice.to_dict(), "loaded": False}

    def plan_options_for(self, info, ro: RequestOptions, embedding: bool = False) -> PlanOptions:
        overrides = {**self.config.plan_defaults(), **ro.plan, "n_threads": ro.n_threads or self.config.n_threads}
        return plan_options(overrides, num_ctx_default=self.config.num_ctx,
                            num_parallel=self.config.num_parallel, n_ctx_train=getattr(info, "context_length", 0),
                            embedding=embedding, margin_mib=self.config.gpu_margin_mib)

    def keep_alive_for(self, keep_alive: KeepAlive) -> float | None:
        """A request's parsed keep_alive, or the server's (STRATA_KEEP_ALIVE) for DEFAULT."""
        return parse_keep_alive(self.config.keep_alive) if isinstance(keep_alive, Default) else keep_alive

    # ---- the request side ------------------------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, name: str, ro: RequestOptions | None = None, keep_alive: KeepAlive = DEFAULT,
                    record=None):
        """Load if needed, wait for a slot; on exit free the slot and start the keep-alive timer. A request whose
        model's runner ended while it waited (it never reached that runner) waits for the model's reload.
        `record`: the store's record for `name` when the caller has just resolved it (saves a store-thread hop
        on the way to the first token); a reroute resolves the name again."""
        ro = ro or RequestOptions()
        ka = self.keep_alive_for(keep_alive)
        t0 = time.monotonic()
        for attempt in range(REROUTES + 1):
            model = await self._admit(name, ro, record if attempt == 0 else None)
            model.keep_alive = ka
            acquired = False
            try:
                t_loaded = await self._wait_for_slot(model)
                acquired = t_loaded is not None
            finally:
                if not acquired:
                    await self._leave(model, ka, acquired=False)
            if acquired:
                break
            if attempt == REROUTES:
                raise ApiError(500, f"model {name!r}: {model.runner_ended}", code="runner_exited")
            log.info("a request queued for %s waits for its reload: %s", name, model.runner_ended)
        assert t_loaded is not None                  # acquired: the loop ended with a slot
        try:
            yield Lease(model, load_wait=t_loaded - t0, queue_wait=time.monotonic() - t_loaded)
        finally:
            await self._leave(model, ka, acquired=True)

    async def _wait_for_slot(self, model: LoadedModel) -> float | None:
        """Wait for the load and then a slot. Returns when the load was done, with the slot taken; None (no slot
        taken) when the model's runner ended before this request got to use it."""
        if not model.ready.done():
            await asyncio.shield(model.ready)
        else:
            model.ready.result()          # re-raise a failed load
        t_loaded = time.monotonic()
        if model.runner_ended is None:
            await model.slots.acquire()   # the requests on a runner that ends fail at once and free their slots
            if model.runner_ended is None:
                model.queued -= 1
                model.slots_busy += 1
                return t_loaded
            model.slots.release()
        return None

    async def _leave(self, model: LoadedModel, ka, *, acquired: bool) -> None:
        """A request is done with `model` (or leaves its queue): free its slot, start the keep-alive timer."""
        if acquired:
            model.slots_busy -= 1
            model.slots.release()
        else:
            model.queued -= 1
        model.pending -= 1
        model.last_used = time.monotonic()
        model.keep_alive = ka
        if model.pending == 0:
            self._schedule_expiry(model)
            await self._notify_idle()

    async def _admit(self, name: str, ro: RequestOptions, record=None) -> LoadedModel:
        """Count the request against the model (starting its load if needed) or refuse it with 503."""
        record = record or await self.resolve(name)
        name = record.name
        model = self.models.get(name)
        if model is not None and model.state == "loaded" and ro.plan and model.pending == 0:
            # different load-time options (num_ctx, num_gpu, ...) on an idle model: load it again with them
            want = self.plan_options_for(model.info, ro, model.options.embedding)
            if "num_ctx" not in ro.plan:          # the default context is the loaded one (chosen, maybe grown)
                want = replace(want, num_ctx=model.options.num_ctx)
            if want != model.options:
                await self.unload(name, reason="reload with new options")
                model = None
        if model is None:
            model = await self._start_load(record, ro)
        if model.pending >= model.slots_total + self.config.max_queue:
            self.metrics.rejected[name] += 1
            raise ApiError(503, f"model {name!r} is busy: {model.slots_total} slots in use and "
                                f"{self.config.max_queue} requests queued; retry later",
                           headers={"Retry-After": str(self.config.retry_after_s)}, code="queue_full")
        model.pending += 1
        model.queued += 1
        model.unload_requested = False
        self._cancel_expiry(model)
        return model

    async def _start_load(self, record, ro: RequestOptions) -> LoadedModel:
        name = record.name
        try:
            info = await self.model_info(record.path)
        except Exception as e:  # noqa: BLE001 - GGUFError (the client's file: 400), a missing file, ...
            raise ApiError(400 if isinstance(e, GGUFError) else 500,
                           f"cannot read model {name!r} ({record.path}): {e}", param="model") from None
        model = self.models.get(name)      # another request may have started the load during the await
        if model is None:
            opts = self.plan_options_for(info, ro)
            model = LoadedModel(name, record, info, opts)
            model.asked_ctx = ro.plan.get("num_ctx")
            self.models[name] = model
            self.failed.pop(name, None)
            self._background(self._load(model), f"load {name}")
        return model

    # ---- loading and unloading ---------------------------------------------------------------------------

    async def _load(self, model: LoadedModel) -> None:
        name = model.name
        loop = asyncio.get_running_loop()
        try:
            async with self._load_lock:
                if self._closed:
                    raise ApiError(503, "the service is shutting down")
                # the vision projector's weights and image compute go into the plan (planner/projector.py)
                model.projector = await self._projector_info(model)
                model.draft = await self._draft_info(model)     # (record, info) of its draft model, or None
                # LoRA adapters are the record's, applied by the runner after the load (not planned: small)
                model.layout = self._with_projector(model, replace(
                    await self._place(model), lora_adapters=tuple(getattr(model.record, "adapters", ()) or ())))
                if model.closing or self._closed:
                    # unloaded (deleted, keep_alive 0, shutdown) while it was being planned: unload() found no
                    # runner to close, so a runner started now would belong to nobody and hold the memory
                    raise ApiError(503, f"model {name!r} was unloaded while loading")
                self.events.publish("load_started", {"model": name, "layout": model.layout.to_dict()})
                model.client = self.deps.new_runner(model.layout, name)

                def on_progress(p: float) -> None:
                    loop.call_soon_threadsafe(self._progress, model, float(p))

                loaded = await asyncio.wait_for(model.client.start(on_progress), self.config.load_timeout_s)
            await self._loaded(model, loaded)
        except BaseException as e:  # noqa: BLE001 - every failure must reach the waiters
            await self._load_failed(model, e)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise

    async def _loaded(self, model: LoadedModel, loaded) -> None:
        model.actual = dict(getattr(loaded, "actual", {}) or {})
        model.record = await self.deps.with_digest(model.record)
        model.load_seconds = time.monotonic() - model.load_started
        model.state = "loaded"
        model.progress = 1.0
        client, layout = model.client, model.layout
        assert client is not None and layout is not None        # set by the load that just finished
        client.add_exit_callback(functools.partial(self._runner_exited, model, client=client))
        self.metrics.loads[(model.name, "ok")] += 1
        self.events.publish("loaded", {"model": model.name, "layout": layout.to_dict(),
                                       "actual": model.actual, "load_seconds": model.load_seconds})
        self._publish_memory()
        if not model.ready.done():
            model.ready.set_result(None)
        if model.pending == 0:
            self._schedule_expiry(model)

    async def _load_failed(self, model: LoadedModel, e: BaseException) -> None:
        name = model.name
        msg = e.message if isinstance(e, ApiError) else (str(e) or type(e).__name__)
        if isinstance(e, asyncio.TimeoutError):
            msg = f"loading took longer than {self.config.load_timeout_s:.0f} s"
        log.warning("load of %s failed: %s", name, msg)
        model.state, model.error = "failed", msg
        self._forget_workers(model)
        if self.models.get(name) is model:
            del self.models[name]
        if not model.closing:        # an unloaded model is gone, not "failed" in /api/ps
            self.failed[name] = model
        self.metrics.loads[(name, "failed")] += 1
        self.events.publish("load_failed", {"model": name, "error": msg})
        if model.client is not None:
            try:
                await model.client.close()
            except Exception:  # noqa: BLE001 - the runner is gone either way
                pass
        err = e if isinstance(e, ApiError) else ApiError(500, f"failed to load model {name!r}: {msg}",
                                                         code="load_failed")
        if not model.ready.done():
            model.ready.set_exception(err)
            model.ready.exception()     # mark retrieved: waiters may all have gone

    def _progress(self, model: LoadedModel, p: float) -> None:
        if model.state != "loading":
            return
        model.progress = max(model.progress, min(1.0, p))
        self.events.publish("load_progress", {"model": model.name, "progress": round(model.progress, 4)})

    async def _projector_info(self, model: LoadedModel):
        """The record's vision projector's facts (engine/gguf/projector.py), or None when it has none."""
        path = getattr(model.record, "projector", None)
        if not path:
            return None
        try:
            return await asyncio.to_thread(read_projector, path)
        except Exception as e:  # noqa: BLE001 - GGUFError, a file gone: the model cannot take images
            raise ApiError(500, f"model {model.name!r}: its vision projector {path} cannot be read: {e}") from None

    async def _draft_info(self, model: LoadedModel):
        """The draft model's (record, ModelInfo) when the options name one (`draft`), checked (scheduling/draft.py)."""
        return await self.draft_info(model.record, model.options.draft)

    async def draft_info(self, record, draft: str):
        """(record, ModelInfo) of the model `draft` as the draft model of `record` (None for ""); a 400 naming
        `draft` when it is unknown or has another vocabulary."""
        if not draft:
            return None
        return await check_draft(self.resolve, self.model_info, record.path, record.name, draft)

    @staticmethod
    def _with_draft(model: LoadedModel, layout: Layout) -> Layout:
        """`layout` with the draft model's weights, KV and compute planned (planner/draft.py), when it has one."""
        d = getattr(model, "draft", None)
        return with_draft(layout, d[1], d[0].name) if d is not None else layout

    @staticmethod
    def _with_projector(model: LoadedModel, layout: Layout) -> Layout:
        p = getattr(model, "projector", None)
        return with_projector(layout, p, model.info.n_embd) if p is not None else layout

    async def _place(self, model: LoadedModel) -> Layout:
        """Plan on what the other models leave free; unload idle ones (LRU) until the plan fits."""
        inventory = await self.get_inventory()
        deadline = time.monotonic() + self.config.load_timeout_s
        while True:
            others = [m for m in self.models.values() if m is not model and m.state == "loaded"]
            too_many = self.config.max_loaded_models and len(others) >= self.config.max_loaded_models
            layout = None
            if not too_many:
                used = self.used_bytes(model.name)
                if model.projector is not None:     # room for the projector where mtmd puts it
                    dev = projector_device([g.id for g in inventory.gpus])
                    used = {**used, dev: used.get(dev, 0) + projector_bytes(model.projector, model.info.n_embd)}
                model.options, layout = await self.plan_context(model.info, model.options,
                                                                reserve_workers(subtract(inventory, used), used),
                                                                model.asked_ctx)
                layout = self._with_draft(model, layout)     # planned before load: llama.cpp's fit would not
                if layout.fits:
                    log.info("loading %s with %s", model.name, layout.context.get("reason"))
                    return layout
            idle = sorted((m for m in others if m.pending == 0), key=lambda m: m.last_used)
            if idle:
                victim = idle[0]
                log.info("unloading %s (least recently used) to make room for %s", victim.name, model.name)
                await self.unload(victim.name, reason=f"evicted for {model.name}")
                continue
            if others and time.monotonic() < deadline:
                async with self._idle:      # every other model is busy: wait until one goes idle
                    try:
                        await asyncio.wait_for(self._idle.wait(), max(0.1, deadline - time.monotonic()))
                    except asyncio.TimeoutError:
                        pass
                continue
            raise self._no_room(model, layout, len(others))

    # ---- a larger context for a request that needs it -------------------------------------------------------

    def growth_ceiling(self, model: LoadedModel) -> int:
        """The largest context per sequence `model` may grow to: its training context, below the smallest larger
        one that did not fit the free memory (0: cannot grow)."""
        top = getattr(model.info, "context_length", 0) or 0
        if model.growth_refused:
            top = min(top, model.growth_refused - CTX_STEP)
        return top if top > model.options.num_ctx else 0

    async def grow_context(self, model: LoadedModel, needed: int, at_least: int = 0) -> bool:
        """Reload `model`, held by the caller's one request, with a context per sequence of `needed` tokens (twice
        the present one when that fits too, so a growing conversation does not reload every turn), capped at its
        training context: a request that wants more than the model was trained for still gets all it can, when
        that holds its `at_least` tokens (the prompt and one token of reply) and is more than the present context.
        False, and nothing changes, when another request is on the model, it cannot grow past the present context
        or `at_least`, or no such plan fits what the other models leave free (remembered until memory is freed, so
        each request does not plan again). The caller's lease stays valid: the model object is the same, with a
        new runner."""
        ceiling = self.growth_ceiling(model)
        name, cur = model.name, model.options.num_ctx
        want = min(ceiling, -(-needed // CTX_STEP) * CTX_STEP)
        if (model.pending != 1 or model.state != "loaded" or self.models.get(name) is not model
                or model.closing or want <= cur or at_least > want):
            return False
        least = -(-max(at_least, 1) // CTX_STEP) * CTX_STEP
        candidates = sorted({min(ceiling, max(want, 2 * cur)), want} | ({least} if cur < least < want else set()),
                            reverse=True)
        loop = asyncio.get_running_loop()
        async with self._load_lock:
            if model.pending != 1 or self.models.get(name) is not model or model.closing:
                return False
            inventory = await self.get_inventory()
            used = self.used_bytes(name)
            free = reserve_workers(subtract(inventory, used), used)
            layout = None
            for n in candidates:
                options, layout = await self.plan_context(model.info, replace(model.options, num_ctx=n), free, n)
                layout = self._with_draft(model, layout)
                if layout.fits:
                    break
            if layout is None or not layout.fits:
                log.info("%s: a context of %d tokens per sequence does not fit the free memory; staying at %d",
                         name, want, cur)
                model.growth_refused = candidates[-1]
                return False
            reason = f"num_ctx {options.num_ctx}: grown from {cur} for a request that needs {needed} tokens"
            layout = replace(layout, context={"num_ctx": options.num_ctx, "limit": "request", "reason": reason},
                             lora_adapters=model.layout.lora_adapters if model.layout else ())
            layout = self._with_projector(model, layout)
            log.info("reloading %s: %s", name, reason)
            self.events.publish("context_grow", {"model": name, "from": cur, "to": options.num_ctx,
                                                 "needed": needed})
            old, model.client = model.client, None      # its exit is then not taken for a crash
            model.state, model.progress, model.ready = "loading", 0.0, loop.create_future()
            model.load_started = time.monotonic()
            model.options, model.layout, model.asked_ctx = options, layout, None
            try:
                if old is not None:
                    await old.close()
                self.events.publish("load_started", {"model": name, "layout": layout.to_dict()})
                model.client = self.deps.new_runner(layout, name)

                def on_progress(p: float) -> None:
                    loop.call_soon_threadsafe(self._progress, model, float(p))

                loaded = await asyncio.wait_for(model.client.start(on_progress), self.config.load_timeout_s)
            except BaseException as e:  # noqa: BLE001 - as a failed load: the waiters get the error
                await self._load_failed(model, e)
                raise ApiError(500, f"reloading {name!r} with a larger context failed: {model.error}",
                               code="load_failed") from None
        await self._loaded(model, loaded)
        return True

    def _no_room(self, model: LoadedModel, layout: Layout | None, n_others: int) -> ApiError:
        if layout is None:
            return ApiError(503, f"{n_others} models are loaded and busy (max_loaded_models="
                                 f"{self.config.max_loaded_models}); try again later")
        need = sum(d.total for d in layout.devices)
        hint = ("; " + "; ".join(layout.suggestions)) if layout.suggestions else ""
        return ApiError(507, f"model {model.name!r} does not fit in memory (needs about {need / 2**20:.0f} MiB "
                             f"with num_ctx={model.options.num_ctx}, num_parallel={model.options.num_parallel})"
                             f"{hint}", code="insufficient_memory")

    async def unload(self, name: str, reason: str = "") -> bool:
        model = self.models.pop(name, None)
        if model is None:
            return False
        model.closing = True
        self._cancel_expiry(model)
        self._forget_workers(model)
        client = model.client
        if client is not None:
            try:
                await client.close()
            except Exception as e:  # noqa: BLE001
                log.warning("closing runner of %s: %s", name, e)
        if not model.ready.done():
            model.ready.set_exception(ApiError(503, f"model {name!r} was unloaded while loading ({reason})"))
            model.ready.exception()
        self._memory_freed()
        log.info("unloaded %s%s", name, f" ({reason})" if reason else "")
        self.events.publish("unloaded", {"model": name, "reason": reason})
        self._publish_memory()
        await self._notify_idle()
        return True

    def request_unload(self, name: str) -> bool:
        """keep_alive 0 on a load request: unload now if idle, else as soon as its requests end."""
        model = self.models.get(name)
        if model is None:
            return False
        model.keep_alive = 0
        model.unload_requested = True
        if model.pending == 0:
            self._schedule_expiry(model)
        return True

    def _forget_workers(self, model: LoadedModel) -> None:
        """A model on RPC workers ended: discover again before the next plan, so a worker that died is left out
        and one this model held (a worker serves one runner at a time) is offered again."""
        if model.layout is not None and rpc.endpoints_of(model.layout.gpu_devices):
            self.inventory = None

    def _runner_exited(self, model: LoadedModel, code, client=None) -> None:
        if client is not None and model.client is not client:
            return                          # a runner replaced by a larger context (grow_context)
        err = getattr(model.client, "exit_error", None)
        model.runner_ended = str(err) if err else f"its runner process ended (code {code})"
        self._forget_workers(model)
        if model.closing or self.models.get(model.name) is not model:
            return
        log.warning("runner of %s exited (code %s); it will be loaded again on the next request, and the %d "
                    "requests queued for it wait for that", model.name, code, max(0, model.queued))
        self.models.pop(model.name, None)
        self._cancel_expiry(model)
        self._memory_freed()
        self.events.publish("unloaded", {"model": model.name, "reason": f"runner exited with code {code}"})
        self._publish_memory()
        asyncio.get_running_loop().create_task(self._notify_idle())     # a load waiting for memory may go on

    def _memory_freed(self) -> None:
        """A model's memory came back: a context that did not fit before may fit now."""
        for m in self.models.values():
            m.growth_refused = 0

    async def _notify_idle(self) -> None:
        async with self._idle:
            self._idle.notify_all()

    def _schedule_expiry(self, model: LoadedModel) -> None:
        self._cancel_expiry(model)
        if model.state != "loaded" or self.models.get(model.name) is not model:
            return
        ka = 0 if model.unload_requested else model.keep_alive
        loop = asyncio.get_running_loop()
        if ka is FOREVER:
            model.expires_at = None
            return
        model.expires_at = datetime.now(timezone.utc) + timedelta(seconds=ka)

        def expire(m=model):
            if m.pending == 0 and self.models.get(m.name) is m:
                self._background(self.unload(m.name, reason="keep_alive expired"), f"unload {m.name}")

        if ka <= 0:
            loop.call_soon(expire)
        else:
            model.timer = loop.call_later(ka, expire)

    def _cancel_expiry(self, model: LoadedModel) -> None:
        if model.timer is not None:
            model.timer.cancel()
            model.timer = None

    def _publish_memory(self) -> None:
        inv = self.effective_inventory()
        if inv is not None:
            self.events.publish("memory", {"inventory": inv.to_dict(), "used": self.used_bytes()})

    # ---- views and shutdown ----------------------------------------------------------------------------

    def snapshot(self) -> list[LoadedModel]:
        return list(self.models.values()) + [m for n, m in self.failed.items() if n not in self.models]

    async def close(self) -> None:
        self._closed = True
        for name in list(self.models):
            await self.unload(name, reason="shutdown")
        if self._tasks:      # a keep-alive unload or a load in flight: let it finish (its runner is closed)
            await asyncio.wait(list(self._tasks), timeout=30)
