"""The scheduler's pure fit rules (app/service/scheduling/fit.py), each alone on plain values: memory in use with
the prompt caches, which idle model is evicted first, what a model that cannot be placed is told, the load's
options from a request over the server's settings, and the context sizes a growth tries. No loop, no runner, no
planner call; the same rules inside the scheduler: test_scheduler_units.py."""
from __future__ import annotations

from types import SimpleNamespace

from app.discovery.inventory import Inventory
from app.engine.layout.types import DevicePlan, Layout, PlanOptions
from app.service.config import ServiceConfig
from app.service.generation.options import parse_ollama_options
from app.service.scheduling import fit

MiB = 1 << 20


def model(name: str, predicted: dict[str, int] | None = None, cache: int = 0, pending: int = 0,
          last_used: float = 0.0, num_ctx: int = 1024, context_length: int = 8192, refused: int = 0):
    """A stand-in with the fields the rules read of a LoadedModel."""
    return SimpleNamespace(name=name, predicted=predicted or {}, prompt_cache=lambda: {"bytes": cache},
                           pending=pending, last_used=last_used, projector=None, draft=None,
                           options=PlanOptions(num_ctx=num_ctx, num_parallel=1), growth_refused=refused,
                           info=SimpleNamespace(context_length=context_length, n_embd=64))


def layout(total: int, fits: bool, suggestions: tuple[str, ...] = ()) -> Layout:
    cpu = DevicePlan(device_id="CPU", name="CPU", layers=(), expert_layers=(), weights={"other": total}, kv=0,
                     compute=0)
    return Layout(model_path="m.gguf", options=PlanOptions(), devices=(cpu,), layer_device=(), expert_device=(),
                  n_gpu_layers=0, split_mode=0, main_gpu=0, tensor_split=(), gpu_devices=(), tensor_buft_overrides=(),
                  op_offload=False, n_ctx=512, n_parallel=1, n_batch=512, n_ubatch=512, type_k="f16", type_v="f16",
                  flash_attn=None, fits=fits, suggestions=suggestions)


def test_memory_in_use_counts_plans_and_prompt_caches_but_not_the_excluded_model():
    models = [model("a", {"CPU": 10 * MiB, "CUDA0": 30 * MiB}, cache=2 * MiB), model("b", {"CUDA0": 5 * MiB})]
    assert fit.used_bytes(models) == {"CPU": 12 * MiB, "CUDA0": 35 * MiB}
    assert fit.used_bytes(models, exclude="a") == {"CUDA0": 5 * MiB}
    inv = Inventory(devices=(), host_ram_total=100 * MiB, host_ram_available=100 * MiB, cpu_cores=2)
    assert fit.remaining(inv, fit.used_bytes(models)).host_ram_available == 88 * MiB
    assert fit.with_projector_room({"CPU": 1}, inv, models[0]) == {"CPU": 1}       # no projector: no room kept


def test_the_least_recently_used_idle_model_is_the_victim_and_a_busy_one_never():
    old, new, busy = model("old", last_used=1.0), model("new", last_used=2.0), model("busy", pending=1)
    assert fit.eviction_victim([new, busy, old]) is old
    assert fit.eviction_victim([busy]) is None


def test_a_model_that_cannot_be_placed_is_told_why():
    m = model("big", num_ctx=2048)
    e = fit.no_room(m, layout(500 * MiB, False, ("use num_ctx=1024",)), 0, 0)
    assert e.status == 507 and e.code == "insufficient_memory"
    assert "500 MiB" in e.message and "num_ctx=2048" in e.message and "use num_ctx=1024" in e.message
    e = fit.no_room(m, None, 3, 3)
    assert e.status == 503 and "3 models are loaded and busy (max_loaded_models=3)" in e.message


def test_a_loads_options_are_the_requests_over_the_servers_clamped_to_the_training_context():
    config = ServiceConfig(num_ctx=4096, num_parallel=2, n_threads=3)
    info = SimpleNamespace(context_length=2048)
    o = fit.plan_options_for(config, info, parse_ollama_options({}))
    assert (o.num_ctx, o.num_parallel, o.n_threads) == (2048, 2, 3)
    o = fit.plan_options_for(config, info, parse_ollama_options({"num_ctx": 1024, "num_thread": 5}), embedding=True)
    assert (o.num_ctx, o.n_threads, o.embedding) == (1024, 5, True)


def test_growth_tries_twice_the_context_then_what_is_needed_then_the_least_that_holds_the_prompt():
    assert fit.growth_sizes(1024, 8192, 1500, 1100) == (1536, [2048, 1536, 1280])
    assert fit.growth_sizes(1024, 8192, 5000, 4000) == (5120, [5120, 4096])
    assert fit.growth_sizes(512, 2048, 33500, 1501) == (2048, [2048, 1536])    # capped at the training context
    assert fit.growth_sizes(2048, 2048, 4000, 1501) is None                    # at the ceiling already
    assert fit.growth_sizes(1024, 8192, 3000, 9000) is None                    # the prompt alone is beyond it
    assert fit.grown_context(2048, 1024, 1500) == {
        "num_ctx": 2048, "limit": "request", "reason": "num_ctx 2048: grown from 1024 for a request that needs 1500 "
                                                       "tokens"}


def test_the_growth_ceiling_is_the_training_context_below_what_did_not_fit():
    assert fit.growth_ceiling(model("a", num_ctx=1024, context_length=8192)) == 8192
    assert fit.growth_ceiling(model("a", num_ctx=1024, context_length=8192, refused=4096)) == 3840
    assert fit.growth_ceiling(model("a", num_ctx=1024, context_length=8192, refused=1280)) == 0
    assert fit.growth_ceiling(model("a", num_ctx=8192, context_length=8192)) == 0
