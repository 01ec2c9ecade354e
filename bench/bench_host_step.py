"""Host time per step on the runner's context thread, phase by phase, with async batch preparation off and on.

    .venv/bin/python bench/bench_host_step.py [--threads 1] [--reps 3] [--tokens 128] [--streams 1,4,16]
                                              [--models smollm2,qwen] [--variants off,auto] [--temperature 0]

Real runner processes (RunnerClient: admission, the output thread and the step loop as the service runs them), one
per variant of `RunnerSettings.async_prep` ("off": the next step's host work after the sampled tokens, as before
async batch preparation; "auto": where runner/step/step_prepare.py puts it; "shadow"/"helper": forced), loaded side by
side and otherwise identical, measured in turn (the order reversed every repetition). One measurement: `streams`
greedy generations of --tokens tokens at once (ignore_eos, raw prompts that differ from their first word, so no
prompt cache helps), the runner's `Stats.host_phases` read before and after (runner/step/step_clock.py names the
phases). The table gives microseconds per batch step for each phase: the median over repetitions and, in
brackets, the range. "host" is the context thread's time outside llama_decode and llama_synchronize (the
sampler's wait for the device); "helper" is host work a helper thread did while the context thread was inside
llama_decode (hidden on any build); "shadow" is the work the context thread did after llama_decode returned and
before the first synchronizing call (hidden on a GPU build, where llama_decode returns before the device has
computed; not on a CPU build, where it has computed by then). "all" = host + helper; "hidden" = helper (+ shadow
with --gpu), its share is of "all". "host_cpu": the context thread's CPU time per step outside llama_decode (the
host phases without the time spent waiting for a CPU or for the GIL: the steadier figure on a busy machine). tok/s: the streams' tokens over the wall time of the measurement, through the
runner's pipe (no HTTP). The texts of every variant are compared (greedy, speculation off by default: the same
batches give the same tokens; requests that join a different step in two runners can change a near-tie's pick on
models whose CPU kernels depend on the batch size, which `--variants off,off:b` shows without any change).
The machine's load (/proc/loadavg) is printed before and after: on a shared machine, compare the two columns of
one run, never numbers from different runs.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

from app.engine import protocol as P  # noqa: E402
from app.engine.client import RunnerClient  # noqa: E402
from app.engine.runner.step.step_clock import HOST_PHASES  # noqa: E402
from app.engine.runner_settings import RunnerSettings  # noqa: E402
from engine_util import cpu_layout  # noqa: E402

WORDS = ["quiet", "wide", "cold", "slow", "bright", "deep", "long", "green", "clear", "grey", "warm", "dark",
         "soft", "loud", "thin", "old", "new", "high"]
SHOWN = HOST_PHASES + ("helper",)


def models(names: list[str]) -> list[tuple[str, Path]]:
    out = []
    for name in names:
        if Path(name).is_file():
            out.append((Path(name).stem, Path(name)))
        elif name == "smollm2":
            from app.engine.gguf.builtin_model import builtin_model_path
            out.append(("SmolLM2-135M", Path(builtin_model_path())))
        elif name == "qwen":
            import model_cache
            p = model_cache.cached(model_cache.QWEN_CODER.name)
            if p is None:
                print(f"# {model_cache.QWEN_CODER.file} not in {model_cache.cache_dir()}: skipped", flush=True)
                continue
            out.append(("Qwen2.5-Coder-0.5B", Path(p)))
        else:
            print(f"# {name}: not a file nor a known model: skipped", flush=True)
    return out


def layout(path: Path, n_parallel: int, gpu: bool):
    """512 tokens per slot, batch 512; on the CPU, or (--gpu) as the planner places it on this machine's devices
    (everything on the GPU for these small models)."""
    if not gpu:
        return cpu_layout(path, num_ctx=512, num_parallel=n_parallel, n_batch=512)
    from app.discovery import discover
    from app.engine.gguf.model_info import read_model_info
    from app.engine.layout.types import PlanOptions
    from app.engine.planner.search import plan
    lay = plan(read_model_info(str(path)), discover(), PlanOptions(num_ctx=512, num_parallel=n_parallel))
    print(f"# layout: {lay.n_gpu_layers} layers on {lay.gpu_devices}; " + "; ".join(lay.reasons), flush=True)
    return lay


def prompt(rep: int, i: int) -> str:
    return (f"{WORDS[(rep * 7 + i) % len(WORDS)]} {rep}.{i}: Write a short story about a river that flows past "
            f"an old mill, and the people who live beside it.")


async def measure(client: RunnerClient, streams: int, n_tokens: int, rep: int, gpu: bool = False,
                  temperature: float = 0.0) -> dict:
    before = (await client.stats()).host_phases
    t0 = time.perf_counter()

    async def one(i: int) -> tuple[int, list[str]]:
        req = P.GenerateRequest(id=f"b{rep}-{streams}-{i}-{time.monotonic_ns()}", prompt=prompt(rep, i), raw=True,
                                num_predict=n_tokens, ignore_eos=True,
                                sampling=P.SamplingParams(temperature=temperature, repeat_penalty=1.0, top_k=40,
                                                          seed=1000 * max(rep, 0) + i))
        n, text = 0, []
        async for ev in client.generate(req):
            if isinstance(ev, P.TokenEvent):
                n += ev.n_tokens
                text.append(ev.text)
        return n, text

    done = await asyncio.gather(*(one(i) for i in range(streams)))
    wall = time.perf_counter() - t0
    after = (await client.stats()).host_phases
    d = {k: after[k] - before.get(k, 0) for k in after}
    steps = max(1, d["steps"])
    row = {k: 1e6 * d[k] / steps for k in after if k not in ("steps", "rows")}
    row.setdefault("helper", 0.0)
    row["host"] = sum(row[k] for k in HOST_PHASES)
    row["hidden"] = row["helper"] + (row["shadow"] if gpu else 0.0)
    row["all"] = row["host"] + row["helper"]
    row["tok_s"] = sum(n for n, _ in done) / wall
    row["steps"] = d["steps"]
    row["texts"] = ["".join(t) for _, t in done]
    return row


def fmt(xs: list[float], digits: int = 0) -> str:
    if not xs:
        return "-"
    med = statistics.median(xs)
    return f"{med:.{digits}f} [{min(xs):.{digits}f}-{max(xs):.{digits}f}]"


async def run_model(name: str, path: Path, args) -> None:
    variants = args.variants
    clients = {}
    for v in variants:
        c = RunnerClient(layout(path, max(args.streams), args.gpu), n_threads=args.threads,
                         model_name=f"{name}-{v}",
                         settings=RunnerSettings(async_prep=v.split(":")[0], speculative=args.speculative))
        await c.start()
        clients[v] = c
    try:
        rows: dict[tuple[str, int], list[dict]] = {}
        mismatch: dict[str, int] = {}
        for c in clients.values():                         # warm: first steps, allocations, page cache
            await measure(c, max(args.streams), 8, -1)
        for rep in range(args.reps):
            for streams in args.streams:
                order = variants if rep % 2 == 0 else variants[::-1]
                texts = {}
                for v in order:
                    r = await measure(clients[v], streams, args.tokens, rep, args.gpu, args.temperature)
                    rows.setdefault((v, streams), []).append(r)
                    print(f"# rep {rep} {streams} streams {v}: host {r['host']:.0f} us/step (cpu {r['host_cpu']:.0f}), "
                          f"helper {r['helper']:.0f}, "
                          f"decode {r['decode']:.0f}, {r['tok_s']:.2f} tok/s, load {load()}", flush=True)
                    texts[v] = r["texts"]
                for v in variants[1:]:
                    if texts[v] != texts[variants[0]]:
                        mismatch[v] = mismatch.get(v, 0) + 1
        print(f"\n## {name} ({path.name}), {args.threads} thread(s), {args.tokens} tokens per stream, "
              f"{args.reps} repetitions; load {load()}")
        head = ["phase (us/step)"] + [f"{s} stream{'s' if s > 1 else ''} {v}" for s in args.streams for v in variants]
        print("| " + " | ".join(head) + " |")
        print("| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |")
        for key, digits in [(k, 1) for k in SHOWN] + [("host", 1), ("host_cpu", 1), ("all", 1), ("hidden", 1),
                                                      ("decode", 0), ("sync", 1), ("tok_s", 2)]:
            cells = [fmt([r[key] for r in rows[(v, s)]], digits) for s in args.streams for v in variants]
            print(f"| {key} | " + " | ".join(cells) + " |")
        for v in variants:
            shares = [f"{s}: {fmt([100 * r['hidden'] / r['all'] for r in rows[(v, s)] if r['all']], 0)}%"
                      for s in args.streams]
            print(f"hidden share of all host work, {v}: " + ", ".join(shares))
        for v in variants[1:]:
            n = len(args.streams) * args.reps
            print(f"greedy texts of {v} identical to {variants[0]}'s: {n - mismatch.get(v, 0)} of {n} measurements")
    finally:
        for c in clients.values():
            await c.close()


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


async def main(args) -> None:
    print(f"# bench_host_step: cpus {os.cpu_count()}, load before {load()}")
    for name, path in models(args.models):
        await run_model(name, path, args)
    print(f"\n# load after {load()}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0, help="sampled with top-k 40 and a seed per request "
                    "above 0 (the sampler chain's host cost); greedy (the argmax) at 0")
    ap.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    ap.add_argument("--models", type=lambda s: s.split(","), default=["smollm2", "qwen"])
    ap.add_argument("--variants", type=lambda s: s.split(","), default=["off", "auto"],
                    help="async_prep settings to compare; NAME:x runs another runner of the same setting (off,off:b "
                         "shows what varies without any change)")
    ap.add_argument("--speculative", default="off", help="RunnerSettings.speculative (default off: the auto "
                    "policy drafts by measured step times, so two runners may batch differently)")
    ap.add_argument("--gpu", action="store_true", help="plan for this machine's GPU (a CUDA build of llama.cpp) and "
                    "count the shadow phase as hidden")
    asyncio.run(main(ap.parse_args()))
