"""Helpers for the engine tests: a CPU Layout for a GGUF built directly (no planner), and a client runner."""
from __future__ import annotations

from app.engine.layout.types import DevicePlan, Layout, PlanOptions


def cpu_layout(path, *, num_ctx: int = 512, num_parallel: int = 2, n_batch: int = 512, n_ubatch: int | None = None,
               embedding: bool = False, n_layer: int = 30) -> Layout:
    n_ubatch = n_ubatch or n_batch
    opts = PlanOptions(num_ctx=num_ctx, num_parallel=num_parallel, num_batch=n_batch, num_ubatch=n_ubatch,
                       num_gpu=0, embedding=embedding)
    cpu = DevicePlan(device_id="CPU", name="CPU", layers=tuple(range(n_layer)), expert_layers=(), weights={},
                     kv=0, compute=0)
    return Layout(model_path=str(path), options=opts, devices=(cpu,), layer_device=("CPU",) * n_layer,
                  expert_device=("",) * n_layer, n_gpu_layers=0, split_mode=1, main_gpu=0, tensor_split=(),
                  gpu_devices=(), tensor_buft_overrides=(), op_offload=True, n_ctx=num_ctx * num_parallel,
                  n_parallel=num_parallel, n_batch=n_batch, n_ubatch=n_ubatch, type_k="f16", type_v="f16",
                  flash_attn=None, fits=True)


async def cancel_stream(agen, task) -> None:
    """What a client that goes away does: cancel the task waiting on the stream's next event, then close the
    stream (closing it cancels the request in the runner)."""
    import asyncio

    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, StopAsyncIteration):
        pass
    await agen.aclose()
