"""The model scheduler's rules with its collaborators injected as fakes (no store, no GGUF, no planner, no runner
process): LRU eviction order, a busy model is never evicted, queue limits, keep_alive expiry, a failing load,
a model deleted while it loads, a runner that dies. Each test runs in milliseconds. The same rules on live
servers with real runners: test_service_scheduler.py."""
from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace

import pytest

from app.discovery.inventory import Inventory
from app.engine.planner.context import ContextChoice
from app.engine.layout.types import DevicePlan, Layout, PlanOptions
from app.service.collaborators import Collaborators
from app.service.config import ServiceConfig
from app.service.http.errors import ApiError
from app.service.generation.model_card import model_card
from app.service.generation.keep_alive import DEFAULT, FOREVER
from app.service.scheduling import fair_slots
from app.service.scheduling import scheduler as scheduler_module
from app.service.http.metrics import Metrics
from app.service.scheduling.scheduler import Scheduler

MiB = 1 << 20


class Events:
    def __init__(self):
        self.seen: list[tuple[str, dict]] = []

    def publish(self, type: str, data: dict) -> None:
        self.seen.append((type, data))

    def of(self, type: str) -> list[dict]:
        return [d for t, d in self.seen if t == type]


class FakeRunner:
    """Loads when `gate` opens (at once by default); `fail` makes the load raise; close() ends a load in flight
    the way killing the child process does."""

    def __init__(self, name: str, gate: asyncio.Event | None = None, fail: str | None = None):
        self.name, self.gate, self.fail = name, gate, fail
        self.closed = asyncio.Event()
        self.started = False
        self.exit_callbacks = []
        self.pid = 4242

    async def start(self, on_progress):
        self.started = True
        on_progress(0.5)
        if self.gate is not None:
            gate = asyncio.ensure_future(self.gate.wait())
            closed = asyncio.ensure_future(self.closed.wait())
            await asyncio.wait({gate, closed}, return_when=asyncio.FIRST_COMPLETED)
            gate.cancel()
            closed.cancel()
        if self.closed.is_set():
            raise RuntimeError("the runner process was closed during the load")
        if self.fail:
            raise RuntimeError(self.fail)
        return SimpleNamespace(actual={"CPU": {"model": 1}})

    async def close(self):
        self.closed.set()

    def add_exit_callback(self, cb):
        self.exit_callbacks.append(cb)


def _layout(size: int, fits: bool) -> Layout:
    cpu = DevicePlan(device_id="CPU", name="CPU", layers=(), expert_layers=(), weights={"other": size}, kv=0,
                     compute=0)
    return Layout(model_path="fake.gguf", options=PlanOptions(), devices=(cpu,), layer_device=(), expert_device=(),
                  n_gpu_layers=0, split_mode=0, main_gpu=0, tensor_split=(), gpu_devices=(), tensor_buft_overrides=(),
                  op_offload=False, n_ctx=512, n_parallel=1, n_batch=512, n_ubatch=512, type_k="f16", type_v="f16",
                  flash_attn=None, fits=fits)


class World:
    """The fakes behind one Scheduler: models of given sizes in host RAM of a given size."""

    def __init__(self, sizes: dict[str, int], ram: int = 100 * MiB, **config):
        self.sizes = sizes
        self.ram = ram
        self.runners: list[FakeRunner] = []
        self.gate: asyncio.Event | None = None       # set: runners wait for it
        self.plan_gate: asyncio.Event | None = None  # set: planning waits for it
        self.fail: str | None = None
        self.events = Events()
        self.metrics = Metrics()
        self.config = replace(ServiceConfig(num_parallel=1, max_queue=8, keep_alive="5m", load_timeout_s=5.0,
                                            n_threads=1), **config)
        deps = Collaborators(resolve=self.resolve, model_info=self.model_info, discover=self.discover,
                             plan=self.plan, new_runner=self.new_runner, with_digest=self.with_digest,
                             choose_context=self.choose_context, projector_info=self.projector_info)
        self.scheduler = Scheduler(self.config, self.events, self.metrics, deps)
        self.projectors: dict[str, object] = {}     # projector path -> its facts (absent: unreadable)
        self.projectors_read: list[str] = []

    @staticmethod
    def choose_context(info, inventory, options, ceiling, asked, compute=None):
        return ContextChoice(options.num_ctx, "setting", "fake: the options' own")

    async def resolve(self, name: str):
        if name not in self.sizes:
            raise ApiError(404, f"model {name!r} not found", param="model")
        return SimpleNamespace(name=name, path=f"/models/{name}.gguf", parameters={}, system=None, template=None)

    async def model_info(self, path):
        name = path.rsplit("/", 1)[1].removesuffix(".gguf")
        return SimpleNamespace(name=name, context_length=2048, is_embedding=False)

    async def projector_info(self, path):
        self.projectors_read.append(path)
        if path not in self.projectors:
            raise OSError(f"{path}: no such file")
        return self.projectors[path]

    async def discover(self) -> Inventory:
        return Inventory(devices=(), host_ram_total=self.ram, host_ram_available=self.ram, cpu_cores=2)

    async def plan(self, info, options, inventory: Inventory) -> Layout:
        if self.plan_gate is not None:
            await self.plan_gate.wait()
        size = self.sizes[info.name]
        return _layout(size, size <= inventory.host_ram_available)

    def new_runner(self, layout, name):
        runner = FakeRunner(name, self.gate, self.fail)
        self.runners.append(runner)
        return runner

    async def with_digest(self, record):
        return record

    async def use(self, name: str, keep_alive=FOREVER):
        """One request: lease the model and give it back at once."""
        async with self.scheduler.lease(name, keep_alive=keep_alive) as lease:
            return lease


async def until(cond, what: str, timeout: float = 20.0):
    """Let the loop run until cond() holds. A load passes through a worker thread (the context choice), so the
    bound is a generous time (below run()'s), not a count of loop turns that a busy machine could use up first."""
    end = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > end:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.001)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_least_recently_used_idle_model_is_evicted_first():
    async def main():
        w = World({"a": 40 * MiB, "b": 40 * MiB, "c": 40 * MiB})
        s = w.scheduler
        await w.use("a")
        await w.use("b")
        await w.use("a")                  # a is now the most recently used
        await w.use("c")                  # 120 MiB do not fit in 100: one must go
        assert set(s.models) == {"a", "c"}
        assert [d["model"] for d in w.events.of("unloaded")] == ["b"]
        assert w.events.of("unloaded")[0]["reason"] == "evicted for c"
        await w.use("b")                  # now a is the least recently used
        assert set(s.models) == {"c", "b"}
        assert [d["model"] for d in w.events.of("unloaded")] == ["b", "a"]
        assert w.runners[0].closed.is_set() and w.runners[1].closed.is_set()
        await s.close()
    run(main())


def test_a_busy_model_is_not_evicted_the_load_waits_for_it():
    async def main():
        w = World({"a": 60 * MiB, "b": 60 * MiB})
        s = w.scheduler
        release = asyncio.Event()

        async def hold_a():
            async with s.lease("a", keep_alive=FOREVER):
                await release.wait()

        holder = asyncio.create_task(hold_a())
        await until(lambda: "a" in s.models and s.models["a"].slots_busy == 1, "a busy")
        b = asyncio.create_task(w.use("b"))
        await until(lambda: "b" in s.models, "b admitted")
        for _ in range(50):               # b's load goes round its loop; a must stay
            await asyncio.sleep(0)
        assert s.models["b"].state == "loading" and s.models["a"].state == "loaded"
        assert not w.events.of("unloaded")
        release.set()                     # a goes idle: now it may be evicted
        await holder
        await b
        assert set(s.models) == {"b"} and w.events.of("unloaded")[0]["model"] == "a"
        await s.close()
    run(main())


def test_requests_beyond_slots_plus_queue_get_503_with_retry_after():
    async def main():
        w = World({"a": MiB}, num_parallel=1, max_queue=1)
        s = w.scheduler
        release = asyncio.Event()

        async def hold():
            async with s.lease("a", keep_alive=FOREVER) as lease:
                await release.wait()
                return lease.queue_wait

        first = asyncio.create_task(hold())
        await until(lambda: "a" in s.models and s.models["a"].slots_busy == 1, "first holds the slot")
        second = asyncio.create_task(hold())          # waits in the queue
        await until(lambda: s.models["a"].queued == 1, "second queued")
        with pytest.raises(ApiError) as e:
            async with s.lease("a"):
                pass
        assert e.value.status == 503 and e.value.code == "queue_full"
        assert e.value.headers["Retry-After"] == str(w.config.retry_after_s)
        assert w.metrics.rejected["a"] == 1
        release.set()
        await first
        await second
        m = s.models["a"]
        assert (m.slots_busy, m.queued, m.pending) == (0, 0, 0)
        await s.close()
    run(main())


def test_keep_alive_expiry_unloads_an_idle_model():
    async def main():
        w = World({"short": MiB, "zero": MiB, "forever": MiB, "default": MiB})
        s = w.scheduler
        await w.use("short", keep_alive=0.01)
        await w.use("forever", keep_alive=FOREVER)
        await w.use("zero", keep_alive=0)
        await w.use("default", keep_alive=DEFAULT)        # the server's: "5m"
        await until(lambda: "short" not in s.models and "zero" not in s.models, "keep_alive expiry")
        reasons = {d["model"]: d["reason"] for d in w.events.of("unloaded")}
        assert reasons == {"short": "keep_alive expired", "zero": "keep_alive expired"}
        assert s.models["forever"].expires_at is None and s.models["forever"].timer is None
        assert s.models["default"].timer is not None and s.models["default"].keep_alive == 300.0
        await s.close()
    run(main())


def test_a_request_during_keep_alive_cancels_the_expiry():
    async def main():
        w = World({"a": MiB})
        s = w.scheduler
        await w.use("a", keep_alive=300.0)
        timer = s.models["a"].timer
        async with s.lease("a", keep_alive=300.0):
            assert s.models["a"].timer is None and timer.cancelled()
        assert s.models["a"].timer is not None
        await s.close()
    run(main())


def test_a_failed_load_answers_every_waiter_then_loads_again():
    async def main():
        w = World({"a": MiB})
        s = w.scheduler
        w.gate, w.fail = asyncio.Event(), "out of memory while allocating the KV cache"
        waiters = [asyncio.create_task(w.use("a")) for _ in range(3)]
        await until(lambda: w.runners and w.runners[0].started, "runner started")
        w.gate.set()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, ApiError) and r.status == 500 and r.code == "load_failed" for r in results)
        assert all("out of memory" in r.message for r in results)
        assert len(w.runners) == 1 and w.runners[0].closed.is_set()    # one load for three waiters, closed
        assert "a" not in s.models and s.failed["a"].state == "failed"
        assert w.metrics.loads[("a", "failed")] == 1 and w.events.of("load_failed")
        w.gate, w.fail = None, None
        await w.use("a")                  # the next request tries again
        assert s.models["a"].state == "loaded" and "a" not in s.failed
        await s.close()
    run(main())


def test_a_model_deleted_while_its_runner_starts():
    async def main():
        w = World({"a": MiB})
        s = w.scheduler
        w.gate = asyncio.Event()
        waiter = asyncio.create_task(w.use("a"))
        await until(lambda: w.runners and w.runners[0].started, "runner started")
        assert await s.unload("a", reason="deleted")
        with pytest.raises(ApiError) as e:
            await waiter
        assert e.value.status == 503 and "unloaded while loading" in e.value.message
        assert w.runners[0].closed.is_set()
        assert "a" not in s.models and "a" not in s.failed       # gone, not "failed"
        await s.close()
    run(main())


def test_a_model_deleted_while_it_is_planned_starts_no_runner():
    async def main():
        w = World({"a": MiB})
        s = w.scheduler
        w.plan_gate = asyncio.Event()
        waiter = asyncio.create_task(w.use("a"))
        await until(lambda: "a" in s.models, "admitted")
        await s.unload("a", reason="deleted")
        w.plan_gate.set()
        with pytest.raises(ApiError) as e:
            await waiter
        assert e.value.status == 503
        await until(lambda: not s._tasks, "the load task ended")
        assert w.runners == [] and "a" not in s.models and "a" not in s.failed
        await s.close()
    run(main())


def test_one_load_serves_concurrent_requests_and_a_dead_runner_is_dropped():
    async def main():
        w = World({"a": MiB}, num_parallel=2)
        s = w.scheduler
        await asyncio.gather(*(w.use("a") for _ in range(4)))
        assert len(w.runners) == 1 and s.models["a"].state == "loaded"
        for cb in w.runners[0].exit_callbacks:
            cb(-9)                        # the child was killed
        assert "a" not in s.models
        assert w.events.of("unloaded")[-1]["reason"] == "runner exited with code -9"
        await w.use("a")
        assert len(w.runners) == 2
        await s.close()
    run(main())


def test_requests_queued_for_a_runner_that_dies_wait_for_the_reload():
    """Only the request holding the slot was sent to the dead runner; the ones queued behind it (never sent) are
    served by the next runner, not failed, and /api/ps counts them on the new model."""
    async def main():
        w = World({"a": MiB}, num_parallel=1)
        s = w.scheduler
        holding = asyncio.Event()
        release = asyncio.Event()

        async def running():
            async with s.lease("a", keep_alive=FOREVER) as lease:
                holding.set()
                await release.wait()         # its request fails when the runner dies; then it lets go
                return lease.model

        async def queued():
            async with s.lease("a", keep_alive=FOREVER) as lease:
                return lease.model

        first = asyncio.ensure_future(running())
        await holding.wait()
        waiting = [asyncio.ensure_future(queued()) for _ in range(3)]
        await until(lambda: s.models["a"].queued == 3, "three requests queued behind the slot")
        old = s.models["a"]
        for cb in w.runners[0].exit_callbacks:
            cb(-9)                           # the runner was killed
        assert old.runner_ended and "a" not in s.models
        release.set()
        assert await first is old
        served = await asyncio.gather(*waiting)
        assert len(w.runners) == 2 and all(m is s.models["a"] and m is not old for m in served)
        assert (old.pending, old.queued, old.slots_busy) == (0, 0, 0)
        assert (s.models["a"].pending, s.models["a"].queued) == (0, 0)
        await s.close()
    run(main())


def test_a_request_that_keeps_meeting_dead_runners_fails_with_the_reason(monkeypatch):
    """Each queued request follows its model to a new runner at most REROUTES times (0 here): then it fails with
    the dead runner's reason instead of waiting for ever on a model whose runners keep dying."""
    monkeypatch.setattr(scheduler_module, "REROUTES", 0)

    async def main():
        w = World({"a": MiB}, num_parallel=1)
        s = w.scheduler
        holding, release = asyncio.Event(), asyncio.Event()

        async def running():
            async with s.lease("a", keep_alive=FOREVER):
                holding.set()
                await release.wait()

        async def queued():
            async with s.lease("a", keep_alive=FOREVER):
                return "served"

        first = asyncio.ensure_future(running())
        await holding.wait()
        victim = asyncio.ensure_future(queued())
        await until(lambda: s.models["a"].queued == 1, "the request queued")
        for cb in w.runners[0].exit_callbacks:
            cb(-6)
        release.set()
        await first
        with pytest.raises(ApiError) as e:
            await victim
        assert e.value.status == 500 and e.value.code == "runner_exited" and "code -6" in e.value.message
        assert len(w.runners) == 1                     # no reload was started for it
        await s.close()
    run(main())


def test_a_model_that_fits_nowhere_is_507_with_its_size():
    async def main():
        w = World({"huge": 500 * MiB})
        with pytest.raises(ApiError) as e:
            await w.use("huge")
        assert e.value.status == 507 and "500 MiB" in e.value.message and w.runners == []
        await w.scheduler.close()
    run(main())


def test_unknown_model_is_404_before_any_load():
    async def main():
        w = World({})
        with pytest.raises(ApiError) as e:
            await w.use("nope")
        assert e.value.status == 404 and w.runners == []
    run(main())


def test_a_draft_model_is_checked_through_the_injected_vocabulary_comparison():
    """The draft option's check reads no GGUF itself: the collaborators' `vocab_mismatch` compares the two models'
    vocabularies (here a fake that names a difference), and its answer is the 400 naming `draft`, before any
    runner starts."""
    from app.service.generation.options import parse_ollama_options

    async def main():
        w = World({"big": 10 * MiB, "small": 1 * MiB})
        compared = []

        async def mismatch(target, draft):
            compared.append((target, draft))
            return "token 5 differs"

        w.scheduler.loader.deps.vocab_mismatch = mismatch
        with pytest.raises(ApiError) as e:
            async with w.scheduler.lease("big", parse_ollama_options({"draft": "small"})):
                pass
        assert e.value.status == 400 and e.value.param == "draft" and "token 5 differs" in e.value.message
        assert compared == [("/models/big.gguf", "/models/small.gguf")] and w.runners == []
        await w.scheduler.close()
    run(main())


class GrowingWorld(World):
    """Models whose plan grows with the context: `size` plus `per_token` bytes per token of context."""

    def __init__(self, sizes: dict[str, int], per_token: int, **kw):
        super().__init__(sizes, **kw)
        self.per_token = per_token

    async def plan(self, info, options, inventory: Inventory) -> Layout:
        size = self.sizes[info.name] + self.per_token * options.num_ctx
        return _layout(size, size <= inventory.host_ram_available)


def test_a_model_loaded_small_grows_for_a_request_that_asked_for_nothing():
    """One client loads the model with num_ctx 512; the next request (no num_ctx) needs more than the training
    context (2048 here) for its prompt and max_tokens: it gets the training context, which holds its prompt."""
    from app.service.generation.options import parse_ollama_options
    async def main():
        w = GrowingWorld({"a": 10 * MiB}, per_token=10 * 1024)
        s = w.scheduler
        async with s.lease("a", parse_ollama_options({"num_ctx": 512}), keep_alive=FOREVER):
            pass
        async with s.lease("a", keep_alive=FOREVER) as lease:
            assert lease.model.options.num_ctx == 512 and s.growth_ceiling(lease.model) == 2048
            assert await s.grow_context(lease.model, 1500 + 32000, 1501)
            assert lease.model.options.num_ctx == 2048 and lease.model.asked_ctx is None
            assert lease.model.layout.context["limit"] == "request"
            assert s.growth_ceiling(lease.model) == 0                     # at the training context: no further
            assert not await s.grow_context(lease.model, 4000, 1501)
        assert [(d["from"], d["to"]) for d in w.events.of("context_grow")] == [(512, 2048)]
        await s.close()
    run(main())


def test_growth_takes_what_memory_holds_and_remembers_what_did_not_fit():
    """Memory for about 1000 tokens of context: a request that wants 2048 gets the smallest context that holds
    its prompt (768), and one whose prompt needs more is not planned again until memory comes free."""
    from app.service.generation.options import parse_ollama_options
    async def main():
        w = GrowingWorld({"a": 10 * MiB, "b": 10 * MiB}, per_token=80 * 1024, ram=100 * MiB)
        s = w.scheduler
        async with s.lease("b", parse_ollama_options({"num_ctx": 256}), keep_alive=FOREVER):
            pass                                                          # 10 MiB + 256 * 80 KiB: 30 MiB
        async with s.lease("a", parse_ollama_options({"num_ctx": 256}), keep_alive=FOREVER) as lease:
            assert await s.grow_context(lease.model, 1000 + 2000, 700)
            assert lease.model.options.num_ctx == 768
            assert not await s.grow_context(lease.model, 1100 + 2000, 1101)      # 2048 and 1280 do not fit
            assert lease.model.growth_refused == 1280 and s.growth_ceiling(lease.model) == 1024
            assert lease.model.options.num_ctx == 768
        await s.unload("b")                                               # memory came free
        assert s.models["a"].growth_refused == 0 and s.growth_ceiling(s.models["a"]) == 2048
        await s.close()
    run(main())


def test_the_scheduler_forwards_nothing_to_its_loader():
    """Routes ask the scheduler's door (door.py: ModelDoor, which asks the loader) for models, devices and plans: no
    method of scheduler.py's Scheduler is a bare hand-over to the loader, so scheduler.py holds leases, queues,
    eviction, expiry and growth's decision only."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(scheduler_module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    forwards = []
    for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
            call = body[0].value.value if isinstance(body[0].value, ast.Await) else body[0].value
            if isinstance(call, ast.Call) and "self.loader." in ast.unparse(call.func):
                forwards.append(fn.name)
    assert forwards == []


def test_the_model_card_reads_the_projector_through_the_injected_collaborator():
    """The listings' `vision` comes from the projector reader the loader is given (no file is opened: these paths
    do not exist); a projector that cannot be read lists the model without vision, and no projector reads none."""
    async def main():
        w = World({"a": MiB})
        w.projectors["/models/a-mmproj.gguf"] = facts = SimpleNamespace(projector_type="mlp")
        record = SimpleNamespace(name="a", path="/models/a.gguf", projector="/models/a-mmproj.gguf")
        card = await model_card(w.scheduler, record, with_context=False)
        assert card.projector is facts and "vision" in card.capabilities
        gone = await model_card(w.scheduler, replace_record(record, projector="/models/gone.gguf"), with_context=False)
        assert gone.projector is None and "vision" not in gone.capabilities
        plain = await model_card(w.scheduler, replace_record(record, projector=None), with_context=False)
        assert plain.projector is None and "vision" not in plain.capabilities
        assert w.projectors_read == ["/models/a-mmproj.gguf", "/models/gone.gguf"]
        await w.scheduler.close()
    run(main())


def replace_record(record, **fields):
    return SimpleNamespace(**{**vars(record), **fields})


def test_the_scheduler_serves_queued_requests_in_the_fair_order():
    async def main():
        w = World({"m": 1 << 20}, num_parallel=1, max_queue=16)
        s = w.scheduler
        release = asyncio.Event()
        served: list[str] = []

        async def hold():
            fair_slots.set_client("first")
            async with s.lease("m", keep_alive=FOREVER):
                await release.wait()

        async def one(client: str, priority: int, tag: str):
            fair_slots.set_client(client)
            async with s.lease("m", keep_alive=FOREVER, priority=priority):
                served.append(tag)

        holder = asyncio.create_task(hold())
        await until(lambda: "m" in s.models and s.models["m"].slots_busy == 1, "the slot is held")
        arrivals = [("agent", 0, "agent-1"), ("agent", 0, "agent-2"), ("agent", 0, "agent-3"),
                    ("other", 0, "other-1"), ("chat", 1, "chat-1")]
        tasks = []
        for client, prio, tag in arrivals:
            tasks.append(asyncio.create_task(one(client, prio, tag)))
            n = len(tasks)
            await until(lambda: s.models["m"].queued == n, f"{tag} queued")
        waiting = s.models["m"].strata_info()["waiting"]       # as /api/ps shows it
        assert [(w["client"], w["watched"]) for w in waiting] == [("chat", True), ("agent", False), ("other", False),
                                                                  ("agent", False), ("agent", False)]
        release.set()
        await asyncio.gather(holder, *tasks)
        assert served == ["chat-1", "agent-1", "other-1", "agent-2", "agent-3"]
        await s.close()
    run(main())
