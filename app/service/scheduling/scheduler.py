"""Model scheduler: which models are loaded, where, and who may use them. Leases, queues, LRU eviction,
keep-alive expiry and context growth's decision only; what fits is decided by pure rules (fit.py), and finding
models, reading GGUFs, discovering devices, planning and starting runners go through the loader (loader.py) to the
injected collaborators (collaborators.py), so its rules are tested with fakes in milliseconds.

- A request asks for a lease (`async with scheduler.lease(name, opts, keep_alive) as lease:`). The model is
  loaded if it is not (other requests for it wait on the same load), then the request waits for one of the
  model's `num_parallel` slots, watched (streamed) requests first, then round-robin across clients
  (fair_slots.py). Beyond `num_parallel + max_queue` requests per model, a 503 with Retry-After.
- Before a load, the planner lays the model out on what is left of each device after the models already
  loaded (their predicted bytes). If it does not fit, idle models are unloaded least recently used first and
  the plan is made again; a model with requests is never unloaded under them (the load waits for one to go idle).
- Context: unless the request or Modelfile sets num_ctx, a load gets the largest context per sequence the free
  memory holds, up to the model's training context and STRATA_NUM_CTX (planner.context.context_for); a request
  whose prompt outgrows it reloads the model with a larger one when that fits and nothing else runs on it
  (`grow_context`). Both are logged and published (docs/architecture.md, "Context").
- keep_alive: after a model's last request ends, it stays loaded that long (None = forever, 0 = unload now): the
  request's, else the model's own default (`settings`: strata pin --keep-alive, POST /api/pin), else the server's.
- Pins (`settings[name].pinned`): a pinned model never expires and is never unloaded for another model (only an
  explicit unload ends it). A load that needs the memory pinned models hold is a 503 naming them at once.
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

from app.discovery.inventory import Inventory
from app.engine.layout.types import Layout

from ..collaborators import Collaborators
from ..config import ServiceConfig
from ..generation.host import HostedModel
from ..generation.keep_alive import DEFAULT, FOREVER, Default, KeepAlive, parse_keep_alive
from ..generation.options import RequestOptions
from ..http.errors import ApiError
from ..http.events import EventBus
from ..http.metrics import Metrics
from . import fit
from .door import ModelDoor
from .fair_slots import current_client
from .loaded_model import Lease, LoadedModel, ModelSettings
from .loader import Loader

log = logging.getLogger("strata.scheduler")

REROUTES = 3        # times one queued request follows its model to a new runner before it fails with the last error

__all__ = ["Lease", "LoadedModel", "ModelSettings", "Scheduler"]


class Scheduler(ModelDoor):
    """The model host the routes and generation hold (door.py: ServiceHost, ModelHost)."""

    def __init__(self, config: ServiceConfig, events: EventBus, metrics: Metrics, deps: Collaborators):
        self.config = config
        self.events = events
        self.metrics = metrics
        self.loader = Loader(config, events, metrics, deps)
        self.models: dict[str, LoadedModel] = {}
        self.failed: dict[str, LoadedModel] = {}
        self._load_lock = asyncio.Lock()
        self._idle = asyncio.Condition()
        self._closed = False
        self._tasks: set[asyncio.Task] = set()     # loads and keep-alive unloads running in the background
        self.settings: dict[str, ModelSettings] = {}   # per model (the store's name): pin, default keep_alive

    def _background(self, coro, name: str) -> asyncio.Task:
        """A task close() waits for: one still running when the loop stops would be destroyed half-way."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- per-model settings (memory in use and the questions that need no lease: door.py) ----------------------

    def keep_alive_for(self, keep_alive: KeepAlive, name: str | None = None) -> float | None:
        """How long model `name` stays after a request with `keep_alive`: forever when it is pinned; else the
        request's, or for DEFAULT the model's own default keep_alive, else the server's (STRATA_KEEP_ALIVE)."""
        own = self.settings.get(name) if name is not None else None
        if own is not None and own.pinned:
            return FOREVER
        if not isinstance(keep_alive, Default):
            return keep_alive
        if own is not None and own.keep_alive is not None:
            return parse_keep_alive(own.keep_alive)
        return parse_keep_alive(self.config.keep_alive)

    def pinned(self, name: str) -> bool:
        s = self.settings.get(name)
        return s is not None and s.pinned

    def set_settings(self, name: str, settings: "ModelSettings") -> None:
        """Model `name`'s pin and default keep_alive (the store keeps them; the route writes both). A loaded model
        takes them at once: pinned, it stays; unpinned, its keep-alive runs from now."""
        if settings.pinned or settings.keep_alive is not None:
            self.settings[name] = settings
        else:
            self.settings.pop(name, None)
        model = self.models.get(name)
        if model is not None:
            model.pinned = settings.pinned
            model.keep_alive = self.keep_alive_for(DEFAULT, name)
            if model.pending == 0:
                self._schedule_expiry(model)

    # ---- the request side ------------------------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, name: str, ro: RequestOptions | None = None, keep_alive: KeepAlive = DEFAULT,
                    record=None, priority: int = 0):
        """Load if needed, wait for a slot; on exit free the slot and start the keep-alive timer. A request whose
        model's runner ended while it waited (it never reached that runner) waits for the model's reload.
        `record`: the store's record for `name` when the caller has just resolved it (saves a store-thread hop
        on the way to the first token); a reroute resolves the name again. Slots go to waiting requests watched
        first (`priority` 1: streamed), then round-robin across clients (fair_slots.py)."""
        ro = ro or RequestOptions()
        t0 = time.monotonic()
        for attempt in range(REROUTES + 1):
            model = await self._admit(name, ro, record if attempt == 0 else None)
            ka = self.keep_alive_for(keep_alive, model.name)
            model.keep_alive = ka
            acquired = False
            try:
                t_loaded = await self._wait_for_slot(model, priority)
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

    async def _wait_for_slot(self, model: LoadedModel, priority: int = 0) -> float | None:
        """Wait for the load and then a slot. Returns when the load was done, with the slot taken; None (no slot
        taken) when the model's runner ended before this request got to use it."""
        if not model.ready.done():
            await asyncio.shield(model.ready)
        else:
            model.ready.result()          # re-raise a failed load
        t_loaded = time.monotonic()
        if model.runner_ended is None:
            # the requests on a runner that ends fail at once and free their slots
            await model.slots.acquire(current_client(), priority)
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
        record = record or await self.loader.resolve(name)
        name = record.name
        model = self.models.get(name)
        if model is not None and model.state == "loaded" and ro.plan and model.pending == 0:
            # different load-time options (num_ctx, num_gpu, ...) on an idle model: load it again with them
            want = fit.plan_options_for(self.config, model.info, ro, model.options.embedding)
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
        info = await self.loader.read_info(record)
        model = self.models.get(name)      # another request may have started the load during the await
        if model is None:
            model = self.loader.new_model(record, info, ro)
            model.pinned = self.pinned(name)
            self.models[name] = model
            self.failed.pop(name, None)
            self._background(self._load(model), f"load {name}")
        return model

    # ---- loading and unloading ---------------------------------------------------------------------------

    async def _load(self, model: LoadedModel) -> None:
        name = model.name
        try:
            async with self._load_lock:
                if self._closed:
                    raise ApiError(503, "the service is shutting down")
                # the vision projector and the draft model go into the plan (planner/projector.py, draft.py)
                await self.loader.read_companions(model)
                model.layout = await self._place(model)
                if model.closing or self._closed:
                    # unloaded (deleted, keep_alive 0, shutdown) while it was being planned: unload() found no
                    # runner to close, so a runner started now would belong to nobody and hold the memory
                    raise ApiError(503, f"model {name!r} was unloaded while loading")
                loaded = await self.loader.start_runner(model)
            await self._loaded(model, loaded)
        except BaseException as e:  # noqa: BLE001 - every failure must reach the waiters
            await self._load_failed(model, e)
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise

    async def _loaded(self, model: LoadedModel, loaded) -> None:
        await self.loader.mark_loaded(model, loaded)
        client = model.client
        assert client is not None                   # set by the load that just finished
        client.add_exit_callback(functools.partial(self._runner_exited, model, client=client))
        self._publish_memory()
        if not model.ready.done():
            model.ready.set_result(None)
        if model.pending == 0:
            self._schedule_expiry(model)

    async def _load_failed(self, model: LoadedModel, e: BaseException) -> None:
        """A load (or a growth's reload) failed: the model leaves the loaded ones (shown as failed unless it was
        unloaded meanwhile) and every request waiting for it gets the error."""
        self._forget_workers(model)
        if self.models.get(model.name) is model:
            del self.models[model.name]
        if not model.closing:        # an unloaded model is gone, not "failed" in /api/ps
            self.failed[model.name] = model
        err = await self.loader.mark_failed(model, e)
        if not model.ready.done():
            model.ready.set_exception(err)
            model.ready.exception()     # mark retrieved: waiters may all have gone

    async def _place(self, model: LoadedModel) -> Layout:
        """Plan on what the other models leave free; unload idle ones (LRU) until the plan fits."""
        inventory = await self.loader.get_inventory()
        deadline = time.monotonic() + self.config.load_timeout_s
        while True:
            others = [m for m in self.models.values() if m is not model and m.state == "loaded"]
            too_many = self.config.max_loaded_models and len(others) >= self.config.max_loaded_models
            layout = None
            if not too_many:
                model.options, layout = await self.loader.plan_load(model, model.options, model.asked_ctx,
                                                                    inventory, self.used_bytes(model.name))
                if layout.fits:
                    log.info("loading %s with %s", model.name, layout.context.get("reason"))
                    return layout
            victim = fit.eviction_victim(others, self.pinned)
            if victim is not None:
                log.info("unloading %s (least recently used) to make room for %s", victim.name, model.name)
                await self.unload(victim.name, reason=f"evicted for {model.name}")
                continue
            pinned = [m for m in others if self.pinned(m.name)]
            busy = len(others) > len(pinned)         # unpinned models with requests: they may go idle
            if pinned and not busy and (too_many or await self._fits_without(model, pinned, inventory)):
                raise fit.pinned_in_the_way(model, pinned)   # waiting would not help: pins are never evicted
            if busy and time.monotonic() < deadline:
                async with self._idle:      # every other model is busy: wait until one goes idle
                    try:
                        await asyncio.wait_for(self._idle.wait(), max(0.1, deadline - time.monotonic()))
                    except asyncio.TimeoutError:
                        pass
                continue
            raise fit.no_room(model, layout, len(others), self.config.max_loaded_models)

    async def _fits_without(self, model: LoadedModel, pinned: list[LoadedModel], inventory: Inventory) -> bool:
        """Whether `model` would fit if the `pinned` models gave their memory back (then they are what is in the
        way: a 503 naming them, not a 507 for a model that fits nowhere)."""
        names = {m.name for m in pinned}
        used = fit.used_bytes([m for m in self.models.values() if m.name not in names], model.name)
        _, layout = await self.loader.plan_load(model, model.options, model.asked_ctx, inventory, used)
        return layout.fits

    # ---- a larger context for a request that needs it -------------------------------------------------------

    def growth_ceiling(self, model: HostedModel) -> int:
        """The largest context per sequence `model` may grow to (fit.growth_ceiling; 0: cannot grow): part of the
        growth decision the pipeline asks for, which imports nothing of scheduling/."""
        return fit.growth_ceiling(_own(model))

    async def grow_context(self, model: HostedModel, needed: int, at_least: int = 0) -> bool:
        """Reload `model`, held by the caller's one request, with a context per sequence of `needed` tokens (twice
        the present one when that fits too, so a growing conversation does not reload every turn), capped at its
        training context: a request that wants more than the model was trained for still gets all it can, when
        that holds its `at_least` tokens (the prompt and one token of reply) and is more than the present context.
        False, and nothing changes, when another request is on the model, it cannot grow past the present context
        or `at_least`, or no such plan fits what the other models leave free (remembered until memory is freed, so
        each request does not plan again; never an eviction for growth). The caller's lease stays valid: the model
        object is the same, with a new runner."""
        model = _own(model)
        name, cur = model.name, model.options.num_ctx
        sizes = fit.growth_sizes(cur, fit.growth_ceiling(model), needed, at_least)
        if (model.pending != 1 or model.state != "loaded" or self.models.get(name) is not model
                or model.closing or sizes is None):
            return False
        want, candidates = sizes
        async with self._load_lock:
            if model.pending != 1 or self.models.get(name) is not model or model.closing:
                return False
            planned = await self.loader.first_fit(model, candidates, await self.loader.get_inventory(),
                                                  self.used_bytes(name))
            if planned is None:
                log.info("%s: a context of %d tokens per sequence does not fit the free memory; staying at %d",
                         name, want, cur)
                model.growth_refused = candidates[-1]
                return False
            options, layout = planned
            context = fit.grown_context(options.num_ctx, cur, needed)
            layout = replace(layout, context=context)
            log.info("reloading %s: %s", name, context["reason"])
            self.events.publish("context_grow", {"model": name, "from": cur, "to": options.num_ctx,
                                                 "needed": needed})
            old = model.begin_reload(options, layout)
            try:
                if old is not None:
                    await old.close()
                loaded = await self.loader.start_runner(model)
            except BaseException as e:  # noqa: BLE001 - as a failed load: the waiters get the error
                await self._load_failed(model, e)
                raise ApiError(500, f"reloading {name!r} with a larger context failed: {model.error}",
                               code="load_failed") from None
        await self._loaded(model, loaded)
        return True

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
        if fit.on_rpc_workers(model.layout):
            self.loader.forget_inventory()

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
        if self.pinned(model.name) and not model.unload_requested:
            ka = FOREVER                    # a pinned model stays, whatever its requests asked
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
            # the inventory as the loaded models leave it (its memory_cap: what is left of the cap), and the cap
            self.events.publish("memory", {"inventory": inv.to_dict(), "used": self.used_bytes(),
                                           "memory_cap": self.config.max_memory or None})

    # ---- views and shutdown ----------------------------------------------------------------------------

    def snapshot(self) -> list[LoadedModel]:
        return list(self.models.values()) + [m for n, m in self.failed.items() if n not in self.models]

    async def close(self) -> None:
        self._closed = True
        for name in list(self.models):
            await self.unload(name, reason="shutdown")
        if self._tasks:      # a keep-alive unload or a load in flight: let it finish (its runner is closed)
            await asyncio.wait(list(self._tasks), timeout=30)


def _own(model: HostedModel) -> LoadedModel:
    """A leased model handed back through the door (typed as generation sees it) is one of the scheduler's own."""
    assert isinstance(model, LoadedModel), model
    return model
