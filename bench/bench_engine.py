"""Strata against llama.cpp's llama-server on the same model, threads and context, both through their HTTP API.

    bench/build_llama_server.sh          # once: builds llama-server from llama-cpp-python 0.3.36's vendored llama.cpp
    .venv/bin/python bench/bench_engine.py [--threads N] [--reps 3] [--model PATH] [--metrics prompt] [--runner]

Both engines are loaded side by side and measured alternately (A/B then B/A each repetition), each with the same
n_threads, 4 slots of 2048 tokens (n_ctx 8192, per-sequence KV streams), n_batch = n_ubatch = 512, flash
attention auto, f16 KV. Like with like by default: Strata is `strata serve` answering Ollama's /api/generate,
llama-server answers its /completion, both over HTTP on loopback, and both keep their prompt cache on (each
engine's default); every prompt starts with the repetition's number, so neither can reuse an earlier prompt's
prefix. `--runner` measures Strata's engine through RunnerClient (a pipe, no HTTP) instead: a runner-level
figure, labelled so in the output, not a like-for-like comparison. Both are timed from the client side while
streaming, so both include their own API overhead:
- gen tok/s       single stream, 128 tokens greedy ignoring EOS: (tokens - 1) / (last token - first token)
- prompt tok/s    a ~500-token prompt, 1 token generated: prompt tokens / time to first token
- 4-stream tok/s  four 128-token greedy streams at once: all tokens / wall time
- TTFT ms         a short chat-sized prompt (~20 tokens): time to the first token
The table shows medians and the ratio Strata / llama-server (higher is better for Strata, except TTFT where
lower is better: the ratio is inverted there so that >= 1.0 always means "Strata at least as good").
"""
from __future__ import annotations

import argparse
import asyncio
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

SERVER = next((p for p in (Path(os.environ.get("STRATA_BENCH_LLAMA_SERVER", "/nonexistent")),
                           ROOT / "bench" / "_build" / "llama-server",
                           ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server") if p.exists()),
              ROOT / "bench" / "_build" / "llama-server")
N_GEN = 128
NUM_CTX, N_PAR, N_BATCH = 2048, 4, 512


def long_prompt(i: int) -> str:
    # ~500 tokens; a different first word each time so no prefix cache can help either engine
    body = " ".join(f"The {w} river flows past the old mill number {k}." for k, w in enumerate(
        ["quiet", "wide", "cold", "slow", "bright", "deep", "long", "green", "clear", "grey"] * 5))
    return f"Run {i}. {body}"


SHORT = "Write one sentence about the sea, please, in plain words for a child."


def unique(rep: int, text: str) -> str:
    """The repetition's number first: no prompt shares more than a token or two with an earlier one, so the two
    engines' prompt caches (both on) help neither."""
    return f"({rep}) {text}"


def cpu_layout(path: str, n_layer: int):
    from app.engine.layout.types import DevicePlan, Layout, PlanOptions

    opts = PlanOptions(num_ctx=NUM_CTX, num_parallel=N_PAR, num_batch=N_BATCH, num_ubatch=N_BATCH, num_gpu=0)
    cpu = DevicePlan("CPU", "CPU", tuple(range(n_layer)), (), {}, 0, 0)
    return Layout(str(path), opts, (cpu,), ("CPU",) * n_layer, ("",) * n_layer, 0, 1, 0, (), (), (), True,
                  NUM_CTX * N_PAR, N_PAR, N_BATCH, N_BATCH, "f16", "f16", None, True)


class StrataEngine:
    name = "strata"

    def __init__(self, model: str, threads: int):
        from app.engine.client import RunnerClient
        from app.engine.gguf.model_info import read_model_info

        info = read_model_info(model)
        self.client = RunnerClient(cpu_layout(model, info.n_layer), n_threads=threads, model_name="bench")
        self._n = 0

    async def start(self):
        await self.client.start()

    async def stream(self, prompt: str, n_predict: int):
        """-> (t_send, [token arrival times], prompt_tokens)"""
        from app.engine import protocol as P

        self._n += 1
        req = P.GenerateRequest(id=f"b{self._n}", prompt=prompt, raw=True, num_predict=n_predict, ignore_eos=True,
                                sampling=P.SamplingParams(temperature=0.0, repeat_penalty=1.0, top_k=0, top_p=1.0))
        t0 = time.perf_counter()
        times, n_prompt = [], 0
        async for ev in self.client.generate(req):
            now = time.perf_counter()
            if isinstance(ev, P.DoneEvent):
                n_prompt = ev.prompt_tokens
                if ev.completion_tokens and not times:      # held-back text (a partial character) ends with done
                    times.append(now)
            elif ev.n_tokens:
                times.extend([now] * ev.n_tokens)
        return t0, times, n_prompt

    async def decode_fraction(self):
        return (await self.client.stats()).decode_fraction

    async def stop(self):
        await self.client.close()


class StrataApiEngine:
    """Strata through its HTTP API: `python -m app serve` in a temporary STRATA_HOME, Ollama's /api/generate
    streaming NDJSON, the model loaded with the same slots, context and batch as llama-server. `threads` None =
    Strata's default (STRATA_NUM_THREADS unset)."""
    name = "strata"

    def __init__(self, model: str, threads: int | None):
        import tempfile

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.home = tempfile.mkdtemp(prefix="strata-bench-")
        self.model_path = model
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
        self.env.update(STRATA_HOME=self.home, STRATA_HOST=f"127.0.0.1:{self.port}", STRATA_NUM_PARALLEL=str(N_PAR),
                        STRATA_NUM_CTX=str(NUM_CTX), STRATA_KEEP_ALIVE="-1",
                        # the caller's path after ours: where llama_cpp's bindings come from a folder of their own
                        PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        if threads:
            self.env["STRATA_NUM_THREADS"] = str(threads)
        self.name_in_store = "bench"
        self.proc = None
        self.session = None

    async def start(self):
        import aiohttp

        subprocess.run([sys.executable, "-m", "app", "import", self.model_path, "--name", self.name_in_store],
                       env=self.env, check=True, capture_output=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "app", "serve"], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
        for _ in range(600):
            try:
                async with self.session.get(f"http://127.0.0.1:{self.port}/api/version") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"strata serve exited with {self.proc.returncode}")
            await asyncio.sleep(0.1)
        raise RuntimeError("strata serve did not answer")

    async def stream(self, prompt: str, n_predict: int):
        body = {"model": self.name_in_store, "prompt": prompt, "raw": True, "stream": True,
                "options": {"num_predict": n_predict, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                            "repeat_penalty": 1.0, "ignore_eos": True, "num_ctx": NUM_CTX, "num_batch": N_BATCH}}
        t0 = time.perf_counter()
        times, n_prompt = [], 0
        async with self.session.post(f"http://127.0.0.1:{self.port}/api/generate", json=body) as r:
            r.raise_for_status()
            async for raw in r.content:
                now = time.perf_counter()
                d = json.loads(raw)
                if d.get("response"):
                    times.append(now)
                if d.get("done"):
                    n_prompt = d.get("prompt_eval_count", 0)
                    n = d.get("eval_count", len(times))
                    if n and not times:                  # token(s) whose text was held back (a partial character,
                        times = [now]                    # a 1-token reply of whitespace): they arrive with done
                    if len(times) < n:                   # several tokens in one chunk: spread evenly
                        times = [times[0] + (times[-1] - times[0]) * i / max(1, n - 1) for i in range(n)]
        return t0, times, n_prompt

    async def decode_fraction(self):
        return float("nan")

    async def stop(self):
        import shutil

        if self.session:
            await self.session.close()
        if self.proc:
            self.proc.terminate()
            self.proc.wait(30)
        shutil.rmtree(self.home, ignore_errors=True)


class ServerEngine:
    name = "llama-server"

    def __init__(self, model: str, threads: int | None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        # threads None = llama-server's own default (its -t default: the physical cores)
        tflags = ["-t", str(threads), "-tb", str(threads)] if threads else []
        self.cmd = [str(SERVER), "-m", model, *tflags, "-c", str(NUM_CTX * N_PAR),
                    "-np", str(N_PAR), "-b", str(N_BATCH), "-ub", str(N_BATCH), "--no-kv-unified", "-fa", "auto",
                    "-cram", "0", "--no-webui", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = None
        self.session = None

    async def start(self):
        import aiohttp

        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600),
                                             connector=aiohttp.TCPConnector(force_close=True))
        for _ in range(600):
            try:
                async with self.session.get(f"http://127.0.0.1:{self.port}/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: {' '.join(self.cmd)}")
            await asyncio.sleep(0.1)
        raise RuntimeError("llama-server did not become healthy")

    async def stream(self, prompt: str, n_predict: int):
        body = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "temperature": 0.0, "top_k": 0,
                "top_p": 1.0, "repeat_penalty": 1.0, "stream": True}
        t0 = time.perf_counter()
        times, n_prompt = [], 0
        async with self.session.post(f"http://127.0.0.1:{self.port}/completion", json=body) as r:
            r.raise_for_status()
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                now = time.perf_counter()
                d = json.loads(line[6:])
                if d.get("stop"):
                    n_prompt = d.get("timings", {}).get("prompt_n", 0) or d.get("tokens_evaluated", 0)
                    if d.get("content") or not times:    # a 1-token reply may come only with the stop chunk
                        times.append(now)
                    break
                times.append(now)
        return t0, times, n_prompt

    async def decode_fraction(self):
        return float("nan")

    async def stop(self):
        if self.session:
            await self.session.close()
        if self.proc:
            self.proc.terminate()
            self.proc.wait(10)


async def m_gen(engine, rep):
    t0, times, _ = await engine.stream(unique(rep, "Once upon a time"), N_GEN)
    return {"gen tok/s": (len(times) - 1) / (times[-1] - times[0])}


async def m_prompt(engine, rep):
    t0, times, n_prompt = await engine.stream(long_prompt(rep), 1)
    return {"prompt tok/s": n_prompt / (times[0] - t0), "prompt tokens": n_prompt}


async def m_streams(engine, rep):
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(engine.stream(unique(rep, f"Story {k}: once upon a time"), N_GEN) for k in range(4)))
    wall = max(o[1][-1] for o in outs) - t0
    return {"4-stream tok/s": sum(len(o[1]) for o in outs) / wall}


async def m_ttft(engine, rep):
    t0, times, _ = await engine.stream(unique(rep, SHORT), 1)
    return {"TTFT ms": (times[0] - t0) * 1000}


METRICS = (m_gen, m_prompt, m_streams, m_ttft)
METRIC_KEYS = {"gen": (m_gen, "gen tok/s"), "prompt": (m_prompt, "prompt tok/s"),
               "streams": (m_streams, "4-stream tok/s"), "ttft": (m_ttft, "TTFT ms")}


def builtin_or(model: str | None) -> str:
    if model is not None:
        return model
    from app.engine.gguf.builtin_model import builtin_model_path

    return str(builtin_model_path())


def chosen_metrics(spec: str):
    chosen = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in METRIC_KEYS]
    if unknown or not chosen:
        sys.exit(f"--metrics: unknown {unknown or chosen}; choose from {','.join(METRIC_KEYS)}")
    return [METRIC_KEYS[m][0] for m in chosen], [METRIC_KEYS[m][1] for m in chosen]


async def run_pair(engines, metrics, reps: int):
    """Start both engines, warm them up, measure every metric `reps` times alternating the order (A/B, then
    B/A) so the machine's noise hits both alike; stop them. -> ({engine: [row per rep]}, decode fractions)."""
    for e in engines:
        await e.start()
    try:
        for e in engines:                            # warm-up (page cache, thread pools)
            await e.stream("Hello", 8)
        results = {e.name: [] for e in engines}
        fractions = []
        for rep in range(reps):
            order = engines if rep % 2 == 0 else engines[::-1]
            row = {e.name: {} for e in engines}
            for metric in metrics:
                for e in order:
                    row[e.name].update(await metric(e, rep))
                    if e.name == "strata" and metric is m_gen:
                        fractions.append(await e.decode_fraction())   # steady single-stream generation
            for e in engines:
                results[e.name].append(row[e.name])
    finally:
        for e in engines:
            await e.stop()
    return results, [f for f in fractions if f == f]


async def main(args):
    global SERVER
    if args.server:
        SERVER = Path(args.server)
    model = builtin_or(args.model)
    if not SERVER.exists():
        sys.exit(f"{SERVER} is missing: run bench/build_llama_server.sh first")
    metrics, keys = chosen_metrics(args.metrics)
    strata = StrataEngine(model, args.threads) if args.runner else StrataApiEngine(model, args.threads)
    results, fractions = await run_pair([strata, ServerEngine(model, args.threads)], metrics, args.reps)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in results.items()}
    n_prompt = results["strata"][0].get("prompt tokens", "-")
    print(f"\nmodel {Path(model).name}, threads {args.threads}, {N_PAR} slots x {NUM_CTX} ctx, batch {N_BATCH}, "
          f"{args.reps} alternating reps (medians), prompt {n_prompt} tokens, gen {N_GEN} tokens greedy, "
          f"{'RUNNER LEVEL (Strata through a pipe, llama-server over HTTP)' if args.runner else 'both over HTTP'}, "
          f"prompt cache on in both\n")
    print("| metric | Strata | llama-server | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for k in keys:
        s, l = med["strata"][k], med["llama-server"][k]
        ratio = (l / s) if k == "TTFT ms" else (s / l)
        print(f"| {k} | {s:.1f} | {l:.1f} | {ratio:.3f}{' (inverted)' if k == 'TTFT ms' else ''} |")
    if args.reps_table:
        for k in keys:
            print(f"{k} per rep: " + "; ".join(f"{n} " + "/".join(f"{r[k]:.1f}" for r in rs)
                                               for n, rs in results.items()))
    if fractions:
        print(f"\nStrata decode-time fraction (share of the context thread's step time inside llama_decode, "
              f"single-stream generation): {statistics.median(fractions):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "medians": med, "decode_fraction": fractions}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the built-in SmolLM2)")
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None, help="also write raw results here")
    ap.add_argument("--server", default=None, help="llama-server binary (default: STRATA_BENCH_LLAMA_SERVER or "
                                                   "bench/_build/llama-server)")
    ap.add_argument("--metrics", default="gen,prompt,streams,ttft",
                    help="comma-separated subset of gen,prompt,streams,ttft (default: all)")
    ap.add_argument("--reps-table", action="store_true", help="also print every repetition's value")
    ap.add_argument("--runner", action="store_true", help="Strata's engine through RunnerClient (no HTTP) instead "
                                                         "of strata serve: a runner-level figure, not like for like")
    asyncio.run(main(ap.parse_args()))
