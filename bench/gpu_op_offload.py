"""op_offload on and off for partially offloaded models, with llama.cpp's own llama-bench.

Strata plans each model under a VRAM budget (the real GPU, its free memory cut to budget + margin), the Layout is
turned into llama-bench's arguments (n_gpu_layers, tensor split, the same tensor_buft_overrides), and llama-bench
measures prompt processing at several batch sizes and generation, with op_offload on (-nopo 0) and off (-nopo 1):

    python bench/gpu_op_offload.py --bench PATH/llama-bench MODEL:BUDGET_GIB [MODEL:BUDGET_GIB ...] [--json OUT]
                                   [--prompts 32,64,128,512] [--n-gen 0] [--min-batch 64] [--reps 3]

--min-batch runs op_offload on again with each GGML_OP_OFFLOAD_MIN_BATCH value; the summary then says which value
won at each prompt size and whether it is the one Strata's plan sets (Layout.op_offload_min_batch).

op_offload lets the CUDA backend run an op whose weights live in system RAM on the GPU (copying the weights over
PCIe) when the op's batch is at least GGML_OP_OFFLOAD_MIN_BATCH (default 32) tokens; below that it stays on the CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS = (1, 32, 64, 128, 256, 512, 2048)
N_GEN = 128


def plan_under(model: str, budget: int, n_ctx: int):
    from app.discovery import discover
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.dryrun import plan_measured
    from app.engine.layout.types import PlanOptions

    info = read_model_info(model)
    inv = discover()
    gpu = inv.gpus[0]
    opts = PlanOptions(num_ctx=n_ctx, num_parallel=1)
    cut = dataclasses.replace(inv, devices=tuple(
        dataclasses.replace(d, free=min(d.free, budget + opts.margin)) if d.id == gpu.id else d for d in inv.devices))
    return info, plan_measured(info, cut, opts)


def bench_args(layout) -> list[str]:
    """llama-bench arguments realising `layout` exactly (as llama_params.model_params does for the engine)."""
    args = ["-ngl", str(layout.n_gpu_layers)]
    if layout.tensor_split:
        args += ["-ts", "/".join(f"{x:g}" for x in layout.tensor_split)]
    if layout.tensor_buft_overrides:
        args += ["-ot", ";".join(f"{pat}={dev}" for pat, dev in layout.tensor_buft_overrides)]
    return args


def run_bench(bench: str, model: str, layout, threads: int, reps: int, env_extra: dict | None = None,
              prompts=PROMPTS, n_gen: int = N_GEN, nopo: str = "0,1") -> list[dict]:
    cmd = [bench, "-m", model, "-t", str(threads), "-b", str(layout.n_batch), "-ub", str(layout.n_ubatch),
           "-fa", "auto", "-p", ",".join(map(str, prompts)), "-n", str(n_gen), "-nopo", nopo, "-r", str(reps),
           "-o", "json", *bench_args(layout)]
    print("$", " ".join(cmd), flush=True)
    env = {**os.environ, **(env_extra or {})}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def table(name: str, results: list[dict]) -> str:
    by = {}
    for r in results:
        key = ("gen", r["n_gen"]) if r["n_gen"] else ("prompt", r["n_prompt"])
        by.setdefault(key, {})[bool(r["no_op_offload"])] = r
    out = [f"\n{name}", "| test | op_offload on tok/s | off tok/s | on / off |", "| --- | ---: | ---: | ---: |"]
    for key in sorted(by, key=lambda k: (k[0] == "gen", k[1])):
        on, off = by[key].get(False), by[key].get(True)
        if not on or not off:
            continue
        label = f"prompt {key[1]}" if key[0] == "prompt" else f"gen {key[1]}"
        out.append(f"| {label} | {on['avg_ts']:.1f} ± {on['stddev_ts']:.1f} | {off['avg_ts']:.1f} ± "
                   f"{off['stddev_ts']:.1f} | {on['avg_ts'] / off['avg_ts']:.2f} |")
    return "\n".join(out)


def by_prompt(results: list[dict], off: bool) -> dict[int, float]:
    return {r["n_prompt"]: r["avg_ts"] for r in results if not r["n_gen"] and bool(r["no_op_offload"]) == off}


def verdict(entry: dict, planned: int) -> str:
    """Which minimum batch was fastest at each prompt size (op_offload off counted too), against the plan's."""
    base = entry["results"]
    cols = {"off": by_prompt(base, True), "32 (default)": by_prompt(base, False)}
    for mb, res in entry["min_batch"].items():
        cols[mb] = by_prompt(res, False)
    lines = [f"op_offload min batch: plan sets {planned or 'nothing (llama.cpp default 32)'}",
             "| prompt | " + " | ".join(f"{k} tok/s" for k in cols) + " | best |",
             "| ---: |" + " ---: |" * (len(cols) + 1)]
    for n in sorted(cols["off"]):
        vals = {k: v.get(n) for k, v in cols.items()}
        best = max((k for k in vals if vals[k]), key=lambda k: vals[k])
        lines.append(f"| {n} | " + " | ".join(f"{vals[k]:.1f}" if vals[k] else "-" for k in cols) + f" | {best} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="MODEL.gguf:BUDGET_GIB")
    ap.add_argument("--bench", required=True)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--min-batch", default="", help="also run op_offload on with these GGML_OP_OFFLOAD_MIN_BATCH "
                                                   "values (comma-separated)")
    ap.add_argument("--prompts", default=",".join(map(str, PROMPTS)), help="prompt sizes for llama-bench -p")
    ap.add_argument("--n-gen", type=int, default=N_GEN, help="generated tokens for llama-bench -n (0: none)")
    ap.add_argument("--json")
    a = ap.parse_args()
    prompts = [int(x) for x in a.prompts.split(",") if x]
    everything = []
    for spec in a.models:
        model, budget_gib = spec.rsplit(":", 1)
        info, lay = plan_under(model, int(float(budget_gib) * 2 ** 30), a.ctx)
        cpu_blocks = [i for i, d in enumerate(lay.layer_device) if d == "CPU"]
        cpu_exp = [i for i, d in enumerate(lay.expert_device) if d == "CPU"]
        desc = (f"{Path(model).name} under {budget_gib} GiB: ngl {lay.n_gpu_layers}, {len(cpu_blocks)} of "
                f"{info.n_layer} blocks on the CPU, experts of {len(cpu_exp)} blocks on the CPU, overrides "
                f"{lay.tensor_buft_overrides}; planner op_offload={lay.op_offload}, "
                f"op_offload_min_batch={lay.op_offload_min_batch}")
        print(desc, flush=True)
        res = run_bench(a.bench, model, lay, a.threads, a.reps, prompts=prompts, n_gen=a.n_gen)
        print(table(desc, res), flush=True)
        entry = {"model": model, "budget_gib": float(budget_gib), "desc": desc, "layout": lay.to_dict(),
                 "results": res, "min_batch": {}}
        if a.json:
            Path(a.json).write_text(json.dumps(everything + [entry], indent=1))
        for mb in [m for m in a.min_batch.split(",") if m]:
            r2 = run_bench(a.bench, model, lay, a.threads, a.reps, {"GGML_OP_OFFLOAD_MIN_BATCH": mb},
                           prompts=prompts, n_gen=a.n_gen, nopo="0")
            entry["min_batch"][mb] = r2
            print(f"\n{desc} | GGML_OP_OFFLOAD_MIN_BATCH={mb}, op_offload on: "
                  + ", ".join(f"{'gen' if r['n_gen'] else 'prompt'} {r['n_gen'] or r['n_prompt']}: "
                              f"{r['avg_ts']:.1f} ± {r['stddev_ts']:.1f}" for r in r2), flush=True)
            if a.json:
                Path(a.json).write_text(json.dumps(everything + [entry], indent=1))
        print("\n" + verdict(entry, lay.op_offload_min_batch), flush=True)
        everything.append(entry)
        if a.json:
            Path(a.json).write_text(json.dumps(everything, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
