"""Several clients at once: does a short streamed reply keep its pace while another client's long prompt
is read, and what does that cost the long prompt? Strata's service against llama-server, side by side.

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python 0.3.36's vendored llama.cpp
    .venv/bin/python bench/bench_concurrent.py [--sizes 6000,16000] [--reps 1] [--threads 2] [--model PATH]
                                               [--engines strata,strata=0,llama-server] [--server PATH]
                                               [--only-strata] [--no-mixed] [--json out.json]

Model: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (~/.cache/strata-test-models, `make test-models`) unless --model. Both
servers at their defaults but for the slots: 4 slots with room for the longest prompt (llama-server: `-np 4 -c
4 x ctx`, its default n_batch 2048 / n_ubatch 512; Strata: num_parallel 4, num_ctx ctx, its default num_batch 512
on a CPU and its default step budget, STRATA_DECODE_LATENCY_FACTOR). Every prompt is new (a fresh prefix per run),
so no cache helps either side. Measured, per engine and long-prompt size, one engine at a time (all started, taking
turns each repetition in swapped order, so a shared machine's load drift hits them alike):
- alone      the short streamed reply alone (a ~40-token chat, 64 tokens, ignore_eos): time to first token and
             tokens per second after it; and the long prompt alone (streamed, max_tokens 1): its time.
- together   the long prompt is sent; once it is being read (2 s later) the short reply is sent: the reply's time to
             first token and tokens per second while the prompt is read, and the long prompt's time.
- mixed4     four clients at once: one long prompt (reply 16 tokens) and three that each send three short chats in
             a row (64 tokens each): aggregate tokens (prompt + generated) per second over the whole run.
Ratios: reply pace together / alone (target >= 0.5), long prompt together / alone (target <= 1.3). The machine's load
(os.getloadavg) is printed with the results: on a shared machine the numbers are indicative only.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_chat import Endpoint as ChatEndpoint, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "_build" / "llama-server"
for alt in (ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server",):
    if not SERVER.exists() and alt.exists():
        SERVER = alt
MODEL = Path.home() / ".cache" / "strata-test-models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
N_PAR = 4
REPLY_TOKENS = 64
WORDS = ("river mountain lantern harbor orchard meadow glacier canyon village market bridge tower garden forest "
         "island valley desert castle library window engine compass signal harvest winter summer thunder "
         "pepper copper silver marble velvet canvas ribbon feather pebble candle").split()


def long_prompt(tokens: int, seed: int) -> str:
    """About `tokens` tokens of code-like text, new for every seed (no prefix any cache could hold)."""
    rnd = random.Random(seed)
    lines = [f"# module {seed}-{rnd.random():.12f}: review the following functions and summarise them."]
    n = 0
    while n < tokens:
        a, b, c = rnd.sample(WORDS, 3)
        k = rnd.randint(0, 999)
        line = f"def {a}_{b}_{k}(x, y):\n    return {c}_table[x] + y * {k}  # {a} {b} {c}"
        lines.append(line)
        n += 31                                  # ~tokens per line for Qwen2.5's tokenizer
    return "\n".join(lines) + "\nSummarise in one sentence."


def short_chat(seed: int) -> list[dict]:
    rnd = random.Random(seed)
    a, b = rnd.sample(WORDS, 2)
    return [{"role": "user", "content": f"Chat {seed}: write a short friendly note about a {a} and a {b}, "
                                        f"in plain words, for a child who likes stories."}]


class Endpoint(ChatEndpoint):
    """One OpenAI-compatible server process and its streamed chat call (long prompts: a longer wait, no pool limit)."""
    TIMEOUT_S = 3600
    CONNECTIONS = 0
    START_S = 300

    async def chat(self, messages: list[dict], max_tokens: int, ignore_eos: bool = True) -> dict:
        """-> {"t0", "ttft": s, "t_end", "tokens": generated, "prompt_tokens": n, "token_times": [...]}"""
        body = {"model": self.model_field, "messages": messages, "stream": True, "max_tokens": max_tokens,
                "temperature": 0.0, "stream_options": {"include_usage": True}}
        if ignore_eos:
            body["ignore_eos"] = True                        # llama-server's
            body["options"] = {"ignore_eos": True}           # Strata's (Ollama options on every dialect)
        assert self.session is not None
        t0 = time.perf_counter()
        times, usage = [], {}
        async with self.session.post(self.url + "/v1/chat/completions", json=body) as r:
            if r.status != 200:
                raise RuntimeError(f"{self.name}: HTTP {r.status}: {await r.text()}")
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                d = json.loads(line[6:])
                if d.get("usage"):
                    usage = d["usage"]
                for ch in d.get("choices") or []:
                    if (ch.get("delta") or {}).get("content"):
                        times.append(time.perf_counter())
        t_end = time.perf_counter()
        n = usage.get("completion_tokens", len(times))
        return {"t0": t0, "ttft": (times[0] - t0) if times else t_end - t0, "t_end": t_end, "tokens": n,
                "prompt_tokens": usage.get("prompt_tokens", 0), "token_times": times}


def pace(r: dict) -> float:
    """Tokens per second after the first token (the reply's pace as a reader sees it)."""
    times = r["token_times"]
    if len(times) < 2:
        return 0.0
    # chunks may carry several tokens: count tokens, not chunks
    return (r["tokens"] - 1) / (times[-1] - times[0]) if times[-1] > times[0] else 0.0


def llama_server(model: str, threads: int, ctx: int) -> Endpoint:
    port = free_port()
    cmd = [str(SERVER), "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(ctx * N_PAR),
           "-np", str(N_PAR), "--jinja", "--no-webui", "--host", "127.0.0.1", "--port", str(port)]
    return Endpoint("llama-server", cmd, port, "model")


def strata(threads: int, home: str, model_path: str, ctx: int, factor: str | None = None) -> Endpoint:
    """Strata's service; `factor`: its STRATA_DECODE_LATENCY_FACTOR ("0": prompts take whole batches, as before
    the step budget), named in the engine's label."""
    port = free_port()
    cmd = [sys.executable, __file__, "--serve-strata", str(port), "--threads", str(threads), "--home", home,
           "--model", model_path, "--ctx", str(ctx)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if factor is not None:
        env["STRATA_DECODE_LATENCY_FACTOR"] = factor
    return Endpoint("strata" if factor is None else f"strata factor {factor}", cmd, port, "bench-model", env=env)


def serve_strata(port: int, threads: int, home: str, model_path: str, ctx: int) -> None:
    """Child mode: Strata's service with a fresh store under `home` holding `model_path` as bench-model."""
    sys.path.insert(0, str(ROOT))
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread
    from app.service.store.model_store import ModelStore

    h = Path(home)
    ModelStore(db_path=h / "strata.db", models_dir=h / "models", discover_external=False).import_gguf(
        model_path, name="bench-model")
    cfg = ServiceConfig.from_env(port=port, n_threads=threads, num_ctx=ctx, num_parallel=N_PAR, keep_alive=-1)
    svc = ServiceThread(cfg, store_factory=lambda: ModelStore(db_path=h / "strata.db", models_dir=h / "models",
                                                              discover_external=False)).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))     # stopped: the service stops its runner too
    try:
        while True:
            time.sleep(3600)
    finally:
        svc.stop()


async def one_engine(e: Endpoint, sizes: list[int], reps: int, seed0: int) -> dict:
    out: dict = {"alone_reply": [], "sizes": {}}
    seed = seed0
    for rep in range(reps):
        seed += 1
        r = await e.chat(short_chat(seed), REPLY_TOKENS)
        out["alone_reply"].append({"ttft": r["ttft"], "pace": pace(r), "tokens": r["tokens"]})
        log(f"{e.name} rep {rep + 1}: reply alone: TTFT {r['ttft']:.2f} s, {pace(r):.2f} tok/s")
    for size in sizes:
        res: dict = {"alone_long": [], "together": []}
        for rep in range(reps):
            seed += 1
            r = await e.chat([{"role": "user", "content": long_prompt(size, seed)}], 1, ignore_eos=False)
            res["alone_long"].append({"time": r["t_end"] - r["t0"], "prompt_tokens": r["prompt_tokens"]})
            log(f"{e.name} rep {rep + 1}: {r['prompt_tokens']}-token prompt alone: {r['t_end'] - r['t0']:.1f} s")
            seed += 1
            long_task = asyncio.ensure_future(e.chat([{"role": "user", "content": long_prompt(size, seed)}], 1,
                                                     ignore_eos=False))
            await asyncio.sleep(2.0)                  # the long prompt is being read
            seed += 1
            reply = await e.chat(short_chat(seed), REPLY_TOKENS)
            long = await long_task
            res["together"].append({"reply_ttft": reply["ttft"], "reply_pace": pace(reply),
                                    "long_time": long["t_end"] - long["t0"], "prompt_tokens": long["prompt_tokens"],
                                    "reply_done_before_long": reply["t_end"] < long["t_end"]})
            log(f"{e.name} rep {rep + 1}: together with {long['prompt_tokens']}: reply TTFT {reply['ttft']:.2f} s, "
                f"{pace(reply):.2f} tok/s; long prompt {long['t_end'] - long['t0']:.1f} s")
        out["sizes"][size] = res
    return out


async def mixed4(e: Endpoint, size: int, seed: int) -> dict:
    """Four clients at once: one long prompt, three chatting (three short chats each, one after the other)."""
    async def chatter(k: int) -> list[dict]:
        return [await e.chat(short_chat(seed * 100 + k * 10 + i), REPLY_TOKENS) for i in range(3)]

    t0 = time.perf_counter()
    results = await asyncio.gather(e.chat([{"role": "user", "content": long_prompt(size, seed)}], 16, ignore_eos=True),
                                   *(chatter(k) for k in range(3)))
    wall = time.perf_counter() - t0
    long, chats = results[0], [r for group in results[1:] for r in group]
    tokens = long["prompt_tokens"] + long["tokens"] + sum(r["prompt_tokens"] + r["tokens"] for r in chats)
    out = {"wall": wall, "tokens": tokens, "tok_s": tokens / wall, "long_time": long["t_end"] - long["t0"],
           "chat_pace_median": statistics.median(pace(r) for r in chats),
           "chat_ttft_max": max(r["ttft"] for r in chats)}
    log(f"{e.name} mixed4: {tokens} tokens in {wall:.1f} s = {tokens / wall:.1f} tok/s; chats' pace median "
        f"{out['chat_pace_median']:.2f} tok/s, worst TTFT {out['chat_ttft_max']:.1f} s")
    return out


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr, flush=True)


def spread(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def report(results: dict, args) -> None:
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
          f"threads {args.threads}; reps {args.reps}")
    print("\n| engine | long prompt | reply alone: TTFT s / tok/s | reply while it is read: TTFT s / tok/s | "
          "pace ratio | long prompt alone s | with the reply s | slowdown |")
    print("| --- | ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        alone = r["alone_reply"]
        if not alone:
            continue
        a_pace = statistics.median(x["pace"] for x in alone)
        for size, s in r["sizes"].items():
            tog, al = s["together"], s["alone_long"]
            t_pace = [x["reply_pace"] for x in tog]
            la, lt = [x["time"] for x in al], [x["long_time"] for x in tog]
            n = statistics.median(x["prompt_tokens"] for x in al)
            print(f"| {name} | {n:.0f} | {spread([x['ttft'] for x in alone])} / {spread([x['pace'] for x in alone])} "
                  f"| {spread([x['reply_ttft'] for x in tog])} / {spread(t_pace)} | "
                  f"{statistics.median(t_pace) / a_pace:.2f} | {spread(la)} | {spread(lt)} | "
                  f"{statistics.median(lt) / statistics.median(la):.2f} |")
    if any("mixed4" in r for r in results.values()):
        print("\n| engine | mixed4: tokens / wall s = tok/s | long prompt s | chats' pace median tok/s | worst chat TTFT s |")
        print("| --- | --- | ---: | ---: | ---: |")
        for name, r in results.items():
            for m in r.get("mixed4_runs") or ([r["mixed4"]] if r.get("mixed4") else []):
                print(f"| {name} | {m['tokens']} / {m['wall']:.1f} = {m['tok_s']:.1f} | {m['long_time']:.1f} | "
                      f"{m['chat_pace_median']:.2f} | {m['chat_ttft_max']:.1f} |")


async def main(args):
    model = str(args.model or MODEL)
    if not Path(model).exists():
        sys.exit(f"{model} is missing: `make test-models`, or --model PATH")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    ctx = max(sizes) + max(sizes) // 4 + 1024
    engines = []
    for name in args.engines.split(","):
        if name == "strata":
            engines.append(strata(args.threads, tempfile.mkdtemp(prefix="strata-bench-conc-"), model, ctx))
        elif name.startswith("strata="):        # strata=0: the old chunking, for comparison
            engines.append(strata(args.threads, tempfile.mkdtemp(prefix="strata-bench-conc-"), model, ctx,
                                  factor=name.split("=", 1)[1]))
        elif name == "llama-server" and not args.only_strata:
            if not SERVER.exists():
                sys.exit(f"{SERVER} is missing: run bench/build_llama_server.sh first (or --server PATH)")
            engines.append(llama_server(model, args.threads, ctx))
    results: dict = {}
    try:                                           # all started (an idle server costs nothing); one measured at a time,
        for e in engines:                          # the engines taking turns each repetition (the order swapped), so
            await e.start("/health" if e.name == "llama-server" else "/api/version")    # a shared machine's load
            await e.chat([{"role": "user", "content": "Hello"}], 8)   # drift hits them alike; loaded, warmed up
            results[e.name] = {"alone_reply": [], "sizes": {}}
        for rep in range(args.reps):
            for i, e in enumerate(engines if rep % 2 == 0 else engines[::-1]):
                if not args.only_mixed:
                    one = await one_engine(e, sizes, 1, seed0=100_000 * (rep + 1) + 1000 * (i + 1)
                                           + int(time.time()) % 997)
                    results[e.name]["alone_reply"] += one["alone_reply"]
                    for size, res in one["sizes"].items():
                        mine = results[e.name]["sizes"].setdefault(size, {"alone_long": [], "together": []})
                        mine["alone_long"] += res["alone_long"]
                        mine["together"] += res["together"]
                if args.mixed:
                    results[e.name].setdefault("mixed4_runs", []).append(
                        await mixed4(e, sizes[0], seed=7000 + 100 * rep + i + int(time.time()) % 991))
                    results[e.name]["mixed4"] = results[e.name]["mixed4_runs"][-1]
    finally:
        for e in engines:
            await e.stop()
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help=f"GGUF path (default: {MODEL})")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--sizes", default="6000,16000", help="long prompts' sizes in tokens, comma-separated")
    ap.add_argument("--no-mixed", dest="mixed", action="store_false", help="skip the four-client run")
    ap.add_argument("--only-mixed", action="store_true", help="only the four-client run")
    ap.add_argument("--server", default=None, help="llama-server binary (default: bench/_build/llama-server)")
    ap.add_argument("--only-strata", action="store_true", help="no llama-server")
    ap.add_argument("--engines", default="strata,llama-server",
                    help="which, in order: strata, strata=FACTOR (its STRATA_DECODE_LATENCY_FACTOR; 0 = the old "
                         "whole-batch chunking), llama-server")
    ap.add_argument("--json", default=None, help="also write raw results here")
    ap.add_argument("--serve-strata", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--home", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ctx", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.server:
        SERVER = Path(a.server)
    if a.serve_strata is not None:
        serve_strata(a.serve_strata, a.threads, a.home, a.model, a.ctx)
    else:
        sys.path.insert(0, str(ROOT))
        asyncio.run(main(a))
