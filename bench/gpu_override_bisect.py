"""Bisect the segfault of bench/gpu_layout_check.py (real load of an expert-override layout on CUDA) against
bench/gpu_override_probe.py (hand-built params, same placement, loads fine). Each variant runs in its own child
process, so a crash is a row (rc -11), not the end of the run. Run by hand on a GPU machine:

    python bench/gpu_override_bisect.py MODEL.gguf              # the matrix below, one line per variant
    python bench/gpu_override_bisect.py MODEL.gguf --gdb        # same, crashing variants re-run under gdb (native bt)
    python bench/gpu_override_bisect.py MODEL.gguf --only np_first+log+layout

Toggles (a variant is a '+'-joined set; 'base' = the probe: simple regex, no tensor_split, n_gpu_layers -1,
llama-cpp-python's own log callback, llama_cpp imported first):
  np_first   import numpy BEFORE llama_cpp (gpu_layout_check.py does; every working path imports llama_cpp first)
  log        install app.ggml.llama_log's callback (every log line, override DEBUG lines included, goes through it)
  discover   run app.discovery.discover() in this process first (NVML init/shutdown + the ggml probe child)
  regex      the planner's pattern blk\\.(0|..|N-1)\\.ffn_(up|down|gate|gate_up)_(ch|)exps instead of \\d+ / 3 names
  split      tensor_split = [n_layer+1, 0, ...] (llama_max_devices floats) and n_gpu_layers = n_layer+1
  layout     params from load_params.model_params(plan(...cpu_moe=n_layer)) (the exact struct gpu_layout_check loads)
  nommap     load_mode NONE (experts then go to the CUDA_Host pinned buffer instead of CPU_Mapped)
  preload    app.ggml.cxx_runtime.preload() before llama_cpp loads (after numpy with np_first): the fix
  runner     the whole engine path instead: RunnerClient(plan(...cpu_moe=n_layer)) in a runner process, 8 tokens
On a machine without a GPU the devices list is empty (CPU-only load) and `layout` forces the override into a CPU plan.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

MATRIX = ["base", "np_first", "log", "discover", "regex", "split", "nommap", "layout",
          "regex+split+log", "np_first+log+layout", "log+discover+layout", "np_first+log+discover+layout",
          "np_first+log+discover+layout+nommap", "np_first+preload", "np_first+log+discover+layout+preload",
          "preload+log+discover+layout", "runner"]


def runner_child(model: str) -> None:
    """The engine's own path: plan with every expert on the CPU, load in a runner process, generate."""
    import asyncio

    from app.discovery import discover
    from app.engine import protocol as P
    from app.engine.client import RunnerClient
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions

    info = read_model_info(model)
    lay = plan(info, discover(), PlanOptions(num_ctx=2048, cpu_moe=info.n_layer))
    print(f"params: runner ngl={lay.n_gpu_layers} devices={lay.gpu_devices} ov={lay.tensor_buft_overrides}", flush=True)

    async def go():
        c = RunnerClient(lay, n_threads=4)
        loaded = await c.start()
        print("loaded True", {d: {k: v for k, v in a.items() if v} for d, a in loaded.actual.items()}, flush=True)
        try:
            evs = [e async for e in c.generate(P.GenerateRequest(id="g", prompt="hello", raw=True, num_predict=8,
                                                                   ignore_eos=True))]
            print("generated", evs[-1].reason, evs[-1].completion_tokens, flush=True)
        finally:
            await c.close()

    asyncio.run(go())


def child(model: str, toggles: set[str]) -> None:
    import faulthandler

    faulthandler.enable()
    if "np_first" in toggles:
        import numpy  # noqa: F401
    if "preload" in toggles:
        from app.ggml import cxx_runtime

        print("preload:", cxx_runtime.preload(), flush=True)
    import ctypes
    import dataclasses

    from llama_cpp import llama_cpp as L

    from app.ggml import ggml_lib, llama_log
    from app.engine.layout import llama_params as load_params
    from app.engine.gguf.model_info import read_model_info

    if "log" in toggles:
        llama_log.install()
    info = read_model_info(model)
    n = info.n_layer
    inv = None
    if "discover" in toggles or "layout" in toggles:
        from app.discovery import discover

        inv = discover()
    gpus = ["CUDA0"] if ggml_lib.supports_gpu_offload() else []     # as the probe: one GPU, by name
    regex = (rf"blk\.({'|'.join(str(i) for i in range(n))})\.ffn_(up|down|gate|gate_up)_(ch|)exps"
             if "regex" in toggles else r"blk\.\d+\.ffn_(up|down|gate)_exps")
    load_mode = load_params.LOAD_MODE_NONE if "nommap" in toggles else None
    if "layout" in toggles:
        from app.engine.planner.search import plan
        from app.engine.layout.types import PlanOptions

        lay = plan(info, inv, PlanOptions(num_ctx=2048, num_parallel=1, cpu_moe=n, num_batch=512, num_ubatch=512))
        if not lay.tensor_buft_overrides:      # no GPU here: force the same override into the CPU plan
            lay = dataclasses.replace(lay, tensor_buft_overrides=((regex, "CPU"),))
        mp, keep = load_params.model_params(lay, load_mode=load_mode)
        desc = (f"layout ngl={mp.n_gpu_layers} split_mode={mp.split_mode} main_gpu={mp.main_gpu} "
                f"split={list(lay.tensor_split)} ov={lay.tensor_buft_overrides}")
    else:
        class OV(ctypes.Structure):
            _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]

        ov = (OV * 2)()
        pat = ctypes.create_string_buffer(regex.encode())
        ov[0].pattern = ctypes.cast(pat, ctypes.c_char_p)
        ov[0].buft = ggml_lib.cpu_buffer_type()
        devs = (ctypes.c_void_p * (len(gpus) + 1))(*[ggml_lib.dev_by_name(g) for g in gpus], None)
        split = (ctypes.c_float * ggml_lib.max_devices())(float(n + 1))
        keep = [ov, pat, devs, split]
        mp = L.llama_model_default_params()
        mp.tensor_buft_overrides = ctypes.addressof(ov)
        mp.devices = ctypes.addressof(devs)
        mp.n_gpu_layers = -1
        if "split" in toggles:
            mp.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
            mp.n_gpu_layers = n + 1
        if load_mode is not None:
            mp.load_mode = load_mode
        desc = f"probe gpus={gpus} ngl={mp.n_gpu_layers} regex={regex}"
    print("params:", desc, flush=True)
    with llama_log.capture_log() if "log" in toggles else _nullctx() as lines:
        m = L.llama_model_load_from_file(model.encode(), mp)
    print("loaded", bool(m), flush=True)
    if lines:
        print("\n".join(ln for ln in lines if "buffer size" in ln), flush=True)
    if m:
        L.llama_model_free(m)
    del keep


class _nullctx:
    def __enter__(self):
        return []

    def __exit__(self, *a):
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--only", help="one variant, e.g. np_first+log+layout")
    ap.add_argument("--gdb", action="store_true", help="re-run crashing variants under gdb for a native backtrace")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        if a.child == "runner":
            runner_child(a.model)
        else:
            child(a.model, set(a.child.split("+")) - {"base"})
        return 0
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for v in [a.only] if a.only else MATRIX:
        cmd = [sys.executable, os.path.abspath(__file__), a.model, "--child", v]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        out = (p.stdout + p.stderr).strip().splitlines()
        params = next((ln for ln in out if ln.startswith("params:")), "")
        print(f"{v:<40} rc={p.returncode:<4} {params[8:]}", flush=True)
        for ln in out:
            if ln.startswith(("loaded", "generated")) or "buffer size" in ln:
                print("    " + ln.strip()[:300], flush=True)
        if p.returncode != 0:
            print("    " + "\n    ".join(out[-25:]), flush=True)
            gdb = shutil.which("gdb") or shutil.which("cuda-gdb")     # the lent GPU machines have cuda-gdb only
            if a.gdb and gdb:
                g = subprocess.run([gdb, "-q", "-batch", "-ex", "run", "-ex", "bt 40", "-ex", "info sharedlibrary",
                                    "--args", *cmd], capture_output=True, text=True, env=env, timeout=300)
                print("    gdb: " + "\n    ".join(g.stdout.strip().splitlines()[-120:]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
