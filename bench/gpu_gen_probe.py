"""Why is Strata's generation slower than llama-server's with the same MoE placement?

    python bench/gpu_gen_probe.py MODEL.gguf --budget-gib 3 --server PATH/llama-server [--threads 15,12,8]

1. raw: llama_decode of one token at a time in a bare child process (Strata's exact load/context parameters, no
   runner), on the main thread and then on a worker thread, per thread count;
2. engines: Strata's runner and llama-server (--n-cpu-moe of the same placement), 128-token generations, per
   thread count. Prints tok/s for each.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

RAW = r"""
import json, sys, threading, time
from app.ggml import cxx_runtime, llama_log
cxx_runtime.preload(); llama_log.install()
from llama_cpp import llama_cpp as L
from app.engine.layout.types import Layout
from app.engine.layout import llama_params
req = json.loads(sys.argv[1])
lay = Layout.from_dict(req["layout"])
mp, keep = llama_params.model_params(lay)
model = L.llama_model_load_from_file(lay.model_path.encode(), mp)
ctx = L.llama_init_from_model(model, llama_params.context_params(lay, n_threads=req["threads"]))
vocab = L.llama_model_get_vocab(model)
sm = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
L.llama_sampler_chain_add(sm, L.llama_sampler_init_dist(1234))
mem = L.llama_get_memory(ctx)
def gen(n):
    L.llama_memory_clear(mem, True)
    tok = (L.llama_token * 1)(1)
    L.llama_decode(ctx, L.llama_batch_get_one(tok, 1))
    t0 = time.perf_counter()
    for i in range(n):
        tok[0] = L.llama_sampler_sample(sm, ctx, -1)
        assert L.llama_decode(ctx, L.llama_batch_get_one(tok, 1)) == 0
    return n / (time.perf_counter() - t0)
def in_thread(fn):
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("v", fn())); t.start(); t.join()
    return box.get("v")
def loop():
    gen(16)
    return max(gen(128) for _ in range(2))
mode = req["mode"]
if mode == "main":                      # one OpenMP team: the main thread's
    v = loop()
elif mode == "worker":                  # one team: a worker thread's (nothing ran on main)
    v = in_thread(loop)
elif mode == "main_then_worker":        # the runner before the fix: warm-up on main, decode on a worker
    gen(1)
    v = in_thread(loop)
else:                                   # temp_then_worker: warm-up in a thread that ends, decode on another
    in_thread(lambda: gen(1))
    v = in_thread(loop)
print("RAW " + json.dumps({mode: v}), flush=True)
"""


async def engine_gen(engine, reps=3):
    from gpu_moe_bench import SEED  # noqa: F401  (same sampling as the benchmark)

    await engine.start()
    try:
        await engine.stream("Hello there", 16)
        vals, eng = [], []
        for rep in range(reps):
            t0, times, _, e = await engine.stream(f"Once upon a time ({rep})", 128)
            vals.append((len(times) - 1) / (times[-1] - times[0]) if times[-1] > times[0] else 0.0)
            eng.append(e.get("gen_tps", 0.0))
        return max(vals), max(eng)
    finally:
        await engine.stop()


async def main(a) -> int:
    import gpu_moe_bench as g

    budget = int(a.budget_gib * 2 ** 30)
    info, gpu, lay, _ = g.plan_strata(a.model, budget, 4096)
    m = max([i for i, d in enumerate(lay.expert_device) if d == "CPU"], default=-1) + 1
    print(f"layout: experts of {m} blocks on the CPU, ngl {lay.n_gpu_layers}", flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    Path(a.logs).mkdir(parents=True, exist_ok=True)
    rows = []
    active = {"OMP_WAIT_POLICY": "active"}

    def raw_run(t, extra, modes=("main", "worker", "main_then_worker", "temp_then_worker")):
        out = {}
        for mode in modes:
            p = subprocess.run([sys.executable, "-c", RAW, json.dumps({"layout": lay.to_dict(), "threads": t,
                                                                      "mode": mode})],
                               capture_output=True, text=True, env={**env, **extra}, timeout=300, cwd=str(ROOT))
            out.update(next((json.loads(ln[4:]) for ln in p.stdout.splitlines() if ln.startswith("RAW ")),
                            {mode: None, mode + "_error": p.stderr[-300:]}))
        return out

    for t in [int(x) for x in a.threads.split(",")]:
        raw = raw_run(t, {})
        raw_active = raw_run(t, active, ("main", "worker")) if a.omp_active else {}
        s_cli, s_eng = await engine_gen(g.Strata(lay, t))
        a_cli = a_eng = 0.0
        if a.omp_active:
            os.environ.update(active)                 # the runner is spawned: it inherits this environment
            try:
                a_cli, a_eng = await engine_gen(g.Strata(lay, t))
            finally:
                os.environ.pop("OMP_WAIT_POLICY", None)
        srv = g.Server(f"srv-t{t}", a.server, a.model, t, 4096, ["--fit", "off", "-ngl", "999", "--n-cpu-moe", str(m)],
                       Path(a.logs) / f"probe-t{t}.log")
        v_cli, v_eng = await engine_gen(srv)
        row = {"threads": t, "raw": raw, "raw_active": raw_active, "strata": [round(s_cli, 1), round(s_eng, 1)],
               "strata_active": [round(a_cli, 1), round(a_eng, 1)], "server": [round(v_cli, 1), round(v_eng, 1)]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| threads | raw: main | raw: worker | raw: warm-up main, then worker | raw: warm-up in an ended "
          "thread, then worker | Strata runner (client / engine) | llama-server (client / engine) |\n"
          "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        raw = r["raw"]
        f = lambda k: f"{raw[k]:.1f}" if raw.get(k) else "-"  # noqa: E731
        print(f"| {r['threads']} | {f('main')} | {f('worker')} | {f('main_then_worker')} | {f('temp_then_worker')} | "
              f"{r['strata'][0]} / {r['strata'][1]} | {r['server'][0]} / {r['server'][1]} |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--budget-gib", type=float, required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--threads", default="15,12,8")
    ap.add_argument("--logs", default="/tmp/strata-bench-logs")
    ap.add_argument("--omp-active", action="store_true", help="also with OMP_WAIT_POLICY=active")
    ap.add_argument("--json")
    raise SystemExit(asyncio.run(main(ap.parse_args())))
