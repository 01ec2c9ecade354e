"""Long prompts: prefill and decode at 1k-30k tokens of context, Strata's service against llama-server from the same
llama.cpp, both through /v1/completions with streaming; and what a restart costs the first request of a new agent
session (the prompt cache on disk).

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python 0.3.36's vendored llama.cpp
    .venv/bin/python bench/bench_long_context.py --model PATH [--threads 1] [--sizes 1024,4096,16384,30000]
                                                 [--reps 2] [--long-reps 1] [--restart 16384] [--json FILE]

Both servers run as their own processes with the same model, threads, one slot of --ctx tokens (32768), their
default batch sizes (llama-server: -b 2048 -ub 512; Strata: its plan's) and flash attention on auto; both keep
their prompt caches on (every prompt starts with a new random line, so nothing of it is cached).
- prefill  time to first token of an N-token raw prompt (the whole prompt is computed): N / TTFT tokens/s.
- decode   the 32 tokens after it (greedy): (completion tokens - 1) / (end of the stream - time of the first),
           each token attending to the N of the prompt. Each repetition's line also gives the gap after the first
           token, the median gap and the time from the last text chunk to the end of the stream (where a fixed cost
           per reply would show).
Sizes up to 4k are measured --reps times, the longer ones --long-reps times (a 30k-token prefill of a 0.5B model on
one thread takes minutes); engines alternate, the order swapped each repetition, so the machine's load hits both.
Ratios are Strata / llama-server speeds: >= 1.0 means Strata is at least as fast.

--restart N: Strata only, then llama-server. A first "agent session" sends an N-token prefix (system prompt and tools
stand-in) plus a question; the service is stopped and started again on the same data dir; a second session sends
the same prefix and another question. Its TTFT against the cold first one, and the cached tokens its usage reports.
llama-server keeps nothing across a restart: its second TTFT is its cold one again.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "_build" / "llama-server"
N_DECODE = 32

WORDS = ("river mountain lantern harbor orchard meadow glacier canyon village market bridge tower garden forest "
         "island valley desert castle library window engine compass signal harvest winter summer thunder "
         "pepper copper silver marble velvet canvas ribbon feather pebble candle").split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_text() -> str:
    return f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}"


def long_text(n_tokens: int, seed: int) -> str:
    """About n_tokens of varied plain text (Qwen's tokenizer: ~1.25 tokens a word here), new for each seed."""
    rnd = random.Random(seed)
    head = f"Log {seed}-{rnd.random():.9f}. "
    words = [rnd.choice(WORDS) + (rnd.choice([",", ".", ""]) if rnd.random() < 0.3 else "")
             for _ in range(int(n_tokens / 1.22))]
    return head + " ".join(words)


class Engine:
    def __init__(self, name: str, cmd: list[str], port: int, model: str, health: str, env=None):
        self.name, self.cmd, self.port, self.model, self.health, self.env = name, cmd, port, model, health, env
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=7200),
                                             connector=aiohttp.TCPConnector(force_close=True))
        for _ in range(3000):
            try:
                async with self.session.get(self.url + self.health) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {' '.join(self.cmd)}")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become healthy")

    async def stop(self) -> None:
        if self.session:
            await self.session.close()
            self.session = None
        if self.proc:
            self.proc.terminate()           # SIGTERM: Strata stops its runners (which save their prefixes)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    async def complete(self, prompt: str, max_tokens: int = N_DECODE, chat: list | None = None) -> dict:
        """-> ttft, decode tok/s, prompt/cached/completion tokens. `chat`: messages instead of a raw prompt."""
        body: dict = {"model": self.model, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                      "stream_options": {"include_usage": True}}
        path = "/v1/completions"
        if chat is not None:
            body["messages"], path = chat, "/v1/chat/completions"
        else:
            body["prompt"] = prompt
        t0 = time.perf_counter()
        first = last = None
        stamps: list[float] = []        # arrival of each text chunk: where in the reply the time goes
        usage: dict = {}
        assert self.session is not None
        async with self.session.post(self.url + path, json=body) as r:
            if r.status != 200:
                raise RuntimeError(f"{self.name}: HTTP {r.status}: {(await r.text())[:500]}")
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                d = json.loads(line[6:])
                if d.get("usage"):
                    usage = d["usage"]
                for ch in d.get("choices") or []:
                    piece = ch.get("text") if chat is None else (ch.get("delta") or {}).get("content")
                    if piece:
                        now = time.perf_counter()
                        first = first if first is not None else now
                        last = now
                        stamps.append(now)
        t_end = time.perf_counter()
        n_out = usage.get("completion_tokens", 0)
        ttft = (first if first is not None else t_end) - t0
        dec = (n_out - 1) / (t_end - first) if first is not None and n_out > 1 and t_end > first else 0.0
        gaps = sorted(b - a for a, b in zip(stamps, stamps[1:]))
        return {"ttft": ttft, "decode": dec, "prompt": usage.get("prompt_tokens", 0), "out": n_out,
                "gaps_ms": [round(1e3 * (stamps[1] - stamps[0]), 2) if len(stamps) > 1 else 0.0,
                            round(1e3 * gaps[len(gaps) // 2], 2) if gaps else 0.0,
                            round(1e3 * (t_end - last), 2) if last is not None else 0.0],
                "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}


def llama_server(model: str, threads: int, ctx: int) -> Engine:
    port = free_port()
    cmd = [str(SERVER), "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", "1",
           "-fa", "auto", "--jinja", "--no-webui", "--host", "127.0.0.1", "--port", str(port)]
    return Engine("llama-server", cmd, port, "model", "/health")


def strata(model: str, threads: int, ctx: int, home: str, variant: str = "") -> Engine:
    """Strata's service; `variant` "NAME:key=value,...": the model with those load parameters (a Modelfile's
    PARAMETER lines, e.g. num_batch=2048; an upper-case key is an environment variable of the service, e.g.
    STRATA_SPECULATIVE=off), reported as strata-NAME."""
    port = free_port()
    items = [i for i in variant.partition(":")[2].split(",") if i]
    params = ",".join(i for i in items if not i[:1].isupper())
    cmd = [sys.executable, __file__, "--serve-strata", str(port), "--threads", str(threads), "--ctx", str(ctx),
           "--home", home, "--model", model, "--params", params]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), STRATA_HOME=home,
               **dict(i.split("=", 1) for i in items if i[:1].isupper()))
    name = "strata-" + variant.partition(":")[0] if variant else "strata"
    return Engine(name, cmd, port, "bench-model", "/api/version", env=env)


def parse_params(spec: str) -> dict:
    out: dict = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        out[key] = json.loads(value) if value[:1].isdigit() or value in ("true", "false") else value
    return out


def serve_strata(port: int, threads: int, ctx: int, home: str, model: str, params: dict) -> None:
    """Child mode: Strata's service over a store under `home` (the model imported as bench-model once); stops its
    runners on SIGTERM, as `strata serve` does."""
    import signal
    sys.path.insert(0, str(ROOT))
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread
    from app.service.store.model_store import ModelStore

    h = Path(home)

    def store():
        return ModelStore(db_path=h / "strata.db", models_dir=h / "models", discover_external=False)
    if not (h / "imported").exists():
        store().import_gguf(model, name="bench-gguf")
        store().create("bench-model", "bench-gguf", parameters=params)
        (h / "imported").write_text("1")
    cfg = ServiceConfig(port=port, n_threads=threads, num_ctx=ctx, num_parallel=1, keep_alive=-1)
    svc = ServiceThread(cfg, store_factory=store).start()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    while not stop[0]:
        time.sleep(0.2)
    svc.stop(60)


async def run_sizes(engines: list[Engine], args) -> dict:
    res: dict = {e.name: {} for e in engines}
    for size in args.sizes:
        reps = args.reps if size <= 4096 else args.long_reps
        for rep in range(reps):
            order = engines if rep % 2 == 0 else engines[::-1]
            for e in order:
                r = await e.complete(long_text(size, hash((size, rep, e.name)) & 0xffffff))
                r["load"] = load_text()
                res[e.name].setdefault(size, []).append(r)
                print(f"{size} rep {rep + 1} {e.name}: prompt {r['prompt']} ({r['cached']} cached), TTFT "
                      f"{r['ttft']:.2f} s = {r['prompt'] / r['ttft']:.1f} tok/s, decode {r['decode']:.2f} tok/s "
                      f"({r['out']} tokens; ms: 1st gap {r['gaps_ms'][0]}, median gap {r['gaps_ms'][1]}, last chunk "
                      f"to end {r['gaps_ms'][2]}), load {r['load']}", file=sys.stderr, flush=True)
    return res


def report_sizes(res: dict, args) -> None:
    for name in res:
        if name.startswith("strata"):
            report_one(name, res[name], res["llama-server"], args)


def report_one(name: str, s: dict, l: dict, args) -> None:
    print(f"\n## Long prompts: {Path(args.model).name}, {name}, threads {args.threads}, context {args.ctx}, one slot\n")
    print("| prompt tokens | reps | Strata prefill tok/s | llama-server prefill tok/s | prefill ratio | "
          "Strata decode tok/s | llama-server decode tok/s | decode ratio | load (1/5/15 min) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for size in args.sizes:
        a, b = s[size], l[size]
        pa = [r["prompt"] / r["ttft"] for r in a]
        pb = [r["prompt"] / r["ttft"] for r in b]
        da, db = [r["decode"] for r in a], [r["decode"] for r in b]

        def spread(xs):
            return f"{statistics.median(xs):.1f}" + (f" ({min(xs):.1f}-{max(xs):.1f})" if len(xs) > 1 else "")
        ratios_p = [x / y for x, y in zip(pa, pb)]
        ratios_d = [x / y for x, y in zip(da, db) if y]
        print(f"| {a[0]['prompt']} | {len(a)} | {spread(pa)} | {spread(pb)} | {statistics.median(ratios_p):.2f}"
              + (f" ({min(ratios_p):.2f}-{max(ratios_p):.2f})" if len(ratios_p) > 1 else "")
              + f" | {spread(da)} | {spread(db)} | "
              + (f"{statistics.median(ratios_d):.2f}" if ratios_d else "-")
              + (f" ({min(ratios_d):.2f}-{max(ratios_d):.2f})" if len(ratios_d) > 1 else "")
              + f" | {a[0]['load']} |")


async def run_restart(args) -> dict:
    """Strata: cold session, restart, second session (cached tokens, TTFT); llama-server: the same, for scale."""
    out = {}
    home = tempfile.mkdtemp(prefix="strata-bench-restart-")
    prefix = long_text(args.restart, 777)
    q1, q2 = "\n\nQuestion: which word came first?", "\n\nQuestion: which word came last?"
    e = strata(args.model, args.threads, args.ctx, home)
    await e.start()
    await e.complete("Hello", 4)                     # load the model
    cold = await e.complete(prefix + q1, 8)
    same = await e.complete(prefix + q2, 8)         # same process: the slot's own cells
    await e.stop()
    e = strata(args.model, args.threads, args.ctx, home)
    t0 = time.perf_counter()
    await e.start()
    await e.complete("Hello", 4)
    load_s = time.perf_counter() - t0
    warm = await e.complete(prefix + q2, 8)
    await e.stop()
    files = sorted((Path(home) / "prompt-cache").rglob("*.pcache"))
    out["strata"] = {"cold": cold, "same_process": same, "after_restart": warm, "restart_load_s": load_s,
                     "files": [f.stat().st_size for f in files], "load": load_text()}
    if not args.only_strata:
        ls = llama_server(args.model, args.threads, args.ctx)
        await ls.start()
        await ls.complete("Hello", 4)
        c1 = await ls.complete(prefix + q1, 8)
        await ls.stop()
        ls = llama_server(args.model, args.threads, args.ctx)
        await ls.start()
        await ls.complete("Hello", 4)
        c2 = await ls.complete(prefix + q2, 8)
        await ls.stop()
        out["llama-server"] = {"cold": c1, "after_restart": c2, "load": load_text()}
    return out


def report_restart(r: dict, args) -> None:
    s = r["strata"]
    print(f"\n## Restart: a {args.restart}-token shared prefix, threads {args.threads}\n")
    print("| engine | request | prompt tokens | cached | TTFT s | vs cold |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for eng, d in r.items():
        for k in ("cold", "same_process", "after_restart"):
            if k in d:
                x = d[k]
                print(f"| {eng} | {k.replace('_', ' ')} | {x['prompt']} | {x['cached']} | {x['ttft']:.2f} | "
                      f"{x['ttft'] / d['cold']['ttft']:.3f} |")
    print(f"\nStrata's files on disk: {[f'{b / 2**20:.0f} MiB' for b in s['files']]}; service start + model load "
          f"before the second session: {s['restart_load_s']:.1f} s; load {s['load']}")


async def main(args) -> None:
    if not SERVER.exists() and not args.only_strata:
        sys.exit(f"{SERVER} is missing: run bench/build_llama_server.sh first")
    print(f"load at start: {load_text()}, cpus {os.cpu_count()}", file=sys.stderr)
    results: dict = {}
    if args.sizes:
        engines = [strata(args.model, args.threads, args.ctx, tempfile.mkdtemp(prefix="strata-bench-long-"), v)
                   for v in [""] + args.variants] + [llama_server(args.model, args.threads, args.ctx)]
        try:
            for e in engines:
                await e.start()
                await e.complete("Hello", 4)        # load, warm up
            results["sizes"] = await run_sizes(engines, args)
        finally:
            for e in engines:
                await e.stop()
        report_sizes(results["sizes"], args)
    if args.restart:
        results["restart"] = await run_restart(args)
        report_restart(results["restart"], args)
    print(f"\nload at end: {load_text()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF path (e.g. Qwen2.5-Coder-0.5B-Instruct Q8_0)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--sizes", default="1024,4096,16384,30000",
                    help="prompt sizes in tokens, comma-separated ('' = none)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of sizes up to 4096")
    ap.add_argument("--long-reps", type=int, default=1, help="repetitions of longer sizes")
    ap.add_argument("--restart", type=int, default=0, help="measure a restart with a prefix of this many tokens")
    ap.add_argument("--only-strata", action="store_true", help="--restart without llama-server")
    ap.add_argument("--server", default=None, help="llama-server binary (default: bench/_build/llama-server)")
    ap.add_argument("--json", default=None, help="also write raw results here")
    ap.add_argument("--variant", dest="variants", action="append", default=[],
                    help="also Strata with load parameters, NAME:key=value,... (e.g. b2048:num_batch=2048)")
    ap.add_argument("--serve-strata", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--params", default="", help=argparse.SUPPRESS)
    ap.add_argument("--home", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.server:
        SERVER = Path(a.server)
    if a.serve_strata is not None:
        serve_strata(a.serve_strata, a.threads, a.ctx, a.home, a.model, parse_params(a.params))
    else:
        a.sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
        asyncio.run(main(a))
