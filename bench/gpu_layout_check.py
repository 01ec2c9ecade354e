"""Layout checks on a real GPU (run by hand on a GPU machine; CI has none).

1. Plans an MoE model with every expert tensor forced to the CPU (cpu_moe = n_layer) and loads it for real:
   predicted vs actual bytes per device (the overrides must really move the experts).
2. op_offload: decodes the same 512-token prompt with op_offload on and off on that layout and prints the
   prompt-processing time of each, next to what the planner decided.

    python bench/gpu_layout_check.py MODEL.gguf [--threads N]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--no-mmap", action="store_true", help="load_mode NONE (read weights, no mmap)")
    ap.add_argument("--backend-init", action="store_true", help="call llama_backend_init() first")
    a = ap.parse_args()

    import numpy as np

    from app.ggml import cxx_runtime

    cxx_runtime.preload()   # numpy is already loaded: without this a static-libstdc++ build segfaults (cxx_runtime)
    from llama_cpp import llama_cpp as L

    from app.discovery import discover
    from app.ggml import alloc_report, llama_log
    from app.engine.layout import llama_params as load_params
    from app.engine.runner.batch import NpBatch  # noqa: F401  (imported to prove the engine module loads on this build)
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.verify import compare, predicted_of

    llama_log.install()
    if a.backend_init:
        L.llama_backend_init()
    info = read_model_info(a.model)
    inv = discover()
    print("inventory:", json.dumps([(d.id, d.name, d.total, d.free) for d in inv.devices]), inv.notes)
    opts = PlanOptions(num_ctx=2048, num_parallel=1, cpu_moe=info.n_layer, num_batch=a.tokens, num_ubatch=a.tokens)
    layout = plan(info, inv, opts)
    print("plan: n_gpu_layers", layout.n_gpu_layers, "overrides", layout.tensor_buft_overrides,
          "op_offload", layout.op_offload, "fits", layout.fits)
    mp, keep = load_params.model_params(layout, load_mode=0 if a.no_mmap else None)
    with llama_log.capture_log() as lines:
        model = L.llama_model_load_from_file(a.model.encode(), mp)
    assert model, "load failed"
    rng = np.random.default_rng(0)
    toks = rng.integers(100, info.n_vocab - 1, size=a.tokens).astype(np.int32)
    tok_arr = (L.llama_token * a.tokens)(*toks.tolist())   # kept alive: the batch only points at it
    for op in (True, False, True, False):
        lay = dataclasses.replace(layout, op_offload=op)
        cp = load_params.context_params(lay, n_threads=a.threads)
        with llama_log.capture_log() as clines:
            ctx = L.llama_init_from_model(model, cp)
        assert ctx
        if op:
            row = {"predicted": predicted_of(lay), "actual": alloc_report.parse_buffer_lines(lines + clines, lay.gpu_devices)}
            for dev, c in compare(row).items():
                print(f"  {dev:<8} predicted {c['predicted']/2**20:9.2f} MiB actual {c['actual']/2**20:9.2f} MiB "
                      f"err {c['total_err']:+.2%} kinds " + " ".join(f"{k}:{v:+.2%}" for k, v in c['kind_err'].items()))
        batch = L.llama_batch_get_one(tok_arr, a.tokens)
        L.llama_decode(ctx, batch)  # warm-up
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        t0 = time.perf_counter()
        for _ in range(3):
            rc = L.llama_decode(ctx, L.llama_batch_get_one(tok_arr, a.tokens))
            assert rc == 0, rc
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
        dt = (time.perf_counter() - t0) / 3
        print(f"op_offload={op!s:<5} prompt {a.tokens} tok: {dt*1000:8.1f} ms  ({a.tokens/dt:8.0f} tok/s)")
        L.llama_free(ctx)
    L.llama_model_free(model)
    del keep
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
