"""A simulated machine and Layouts on it for the memory view's tests (its numbers in tests/unit/gui/, its
painted widgets in tests/gui/): one 8 GiB GPU with 6 GiB free beside 32 GiB of RAM, a model's blocks split
between them, optionally MoE, repacked or with mapped file pages."""
from __future__ import annotations

from app.discovery.inventory import Device, Inventory
from app.engine.layout.types import DevicePlan, Layout, PlanOptions

GiB = 1 << 30
MiB = 1 << 20


def make_inventory(gpu_total=8 * GiB, gpu_free=6 * GiB) -> Inventory:
    return Inventory(
        devices=(Device("CUDA0", "RTX Test", "gpu", "SIM", gpu_total, gpu_free),),
        host_ram_total=32 * GiB, host_ram_available=20 * GiB, cpu_cores=8, cpu_name="Test CPU", simulated=True)


def make_layout(n_layers=8, on_gpu=6, moe=False, fits=True, gpu_weights=3 * GiB, kv=512 * MiB) -> Layout:
    """Blocks 0..n-on_gpu-1 on the CPU, the rest on CUDA0; with moe, the GPU layers' experts stay on the CPU."""
    layer_device = tuple("CPU" if i < n_layers - on_gpu else "CUDA0" for i in range(n_layers))
    expert_device = tuple("CPU" for _ in range(n_layers)) if moe else tuple("" for _ in range(n_layers))
    cpu = DevicePlan("CPU", "CPU", tuple(i for i, d in enumerate(layer_device) if d == "CPU"),
                     tuple(range(n_layers)) if moe else (), {"attention": 200 * MiB, "ffn": 300 * MiB,
                                                              "token_embd": 100 * MiB}, kv=64 * MiB, compute=32 * MiB,
                     output=1 * MiB)
    gpu = DevicePlan("CUDA0", "RTX Test", tuple(i for i, d in enumerate(layer_device) if d == "CUDA0"), (),
                     {"attention": gpu_weights // 2, "ffn": gpu_weights - gpu_weights // 2}, kv=kv,
                     compute=256 * MiB)
    return Layout(model_path="/m.gguf", options=PlanOptions(num_ctx=4096), devices=(cpu, gpu),
                  layer_device=layer_device, expert_device=expert_device, n_gpu_layers=on_gpu, split_mode=1,
                  main_gpu=0, tensor_split=(1.0,), gpu_devices=("CUDA0",), tensor_buft_overrides=(), op_offload=True,
                  n_ctx=4096, n_parallel=1, n_batch=512, n_ubatch=512, type_k="f16", type_v="f16", flash_attn=None,
                  fits=fits, suggestions=() if fits else ("use num_ctx 2048",))


def repack_layout(mapped=40 * MiB):
    """make_layout with a CPU that repacks 50 MiB of its weights and maps `mapped` bytes of file pages beyond
    what it reads from the mapping (as the planner writes them: DevicePlan.weights["repack"], DevicePlan.mapped)."""
    from dataclasses import replace

    lay = make_layout()
    cpu = lay.devices[0]
    w = dict(cpu.weights, ffn=250 * MiB, repack=50 * MiB)
    return replace(lay, devices=(replace(cpu, weights=w, mapped=mapped), *lay.devices[1:]))
