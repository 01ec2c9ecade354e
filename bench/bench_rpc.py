"""A model split across this machine's CPU and two RPC workers: Strata against llama-server `--rpc`, same split.

    bench/build_llama_server.sh          # once: llama-server from the llama.cpp that llama-cpp-python vendors
    .venv/bin/python bench/bench_rpc.py [--threads N] [--reps 5] [--num-gpu 20] [--model PATH]

Four `strata worker`s (llama.cpp's own RPC server over the CPU backend, --threads N) on loopback ports, two for
each engine: a worker serves one client at a time, so the two split engines cannot share them, and with a pair
each both stay loaded and are measured alternately. The split is the planner's Layout for num_gpu=N and
tensor_split=1,1 (blocks 0.. on the CPU, the rest over the two workers, the output layer on the second);
llama-server gets exactly that: -ngl = the Layout's n_gpu_layers, -ts = its tensor_split, --rpc in the same
order. For reference both engines also run the model locally on the CPU (same threads, same context).
Every engine has 1 slot of 2048 tokens, batch 512, f16 KV, flash attention auto; llama-server without prompt
caching. Timed from the client while streaming, medians of --reps alternating repetitions:
- prompt tok/s    a ~500-token prompt, 1 token generated: prompt tokens / time to first token
- gen tok/s       128 tokens greedy ignoring EOS: (tokens - 1) / (last token - first token)
Ratio = Strata / llama-server for the same placement (goal for the split: >= 0.95).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import bench_engine  # noqa: E402  (the llama-server driver and prompts, shared with the engine benchmark)
from rpc_util import start_workers  # noqa: E402  (real `strata worker` processes on loopback)

NUM_CTX, N_BATCH, N_GEN = 2048, 512, 128
bench_engine.NUM_CTX, bench_engine.N_PAR, bench_engine.N_BATCH = NUM_CTX, 1, N_BATCH
if not bench_engine.SERVER.exists():         # the build script stops before copying it when rpc-server fails
    bench_engine.SERVER = ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server"


class StrataEngine(bench_engine.StrataEngine):
    def __init__(self, name: str, layout, threads: int):
        from app.engine.client import RunnerClient

        self.name = name
        self.client = RunnerClient(layout, n_threads=threads, model_name=name)
        self._n = 0


class ServerEngine(bench_engine.ServerEngine):
    def __init__(self, name: str, model: str, threads: int, split=None):
        super().__init__(model, threads)
        self.name = name
        if split is not None:
            endpoints, ngl, ts = split
            self.cmd += ["--rpc", ",".join(endpoints), "-ngl", str(ngl), "-ts", ",".join(f"{x:g}" for x in ts)]
        else:
            self.cmd += ["-ngl", "0"]


def split_layout(model: str, endpoints: list[str], num_gpu: int, threads: int):
    """The planner's Layout over `endpoints` (discovered through STRATA_RPC, as the service does)."""
    from app.discovery import discover
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.options import plan_layout, plan_options

    os.environ["STRATA_RPC"] = ",".join(endpoints)
    info = read_model_info(model)
    inv = discover()
    if len(inv.remote) != len(endpoints):
        sys.exit(f"workers not discovered: {inv.notes}")
    opts = plan_options({"num_gpu": num_gpu, "tensor_split": (1.0, 1.0), "num_batch": N_BATCH,
                         "num_ubatch": N_BATCH}, num_ctx_default=NUM_CTX, num_parallel=1,
                        n_ctx_train=info.context_length)
    return plan_layout(info, inv, opts), info


async def measure(engines, reps: int):
    results = {e.name: [] for e in engines}
    for e in engines:                                   # warm-up (page cache, thread pools, worker tensor cache)
        await e.stream("Hello", 8)
    for rep in range(reps):
        order = engines[rep % len(engines):] + engines[:rep % len(engines)]     # rotate who goes first
        row = {e.name: {} for e in engines}
        for metric in (bench_engine.m_prompt, m_gen):
            for e in order:
                row[e.name].update(await metric(e, rep))
        for e in engines:
            results[e.name].append(row[e.name])
    return results


async def m_gen(engine, rep):
    t0, times, _ = await engine.stream(f"Once upon a time ({rep})", N_GEN)
    return {"gen tok/s": (len(times) - 1) / (times[-1] - times[0])}


async def main(args):
    from app.engine.client import RunnerClient  # noqa: F401  (fail early if the app is not importable)

    model = args.model
    if model is None:
        from app.engine.gguf.builtin_model import builtin_model_path

        model = str(builtin_model_path())
    if not bench_engine.SERVER.exists():
        sys.exit(f"{bench_engine.SERVER} is missing: run bench/build_llama_server.sh first")
    home = Path(tempfile.mkdtemp(prefix="strata-bench-rpc-"))
    workers = start_workers(home, 4, threads=args.threads)
    try:
        eps = [w.endpoint for w in workers]
        layout, info = split_layout(model, eps[:2], args.num_gpu, args.threads)
        local = bench_engine.cpu_layout(model, info.n_layer)
        engines = [StrataEngine("strata local", local, args.threads),
                   ServerEngine("llama-server local", model, args.threads),
                   StrataEngine("strata split", layout, args.threads),
                   ServerEngine("llama-server split", model, args.threads,
                                (eps[2:], layout.n_gpu_layers, layout.tensor_split))]
        for e in engines:
            await e.start()
        try:
            results = await measure(engines, args.reps)
        finally:
            for e in engines:
                await e.stop()
    finally:
        for w in workers:
            w.stop()
        shutil.rmtree(home, ignore_errors=True)
    report(model, layout, args, results)


def report(model, layout, args, results):
    keys = ("prompt tok/s", "gen tok/s")
    med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in results.items()}
    where = ", ".join(f"{d.device_id} blocks {min(d.layers)}-{max(d.layers)}" for d in layout.devices if d.layers)
    print(f"\nmodel {Path(model).name}, threads {args.threads} (runner, llama-server and each worker), 1 slot x "
          f"{NUM_CTX} ctx, batch {N_BATCH}, {args.reps} rotating reps (medians), prompt "
          f"{results['strata local'][0].get('prompt tokens', '-')} tokens, gen {N_GEN} tokens greedy")
    print(f"split: -ngl {layout.n_gpu_layers} -ts {','.join(f'{x:g}' for x in layout.tensor_split)}: {where}"
          f" + output; token embedding on the CPU\n")
    print("| metric | placement | Strata | llama-server | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for k in keys:
        for place in ("local", "split"):
            s, ls = med[f"strata {place}"][k], med[f"llama-server {place}"][k]
            print(f"| {k} | {place} | {s:.1f} | {ls:.1f} | {s / ls:.3f} |")
    for k in keys:
        print(f"split / local, {k}: Strata {med['strata split'][k] / med['strata local'][k]:.3f}, llama-server "
              f"{med['llama-server split'][k] / med['llama-server local'][k]:.3f}")
    if args.reps_table:
        for k in keys:
            print(f"{k} per rep: " + "; ".join(f"{n} " + "/".join(f"{r[k]:.1f}" for r in rs)
                                               for n, rs in results.items()))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the built-in SmolLM2)")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--num-gpu", type=int, default=20, help="blocks (+ output) on the workers, llama.cpp's -ngl")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--reps-table", action="store_true", help="also print every repetition's value")
    t0 = time.perf_counter()
    asyncio.run(main(ap.parse_args()))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
