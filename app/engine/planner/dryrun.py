"""Measure the compute buffer per device with a `no_alloc` dry run of llama.cpp, in a child process, cached on disk.

Weights and KV are exact from the memory model; the compute buffer (the graph's scratch memory) is what llama.cpp
itself reserves, and it prints it per buffer type even under `no_alloc` (`sched_reserve: CPU compute buffer size`,
docs/architecture.md, llama.cpp facts 3). The dry run also reads the size of every cache llama.cpp builds (`llama_kv_cache: size =`,
printed under `no_alloc` too): where a KV shape is not mirrored by app.engine.gguf.kv_shape, that measurement wins. `no_alloc` needs `load_mode = NONE` (else GGML_ASSERT kills the process), and any abort
in llama.cpp must not end the service: hence the child. A dry run takes ~0.1-0.5 s plus the child's start.

    measure_compute(info, inventory, options) -> {device_id: bytes}   ("*": any GPU, for simulated inventories)
    plan_measured(info, inventory, options) -> Layout                  (plan, measure that plan, plan again)
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from dataclasses import replace

from app.discovery.inventory import Inventory
from app.engine.layout.types import Layout, PlanOptions
from app.engine.gguf.model_info import ModelInfo
from app.engine.layout import llama_params as load_params
from app.engine.planner.search import plan
from app.ggml import alloc_report, cxx_runtime, llama_log
from app.ggml.child_json import ChildError, run_json_child
from app.paths import cache_dir

log = logging.getLogger(__name__)
TIMEOUT_S = 180
CACHE_VERSION = 2       # 2: the caches' measured size ("kv")


class DryRunError(RuntimeError):
    """The dry run failed (llama.cpp refused or aborted); the message says why."""


# ---------------------------------------------------------------------------------------------------------------
# child side

def dry_run_here(layout: Layout, n_threads: int = 1) -> dict:
    """Load `layout` with no_alloc in THIS process and return what llama.cpp reserved:
    {"compute": {dev: bytes}, "output": {dev: bytes}, "kv": [bytes, n_lines] of every KV cache / recurrent state
    (all devices), "lines": [buffer and cache size lines]}. Raises DryRunError."""
    cxx_runtime.preload()                  # before libllama maps (docs/architecture.md, "llama.cpp facts" 15)
    from llama_cpp import llama_cpp as L   # late: maps libllama; only the dry-run child process calls this

    llama_log.install()
    mp, keep = load_params.model_params(layout, no_alloc=True)
    cp = load_params.context_params(layout, n_threads=n_threads)
    with llama_log.capture_log() as lines:
        model = L.llama_model_load_from_file(layout.model_path.encode(), mp)
        if not model:
            raise DryRunError(f"llama.cpp could not load {layout.model_path} (no_alloc): "
                              + " | ".join(ln for ln in lines if "error" in ln.lower())[-500:])
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            L.llama_model_free(model)
            raise DryRunError("llama.cpp could not create the context (no_alloc): "
                              + " | ".join(ln for ln in lines if "error" in ln.lower())[-500:])
    del keep
    report = alloc_report.parse_buffer_lines(lines, layout.gpu_devices)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return {
        "compute": {d: k["compute"] for d, k in report.items() if k["compute"]},
        "output": {d: k["output"] for d, k in report.items() if k["output"]},
        "kv": list(alloc_report.cache_size(lines)),
        "lines": [ln for ln in lines if "buffer size" in ln or alloc_report.CACHE_SIZE_LINE.search(ln)],
    }


def _child_main() -> None:
    req = json.loads(sys.stdin.read())
    try:
        res = dry_run_here(Layout.from_dict(req["layout"]), int(req.get("n_threads", 1)))
        print(json.dumps({"ok": True, **res}), flush=True)
    except Exception as e:  # report, do not crash with a traceback the parent cannot read
        print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)


# ---------------------------------------------------------------------------------------------------------------
# parent side

def run_dry_run(layout: Layout, timeout: float = TIMEOUT_S) -> dict:
    """Dry-run `layout` in a child process. Raises DryRunError if it fails, aborts or hangs."""
    try:
        res = run_json_child("app.engine.planner.dryrun", what="dry run", timeout=timeout,
                             stdin=json.dumps({"layout": layout.to_dict()}))
    except ChildError as e:
        raise DryRunError(str(e)) from None
    if res.get("ok"):
        return res
    raise DryRunError(res.get("error", "dry run failed"))


def _cache_key(layout: Layout) -> str:
    st = os.stat(layout.model_path)
    o = layout.options
    key = {
        "v": CACHE_VERSION, "model": os.path.realpath(layout.model_path), "size": st.st_size, "mtime": st.st_mtime_ns,
        "ctx": [o.num_ctx, o.num_parallel, o.num_batch, o.num_ubatch, layout.type_k, layout.type_v,
                layout.flash_attn, o.embedding],
        "devices": [list(layout.gpu_devices), layout.n_gpu_layers, list(layout.tensor_split),
                    [list(x) for x in layout.tensor_buft_overrides], layout.op_offload],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def cached_dry_run(layout: Layout) -> dict:
    """run_dry_run with an on-disk cache under app.paths.cache_dir()/dryrun, keyed by model file identity,
    context options and device placement."""
    d = cache_dir() / "dryrun"
    d.mkdir(parents=True, exist_ok=True)
    f = d / f"{_cache_key(layout)}.json"
    if f.exists():
        try:
            return json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            pass
    res = run_dry_run(layout)
    tmp = f.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")   # concurrent planners: no shared tmp
    tmp.write_text(json.dumps(res))
    os.replace(tmp, f)
    return res


def _cpu_only(inventory: Inventory) -> Inventory:
    return replace(inventory, devices=())


def measure_compute(info: ModelInfo, inventory: Inventory, options: PlanOptions,
                    layout: Layout | None = None) -> dict[str, int]:
    """Compute-buffer bytes per device id, measured by a dry run.
    Real GPUs: the dry run loads the planned layout (or `layout`) and reports each device's buffer.
    Simulated inventories (the GPUs are not there): a CPU-only dry run; its figure stands for every GPU ("*")."""
    return measure(info, inventory, options, layout)[0]


def measure(info: ModelInfo, inventory: Inventory, options: PlanOptions,
            layout: Layout | None = None) -> tuple[dict[str, int], tuple[int, int] | None]:
    """measure_compute, plus (bytes, lines) of the caches llama.cpp built (their size does not depend on where
    the layers are: the CPU-only dry run of a simulated inventory measures it too)."""
    if inventory.simulated or not inventory.gpus:
        # GPU-specific options mean nothing to the CPU-only measurement (and would not validate without GPUs)
        cpu_opts = replace(options, num_gpu=None, main_gpu=None, tensor_split=None, cpu_moe=None)
        lay = plan(info, _cpu_only(replace(inventory, host_ram_available=max(inventory.host_ram_available, 1 << 50),
                                           memory_cap=None)), cpu_opts)
        res = cached_dry_run(lay)
        cpu = int(res["compute"].get("CPU", 0))
        out = {"CPU": cpu}
        if inventory.gpus:
            out["*"] = cpu
        return out, _kv_of(res)
    lay = layout or plan(info, inventory, options)
    res = cached_dry_run(lay)
    return {k: int(v) for k, v in res["compute"].items()}, _kv_of(res)


def _kv_of(res: dict) -> tuple[int, int] | None:
    kv = res.get("kv")
    return (int(kv[0]), int(kv[1])) if kv and kv[1] else None


def plan_measured(info: ModelInfo, inventory: Inventory, options: PlanOptions) -> Layout:
    """Plan with estimates, measure that plan's compute buffers (and the size of the caches llama.cpp builds), plan
    again with the measurements (and once more if the device placement changed). Falls back to the estimate-based
    plan, with a reason, if the dry run fails."""
    first = plan(info, inventory, options)
    try:
        compute, kv = measure(info, inventory, options, first)
        second = plan(info, inventory, options, compute, kv)
        if not (inventory.simulated or not inventory.gpus) and (
                second.gpu_devices, second.n_gpu_layers, second.tensor_buft_overrides) != (
                first.gpu_devices, first.n_gpu_layers, first.tensor_buft_overrides):
            more, kv = measure(info, inventory, options, second)
            compute = {**compute, **more}
            second = plan(info, inventory, options, compute, kv)
    except (DryRunError, OSError) as e:
        log.warning("dry run failed, planning with estimated compute buffers: %s", e)
        return replace(first, reasons=first.reasons + (f"compute buffers estimated (dry run failed: {e})",))
    return replace(second, reasons=second.reasons + ("compute buffers measured by a no_alloc dry run",))


if __name__ == "__main__":
    _child_main()
