"""Strata against llama-server at every thread count, through the HTTP API (or the runner client).

    .venv/bin/python bench/bench_threads.py [--reps 5] [--metrics gen,prompt,streams] [--runner] [--n-gen 128]

For each thread count 1..the CPUs, and for each engine's own default ("default": Strata without STRATA_NUM_THREADS,
llama-server without -t), both engines are started side by side and measured alternately (bench_engine.run_pair:
A/B then B/A each repetition, same model, slots, context and batch), medians reported with the ratio
Strata / llama-server. The machine's load average before and after each pair is printed with the table: on a
shared machine the numbers mean little without it.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine as B  # noqa: E402  (the bench directory is not a package)


async def pair(model: str, threads: int | None, metrics, reps: int, runner: bool, strata_env: dict[str, str]):
    strata = B.StrataEngine(model, threads) if runner else B.StrataApiEngine(model, threads)
    if hasattr(strata, "env"):
        strata.env.update(strata_env)      # e.g. GOMP_SPINCOUNT for Strata alone (llama-server keeps its default)
    load0 = os.getloadavg()[0]
    results, _ = await B.run_pair([strata, B.ServerEngine(model, threads)], metrics, reps)
    return results, (load0, os.getloadavg()[0])


async def main(args):
    model = B.builtin_or(args.model)
    if not B.SERVER.exists():
        sys.exit(f"{B.SERVER} is missing: run bench/build_llama_server.sh first")
    B.N_GEN = args.n_gen
    metrics, keys = B.chosen_metrics(args.metrics)
    counts = [int(x) for x in args.threads.split(",")] if args.threads else list(range(1, (os.cpu_count() or 1) + 1))
    strata_env = dict(kv.split("=", 1) for kv in args.strata_env)
    rows = []
    for t in counts + ([] if args.no_default else [None]):
        results, loads = await pair(model, t, metrics, args.reps, args.runner, strata_env)
        med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in results.items()}
        rows.append((t, med, loads))
        print(f"threads {t or 'default'} done (load {loads[0]:.1f} -> {loads[1]:.1f})", file=sys.stderr)
    where = "runner client" if args.runner else "HTTP API (strata serve /api/generate vs llama-server /completion)"
    if strata_env:
        where += f"; Strata with {' '.join(args.strata_env)}"
    print(f"\nmodel {Path(model).name}, {where}, {B.N_PAR} slots x {B.NUM_CTX} ctx, batch {B.N_BATCH}, "
          f"{args.reps} alternating reps (medians), gen {B.N_GEN} tokens greedy; {os.cpu_count()} CPUs\n")
    head = " | ".join(f"{k}: Strata / llama-server / ratio" for k in keys)
    print(f"| threads | {head} | load avg |")
    print("| --- |" + " --- |" * len(keys) + " --- |")
    for t, med, loads in rows:
        cells = []
        for k in keys:
            s, l = med["strata"][k], med["llama-server"][k]
            cells.append(f"{s:.1f} / {l:.1f} / {s / l:.2f}")
        print(f"| {t or 'default'} | " + " | ".join(cells) + f" | {loads[0]:.1f}-{loads[1]:.1f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the built-in SmolLM2)")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default: 1..CPUs)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-default", action="store_true", help="only the --threads counts, not each engine's default")
    ap.add_argument("--metrics", default="gen,prompt,streams")
    ap.add_argument("--n-gen", type=int, default=B.N_GEN, help="tokens per generation")
    ap.add_argument("--runner", action="store_true", help="Strata's runner client instead of its HTTP API")
    ap.add_argument("--strata-env", action="append", default=[], metavar="K=V",
                    help="an environment variable for Strata's service and runners only (repeatable)")
    asyncio.run(main(ap.parse_args()))
