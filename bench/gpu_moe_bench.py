"""A MoE model under a VRAM budget that forces partial offload: Strata's automatic plan against llama-server's
`--fit` (same budget through `--fit-target`), `--cpu-moe`, and the best `--n-cpu-moe` of a sweep.
Run on a GPU machine with a llama-server built from the same llama.cpp as the engine's libllama:

    python bench/gpu_moe_bench.py MODEL.gguf --budget-gib 3 --server PATH/llama-server [--reps 3] [--json OUT]

The budget: Strata plans for the real GPU with its free memory cut to budget + the planner's margin (so the plan
may use exactly `budget`); `--fit-target` gets (NVML free - budget) MiB, the margin fit leaves free, so fit may use
exactly `budget` too. The `--cpu-moe` / `--n-cpu-moe N` servers are held to the same budget: a configuration whose
CUDA0 buffers (model + KV + compute, from its own log) exceed it is reported and not counted as a sweep winner.
One engine at a time (nothing else on the GPU or the CPUs), page cache warm, the same threads, n_ctx, batch,
flash attention auto and f16 KV everywhere. Measured from the client side while streaming, as bench_engine.py:
- prompt tok/s: a 512-token prompt (a different first word each repetition), 1 token generated: tokens / TTFT
- gen tok/s: 128 tokens ignoring EOS: (tokens - 1) / (last token - first token). Sampled at temperature 1 with a
  fixed seed (top_k 0, top_p 1, min_p 0, no penalties) in both engines: greedy decoding of a random-weight model
  repeats one byte token whose text is never valid UTF-8, so Strata held it back and sent all 128 at the end
- engine-side figures too: Strata's DoneEvent (prompt_seconds, generation_seconds), llama-server's `timings`
- load s: from nothing to ready to answer. llama-server: process start to healthy (its --fit search included);
  Strata: planning (plan + no_alloc dry run, cold) plus the runner's start, as a user waits for both
- GPU MiB: NVML's used memory on the device with the engine loaded and after its runs, minus before (the CUDA
  context and pools included, the same way for every engine); the budget check uses the buffers the engine
  reports (Strata: the runner's actual; llama-server: its `-lv 4` buffer lines)
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = 2 ** 20
N_GEN, N_PROMPT, N_BATCH = 128, 512, 512
SEED = 1234
WORDS = ["quiet", "wide", "cold", "slow", "bright", "deep", "long", "green", "clear", "grey"]


def prompt_text(rep: int, n_words: int) -> str:
    body = " ".join(f"The {WORDS[k % 10]} river flows past mill {k}." for k in range(n_words))
    return f"Run {rep}. {body}"


class Strata:
    def __init__(self, layout, threads: int):
        from app.engine.client import RunnerClient

        self.name = "strata"
        self.client = RunnerClient(layout, n_threads=threads, model_name="bench")
        self.load_s = 0.0
        self.gpu_used = 0
        self.loaded = None

    async def start(self):
        t0 = time.perf_counter()
        self.loaded = await self.client.start()
        self.load_s = time.perf_counter() - t0
        self.gpu_used = sum(sum(k.values()) for d, k in self.loaded.actual.items() if d != "CPU")

    async def stream(self, prompt: str, n_predict: int):
        from app.engine import protocol as P

        req = P.GenerateRequest(id=f"b{time.monotonic_ns()}", prompt=prompt, raw=True, num_predict=n_predict,
                                ignore_eos=True,
                                sampling=P.SamplingParams(temperature=1.0, repeat_penalty=1.0, top_k=0, top_p=1.0,
                                                          min_p=0.0, seed=SEED))
        t0 = time.perf_counter()
        times, n_prompt, eng = [], 0, {}
        async for ev in self.client.generate(req):
            now = time.perf_counter()
            if isinstance(ev, P.DoneEvent):
                n_prompt = ev.prompt_tokens
                eng = {"prompt_tps": ev.prompt_tokens / ev.prompt_seconds if ev.prompt_seconds else 0.0,
                       "gen_tps": (ev.completion_tokens - 1) / ev.generation_seconds if ev.generation_seconds else 0.0}
            elif ev.n_tokens:
                times.extend([now] * ev.n_tokens)
        return t0, times, n_prompt, eng

    async def stop(self):
        await self.client.close()


class Server:
    def __init__(self, name: str, server: str, model: str, threads: int, n_ctx: int, extra: list[str], log: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.name = name
        self.cmd = [server, "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(n_ctx), "-np", "1",
                    "-b", str(N_BATCH), "-ub", str(N_BATCH), "-fa", "auto", "--no-cache-prompt", "-cram", "0",
                    "--no-webui", "-lv", "4", "--host", "127.0.0.1", "--port", str(self.port), *extra]
        self.log = log
        self.proc = None
        self.session = None
        self.load_s = 0.0
        self.gpu_used = 0
        self.actual = {}

    async def start(self):
        import aiohttp

        from app.ggml.alloc_report import parse_buffer_lines

        t0 = time.perf_counter()
        self._logf = open(self.log, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self._logf, stderr=subprocess.STDOUT)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900),
                                             connector=aiohttp.TCPConnector(force_close=True))
        for _ in range(6000):
            try:
                async with self.session.get(f"http://127.0.0.1:{self.port}/health") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {' '.join(self.cmd)}")
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError("llama-server did not become healthy")
        self.load_s = time.perf_counter() - t0
        self._logf.flush()
        lines = self.log.read_text(errors="replace").splitlines()
        self.actual = parse_buffer_lines(lines, ["CUDA0"])
        self.gpu_used = sum(self.actual.get("CUDA0", {}).values())

    async def stream(self, prompt: str, n_predict: int):
        body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "temperature": 1.0, "top_k": 0,
                "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "seed": SEED, "stream": True,
                "cache_prompt": False}
        t0 = time.perf_counter()
        times, n_prompt, eng = [], 0, {}
        async with self.session.post(f"http://127.0.0.1:{self.port}/completion", json=body) as r:
            r.raise_for_status()
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                now = time.perf_counter()
                d = json.loads(line[6:])
                if d.get("stop"):
                    tm = d.get("timings", {})
                    n_prompt = tm.get("prompt_n", 0) or d.get("tokens_evaluated", 0)
                    eng = {"prompt_tps": tm.get("prompt_per_second", 0.0), "gen_tps": tm.get("predicted_per_second", 0.0)}
                    if d.get("content"):
                        times.append(now)
                    break
                times.append(now)
        return t0, times, n_prompt, eng

    async def stop(self):
        if self.session:
            await self.session.close()
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._logf.close()


async def measure(engine, prompt_of, reps: int) -> dict:
    """Warm-up (a full-length prompt and a generation: the first large batch pays one-time CUDA costs), then
    `reps` x (prompt, gen); medians and every value, client-side and engine-side."""
    await engine.stream(prompt_of(0), 1)
    await engine.stream("Hello there", 16)
    pr, gen, n_prompts, epr, egen = [], [], [], [], []
    for rep in range(reps):
        t0, times, n_prompt, eng = await engine.stream(prompt_of(rep + 1), 1)
        pr.append(n_prompt / (times[0] - t0))
        n_prompts.append(n_prompt)
        epr.append(eng.get("prompt_tps", 0.0))
        t0, times, _, eng = await engine.stream(f"Once upon a time ({rep})", N_GEN)
        gen.append((len(times) - 1) / (times[-1] - times[0]) if times[-1] > times[0] else 0.0)
        egen.append(eng.get("gen_tps", 0.0))
    return {"prompt_tps": statistics.median(pr), "gen_tps": statistics.median(gen), "prompt_all": pr,
            "gen_all": gen, "prompt_tokens": n_prompts, "engine_prompt_tps": statistics.median(epr),
            "engine_gen_tps": statistics.median(egen)}


def device_used() -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used)
    finally:
        pynvml.nvmlShutdown()


async def run_engine(engine, prompt_of, reps: int, budget: int, measure_over_budget: bool = True) -> dict:
    row = {"name": engine.name}
    base = device_used()
    try:
        await engine.start()
        row.update(load_s=engine.load_s, gpu_used=engine.gpu_used, within_budget=engine.gpu_used <= budget,
                   nvml_loaded=device_used() - base)
        if engine.gpu_used <= budget or measure_over_budget:
            row.update(await measure(engine, prompt_of, reps))
            row["nvml_after"] = device_used() - base
    except Exception as e:  # a configuration that does not load is a row, not the end of the benchmark
        row["error"] = f"{type(e).__name__}: {e}"
    finally:
        try:
            await engine.stop()
        except Exception:
            pass
    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()
                      if k not in ("prompt_all", "gen_all")}), flush=True)
    return row


async def calibrate(strata: Strata):
    """A function rep -> prompt text of exactly N_PROMPT tokens (BOS included) for this tokenizer: whole sentences,
    then single-token filler words."""
    async def count(text):
        return len(await strata.client.tokenize(text, add_special=True))

    lo, hi = 1, 200
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if await count(prompt_text(1, mid)) <= N_PROMPT:
            lo = mid
        else:
            hi = mid - 1
    pad = 0
    while await count(prompt_text(1, lo) + " x" * (pad + 1)) <= N_PROMPT and pad < 64:
        pad += 1

    def prompt_of(rep: int) -> str:
        return prompt_text(rep, lo) + " x" * pad
    print(f"prompt: {await count(prompt_of(1))} tokens", flush=True)
    return prompt_of


def plan_strata(model: str, budget: int, n_ctx: int):
    from app.discovery import discover
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.dryrun import plan_measured
    from app.engine.layout.types import PlanOptions

    info = read_model_info(model)
    inv = discover()
    gpu = inv.gpus[0]
    opts = PlanOptions(num_ctx=n_ctx, num_parallel=1, num_batch=N_BATCH, num_ubatch=N_BATCH)
    cut = dataclasses.replace(inv, devices=tuple(
        dataclasses.replace(d, free=min(d.free, budget + opts.margin)) if d.id == gpu.id else d for d in inv.devices))
    t0 = time.perf_counter()
    lay = plan_measured(info, cut, opts)
    return info, gpu, lay, time.perf_counter() - t0


async def main(a) -> int:
    budget = int(a.budget_gib * 2 ** 30)
    subprocess.run(["cat", a.model], stdout=subprocess.DEVNULL, check=True)       # page cache warm for everyone
    info, gpu, lay, plan_s = plan_strata(a.model, budget, a.ctx)
    cpu_exp = [i for i, d in enumerate(lay.expert_device) if d == "CPU"]
    m = max(cpu_exp) + 1 if cpu_exp else 0
    print(f"GPU {gpu.name} free {gpu.free / MiB:.0f} MiB; budget {budget / MiB:.0f} MiB; model {info.n_layer} layers")
    print(f"Strata plan ({plan_s:.1f} s incl. dry run): ngl {lay.n_gpu_layers}, experts of {len(cpu_exp)} blocks on "
          f"the CPU ({cpu_exp[:1]}..{cpu_exp[-1:]}), overrides {lay.tensor_buft_overrides}, op_offload "
          f"{lay.op_offload}, fits {lay.fits}", flush=True)
    logs = Path(a.logs)
    logs.mkdir(parents=True, exist_ok=True)
    strata = Strata(lay, a.threads)
    await strata.start()
    prompt_of = await calibrate(strata)
    await strata.stop()
    rows = [await run_engine(Strata(lay, a.threads), prompt_of, a.reps, budget)]
    rows[0]["plan_s"] = plan_s
    # --fit-target is the margin fit keeps below the free memory IT sees: ggml's figure, taken after its own CUDA
    # context exists (~530 MiB under NVML's on the H100). Measured from ggml's free, fit's buffers may use
    # exactly `budget`, as Strata's; from NVML's (--fit-from nvml) fit gets ~530 MiB less
    ref_free = gpu.free if a.fit_from == "nvml" else (gpu.ggml_free or gpu.free)
    margin_mib = max(0, int(ref_free // MiB - budget // MiB))
    print(f"--fit-target {margin_mib} MiB (from {a.fit_from} free {ref_free / MiB:.0f} MiB)", flush=True)

    def server(name, extra):
        return Server(name, a.server, a.model, a.threads, a.ctx, extra, logs / f"{name}.log")

    rows.append(await run_engine(server("fit", ["--fit", "on", "--fit-target", str(margin_mib)]), prompt_of,
                                 a.reps, budget))
    if not a.no_cpu_moe:
        rows.append(await run_engine(server("cpu-moe", ["--fit", "off", "-ngl", "999", "--cpu-moe"]), prompt_of,
                                     a.reps, budget))
    sweep = sorted({n for n in range(m - a.sweep, m + a.sweep + 1) if 0 <= n <= info.n_layer})
    for n in sweep:
        rows.append(await run_engine(server(f"n-cpu-moe {n}", ["--fit", "off", "-ngl", "999", "--n-cpu-moe", str(n)]),
                                     prompt_of, a.reps_sweep, budget, measure_over_budget=False))
    if a.strata_again:
        again = await run_engine(Strata(lay, a.threads), prompt_of, a.reps, budget)
        again["name"] = "strata (again)"
        rows.append(again)
    fitting = [r for r in rows if r["name"].startswith("n-cpu-moe") and r.get("within_budget") and "gen_tps" in r]
    best = max(fitting, key=lambda r: r["gen_tps"]) if fitting else None
    by = {r["name"]: r for r in rows}
    s = by["strata"]
    print(f"\n{info.path}: budget {budget / MiB:.0f} MiB, threads {a.threads}, n_ctx {a.ctx}, batch {N_BATCH}, "
          f"{a.reps} reps (medians; sweep {a.reps_sweep}), prompt {s.get('prompt_tokens')} tokens, gen {N_GEN}\n")
    print("| engine | buffers MiB | in budget | NVML MiB | load s | prompt tok/s | gen tok/s | Strata/this prompt | "
          "Strata/this gen | engine-side prompt / gen |")
    print("| --- | ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if "error" in r:
            print(f"| {r['name']} | | | | | error: {r['error'][:80]} | | | | |")
            continue
        p, g = r.get("prompt_tps"), r.get("gen_tps")
        rp = f"{s['prompt_tps'] / p:.3f}" if p and s.get("prompt_tps") else "-"
        rg = f"{s['gen_tps'] / g:.3f}" if g and s.get("gen_tps") else "-"
        nv = r.get("nvml_after", r.get("nvml_loaded", 0))
        load_s = r["load_s"] + (plan_s if r["name"].startswith("strata") else 0.0)   # like fit's own search
        print(f"| {r['name']}{' (best sweep)' if r is best else ''} | {r['gpu_used'] / MiB:.0f} | "
              f"{'yes' if r['within_budget'] else 'NO'} | {nv / MiB:.0f} | {load_s:.2f} | {p or 0:.1f} | "
              f"{g or 0:.1f} | {rp} | {rg} | {r.get('engine_prompt_tps', 0):.0f} / {r.get('engine_gen_tps', 0):.1f} |")
    print(f"\nStrata's load s includes its planning (plan + no_alloc dry run, cold cache): {plan_s:.2f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"budget": budget, "gpu": dataclasses.asdict(gpu), "threads": a.threads,
                                            "n_ctx": a.ctx, "layout": lay.to_dict(), "rows": rows,
                                            "best_sweep": best["name"] if best else None}, indent=1))
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--budget-gib", type=float, required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reps-sweep", type=int, default=2)
    ap.add_argument("--sweep", type=int, default=3, help="n-cpu-moe from (Strata's CPU expert blocks) - S to + S")
    ap.add_argument("--strata-again", action="store_true", help="measure Strata again at the end (drift check)")
    ap.add_argument("--fit-from", choices=("ggml", "nvml"), default="ggml",
                    help="free-memory figure the --fit-target margin is computed from (default ggml: what fit sees)")
    ap.add_argument("--no-cpu-moe", action="store_true", help="skip the --cpu-moe server")
    ap.add_argument("--logs", default="/tmp/strata-bench-logs")
    ap.add_argument("--json")
    raise SystemExit(asyncio.run(main(ap.parse_args())))
