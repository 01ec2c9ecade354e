"""The engine on a real GPU: every layer offloaded, batching, cancellation and embeddings on CUDA/Metal/...;
and a MoE model with part of its experts on the CPU (tensor_buft_overrides), planned by the planner and loaded
through the runner, under a forced expert count and under a simulated VRAM budget.

Skipped unless llama.cpp was built with a GPU backend and a GPU is present. The model of the all-on-GPU test is
the built-in SmolLM2, or STRATA_GPU_TEST_MODEL (any GGUF, e.g. a synthetic one: the text may be noise, the paths
are real); the MoE tests write a synthetic qwen3moe (tests/support/gguf_factory.py).
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.layout.types import DevicePlan, Layout, PlanOptions
from engine_util import cancel_stream
from repo_paths import ROOT

pytestmark = pytest.mark.gpu


def _gpu_name() -> str | None:
    from llama_cpp import llama_cpp as L

    if not L.llama_supports_gpu_offload():
        return None
    from app.ggml import ggml_lib

    for d in ggml_lib.list_devices():
        if d["type"] == "gpu":
            return d["name"]
    return None


@pytest.fixture(scope="module")
def gpu():
    try:
        name = _gpu_name()
    except Exception as e:  # no backend library / no device API
        pytest.skip(f"no GPU backend: {e}")
    if not name:
        pytest.skip("llama.cpp has no GPU device here")
    return name


@pytest.fixture(scope="module")
def model_path():
    p = os.environ.get("STRATA_GPU_TEST_MODEL")
    if p:
        return p
    from app.engine.gguf.builtin_model import builtin_model_path

    b = builtin_model_path()
    if b is None:
        pytest.skip("no model for the GPU test")
    return str(b)


def gpu_layout(path: str, gpu: str, n_layer: int = 64) -> Layout:
    opts = PlanOptions(num_ctx=1024, num_parallel=4, num_gpu=-1)
    plans = (DevicePlan("CPU", "CPU", (), (), {}, 0, 0), DevicePlan(gpu, gpu, (), (), {}, 0, 0))
    return Layout(path, opts, plans, (gpu,) * n_layer, ("",) * n_layer, n_gpu_layers=-1, split_mode=1, main_gpu=0,
                  tensor_split=(1.0,), gpu_devices=(gpu,), tensor_buft_overrides=(), op_offload=True, n_ctx=4096,
                  n_parallel=4, n_batch=512, n_ubatch=512, type_k="f16", type_v="f16", flash_attn=None, fits=True)


def test_engine_on_gpu(gpu, model_path):
    async def go():
        c = RunnerClient(gpu_layout(model_path, gpu), n_threads=2)
        loaded = await c.start()
        try:
            assert loaded.actual.get(gpu, {}).get("model", 0) > 0, loaded.actual
            assert loaded.actual[gpu]["kv"] > 0 and loaded.actual[gpu]["compute"] > 0

            async def gen(prompt, n=32):
                evs = [e async for e in c.generate(P.GenerateRequest(
                    id=prompt, prompt=prompt, raw=True, num_predict=n, ignore_eos=True,
                    sampling=P.SamplingParams(temperature=0)))]
                return evs[-1]

            dones = await asyncio.gather(*(gen(f"prompt {i}") for i in range(6)))
            assert all(d.reason == "length" and d.completion_tokens == 32 for d in dones)
            # cancel during a long prefill (GPU backends do not poll the abort flag: chunks make it stop)
            agen = c.generate(P.GenerateRequest(id="long", prompt="word " * 900, raw=True, num_predict=4))
            task = asyncio.ensure_future(agen.__anext__())
            await asyncio.sleep(0.01)
            await cancel_stream(agen, task)
            for _ in range(2400):                   # up to 2 minutes: a bound for a hang, not a speed
                st = await c.stats()
                if st.slots_busy == 0:
                    break
                await asyncio.sleep(0.05)
            assert st.slots_busy == 0 and st.queued == 0
            emb = await c.embed(P.EmbedRequest(id="e", inputs=["hello", "hello"]))
            assert emb.embeddings[0] == emb.embeddings[1]
            return loaded, st
        finally:
            await c.close()

    loaded, st = asyncio.run(go())
    print("GPU actual:", loaded.actual, "decode fraction:", st.decode_fraction)


# ---------------------------------------------------------------------------------------------------------------
# MoE with experts on the CPU: the load that segfaulted on CUDA before ggml/cxx_runtime.preload (docs/gpu-results.md)

MOE_LAYERS = 8


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory):
    from gguf_factory import write_moe_qwen3

    return str(write_moe_qwen3(tmp_path_factory.mktemp("gpu-moe") / "moe-8L-32E-q4_0.gguf", n_layer=MOE_LAYERS,
                               n_expert=32, n_expert_used=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64,
                               n_ff_exp=256, qtype="Q4_0"))


def _expert_blocks_on_cpu(layout) -> list[int]:
    return [i for i, d in enumerate(layout.expert_device) if d == "CPU"]


async def _load_and_generate(layout, n_streams: int = 2, n_tokens: int = 16):
    c = RunnerClient(layout, n_threads=4)
    loaded = await c.start()
    try:
        async def gen(i):
            evs = [e async for e in c.generate(P.GenerateRequest(
                id=f"moe{i}", prompt=f"The experts of layer {i} sit on the CPU", raw=True, num_predict=n_tokens,
                ignore_eos=True, sampling=P.SamplingParams(temperature=0)))]
            return evs[-1]

        dones = await asyncio.gather(*(gen(i) for i in range(n_streams)))
    finally:
        await c.close()
    return loaded, dones


def test_moe_experts_on_cpu_load_and_generate(gpu, moe_path):
    """cpu_moe = half the blocks: the planner emits a CPU override for their experts, the runner loads it on the
    GPU build and generates; the expert bytes really are in system RAM and the rest really is on the GPU."""
    from app.discovery import discover
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions

    info = read_model_info(moe_path)
    lay = plan(info, discover(), PlanOptions(num_ctx=1024, num_parallel=2, cpu_moe=MOE_LAYERS // 2))
    assert lay.gpu_devices == (gpu,) and lay.fits, lay.reasons
    assert _expert_blocks_on_cpu(lay) == list(range(MOE_LAYERS // 2)), lay.expert_device
    assert [dev for _, dev in lay.tensor_buft_overrides] == ["CPU"], lay.tensor_buft_overrides
    loaded, dones = asyncio.run(_load_and_generate(lay))
    assert all(d.reason == "length" and d.completion_tokens == 16 for d in dones), dones
    cpu, dev = loaded.actual["CPU"], loaded.actual[gpu]
    cpu_experts = lay.devices[0].weights.get("experts", 0) + lay.devices[0].weights.get("repack", 0)
    assert cpu["model"] + cpu["repack"] >= 0.95 * cpu_experts > 0, (loaded.actual, lay.devices[0].weights)
    gpu_plan = next(d for d in lay.devices if d.device_id == gpu)
    assert abs(dev["model"] - gpu_plan.weights_total) <= 0.02 * gpu_plan.weights_total, (dev, gpu_plan.weights)
    print("\nMoE cpu_moe=4 actual:", loaded.actual)


def test_moe_partial_offload_under_a_vram_budget(gpu, moe_path):
    """The automatic plan under a simulated VRAM budget (the real GPU, its free memory cut to about half of what
    the all-on-GPU plan needs): some experts go to the CPU, the load works, and what llama.cpp really allocates on
    the GPU stays inside the budget."""
    from app.discovery import discover
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.dryrun import plan_measured
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions

    info = read_model_info(moe_path)
    inv = discover()
    opts = PlanOptions(num_ctx=1024, num_parallel=2)
    full = plan(info, inv, opts)
    need = next(d for d in full.devices if d.device_id == gpu).total
    experts = sum(d.weights.get("experts", 0) for d in full.devices)
    budget = need - experts // 2
    cut = dataclasses.replace(inv, devices=tuple(
        dataclasses.replace(d, free=min(d.free, budget + opts.margin)) if d.id == gpu else d for d in inv.devices))
    lay = plan_measured(info, cut, opts)
    assert lay.fits and lay.gpu_devices == (gpu,), lay.reasons
    assert 0 < len(_expert_blocks_on_cpu(lay)) < MOE_LAYERS, (lay.expert_device, lay.reasons)
    loaded, dones = asyncio.run(_load_and_generate(lay))
    assert all(d.reason == "length" and d.completion_tokens == 16 for d in dones), dones
    used = sum(loaded.actual[gpu].values())
    assert used <= budget, (used, budget, loaded.actual, lay.reasons)
    print(f"\nMoE under {budget / 2**20:.1f} MiB: experts of blocks {_expert_blocks_on_cpu(lay)} on the CPU, "
          f"GPU uses {used / 2**20:.1f} MiB; actual {loaded.actual}")


def test_moe_override_load_after_numpy(gpu, moe_path):
    """The load that segfaulted (bench/gpu_layout_check.py): numpy imported BEFORE llama.cpp, then the planner's
    expert-override Layout loaded through llama_params. On a build whose libraries carry their own static
    libstdc++ this died in std::regex during the tokenizer set-up; app.ggml.cxx_runtime.preload (run by
    llama_log.install before llama_cpp is imported) makes it load."""
    code = textwrap.dedent(f"""
        import numpy  # noqa: F401  first, as a user's script would: the system libstdc++ loads before libllama
        from app.ggml import llama_log
        llama_log.install()
        from llama_cpp import llama_cpp as L
        from app.discovery import discover
        from app.engine.gguf.model_info import read_model_info
        from app.engine.layout import llama_params
        from app.engine.planner.search import plan
        from app.engine.layout.types import PlanOptions
        info = read_model_info({moe_path!r})
        lay = plan(info, discover(), PlanOptions(num_ctx=1024, cpu_moe={MOE_LAYERS}))
        assert lay.tensor_buft_overrides and lay.gpu_devices, lay
        mp, keep = llama_params.model_params(lay)
        model = L.llama_model_load_from_file({moe_path!r}.encode(), mp)
        print("loaded", bool(model), flush=True)
    """)
    root = str(ROOT)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0 and "loaded True" in p.stdout, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
