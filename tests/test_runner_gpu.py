"""The engine on a real GPU: every layer offloaded, batching, cancellation and embeddings on CUDA/Metal/...

Skipped unless llama.cpp was built with a GPU backend and a GPU is present. The model is the built-in
SmolLM2, or STRATA_GPU_TEST_MODEL (any GGUF, e.g. a synthetic one: the text may be noise, the paths are real).
"""
from __future__ import annotations

import asyncio
import os

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.planner.types import DevicePlan, Layout, PlanOptions
from engine_util import cancel_stream

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
            for _ in range(100):
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
