"""Speculative decoding: Strata (prompt-lookup drafts, on by default where measured step costs say they pay, and
with them off) against llama-server from the same llama.cpp (its default, no speculation, and with its own
prompt-lookup speculation `--spec-type ngram-simple`), through the OpenAI API, same model, threads and slots.

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python 0.3.36's vendored llama.cpp
    .venv/bin/python bench/bench_speculative.py [--model PATH] [--threads 1] [--reps 3] [--streams 1,4] [--repeat 5]
        [--engines strata,llama-server,llama-server-ngram[,strata-nospec]]
        [--draft PATH]                   # adds strata-draft: PATH (same vocabulary) drafts for the model

Tasks (each at 1 and 4 streams; the 4 streams send the same task, so the text differs only when sampled):
- edit        rename a method in a 40-line module and print the whole module (a ChatML prompt, temperature 0)
- complete    code completion that echoes the code around it (raw completion, temperature 0)
- free        a short story (a ChatML prompt, temperature 0.8, seeds fixed): text that does not repeat
All go raw to /v1/completions, so both servers decode the same prompt tokens.
Generation tok/s per configuration = completion tokens / (last token - first token), summed over streams for 4
streams (all tokens / (last token of any - first token of any)); medians over repetitions, configurations measured
in turn and the order rotated each repetition. Acceptance = accepted / drafted tokens, from each server's
`timings` (llama-server's draft_n / draft_n_accepted; Strata renders the same object).
Then (--repeat N) the edit is sent N times in a row, one stream, to each engine that drafts: the drafted counts
say whether the same request drafts the same way every time.
Each cell gives the median, the range over repetitions and the 1-minute load average while it ran: on a shared
machine say so next to every number.
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
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
SERVER = next((p for p in (Path(os.environ.get("STRATA_BENCH_LLAMA_SERVER", "/nonexistent")),
                           ROOT / "bench" / "_build" / "llama-server",
                           ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server") if p.exists()),
              ROOT / "bench" / "_build" / "llama-server")
NUM_CTX, N_PAR, N_BATCH = 4096, 4, 512
QWEN = Path.home() / ".cache" / "strata-test-models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"   # the tests' fixture

MODULE = '''import json
import os


class Inventory:
    """A small store of items and their counts."""

    def __init__(self, path):
        self.path = path
        self.items = {}

    def load(self):
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.items = json.load(f)

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2)

    def add_item(self, name, count=1):
        self.items[name] = self.items.get(name, 0) + count

    def remove_item(self, name, count=1):
        left = self.items.get(name, 0) - count
        if left > 0:
            self.items[name] = left
        else:
            self.items.pop(name, None)

    def total(self):
        return sum(self.items.values())


def main():
    inv = Inventory("inventory.json")
    inv.load()
    inv.add_item("apple", 3)
    inv.remove_item("pear")
    inv.save()
    print(inv.total())
'''
EDIT = [{"role": "user", "content": "Rename the method add_item to put_item everywhere in this module and print "
                                    "the whole module, nothing else:\n\n```python\n" + MODULE + "```"}]
COMPLETE = MODULE.replace("def main():", "def report(inv):\n    \"\"\"Print each item and its count.\"\"\"\n"
                          "    for name, count in inv.items.items():\n        print(name, count)\n\n\n"
                          "def main():") + "\n\nclass TaggedInventory(Inventory):\n    \"\"\"An Inventory whose items " \
                                           "also carry tags.\"\"\"\n\n    def __init__(self, path):\n"
FREE = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a message in a bottle."}]


def chatml(messages) -> str:
    """The conversation as a ChatML prompt (SmolLM2's and Qwen2.5's format), sent raw to /v1/completions: both
    servers then decode the same tokens (their chat endpoints differ in template details, e.g. a default system
    prompt, and so would write different replies)."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


TASKS = {"edit": ("raw", chatml(EDIT), 0.0, 420), "complete": ("raw", COMPLETE, 0.0, 300),
         "free": ("raw", chatml(FREE), 0.8, 200)}


def load_average() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One OpenAI-compatible server process (Strata's `serve` or llama-server)."""

    def __init__(self, name: str, cmd: list[str], port: int, model: str, env=None, pre=None, health="/health",
                 creates=()):
        self.name, self.cmd, self.port, self.model, self.env, self.pre, self.health = \
            name, cmd, port, model, env, pre, health
        self.creates = creates              # /api/create bodies posted once healthy (Strata's draft-model row)
        self.url = f"http://127.0.0.1:{port}"
        self.proc = self.session = None

    async def start(self):
        if self.pre:
            subprocess.run(self.pre, env=self.env, check=True, capture_output=True)
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800),
                                             connector=aiohttp.TCPConnector(force_close=True))
        for _ in range(3000):
            try:
                async with self.session.get(self.url + self.health) as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {' '.join(self.cmd)}")
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"{self.name} did not become healthy")
        for body in self.creates:
            async with self.session.post(self.url + "/api/create", json={**body, "stream": False}) as r:
                if r.status != 200:
                    raise RuntimeError(f"{self.name}: /api/create {body}: {await r.text()}")

    async def one(self, task: str, seed: int) -> dict:
        """Stream one request -> {"n", "first", "last", "draft_n", "draft_ok", "text"}."""
        kind, content, temp, n_max = TASKS[task]
        # the same sampling on both: repeat penalty off (llama-server's default; Strata's, like Ollama's, is 1.1,
        # which also makes a reply that must repeat its prompt come out differently), top-k 40, top-p off
        knobs = {"repeat_penalty": 1.0, "top_k": 40, "top_p": 1.0}
        body = {"model": self.model, "max_tokens": n_max, "temperature": temp, "seed": seed, "stream": True,
                **knobs, "options": knobs}
        if kind == "chat":
            path, body["messages"] = "/v1/chat/completions", content
        else:
            path, body["prompt"] = "/v1/completions", content
        first = last = None
        parts, timings, usage = [], {}, {}
        async with self.session.post(self.url + path, json=body) as r:
            if r.status != 200:
                raise RuntimeError(f"{self.name}: HTTP {r.status}: {await r.text()}")
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                d = json.loads(line[6:])
                timings = d.get("timings") or timings
                usage = d.get("usage") or usage
                for ch in d.get("choices") or []:
                    text = (ch.get("delta") or {}).get("content") if kind == "chat" else ch.get("text")
                    if text:
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        parts.append(text)
        n = timings.get("predicted_n") or usage.get("completion_tokens") or len(parts)
        return {"n": n, "first": first or 0.0, "last": last or 0.0, "draft_n": timings.get("draft_n", 0),
                "draft_ok": timings.get("draft_n_accepted", 0), "text": "".join(parts)}

    async def run(self, task: str, streams: int, rep: int) -> dict:
        load0 = load_average()
        rs = await asyncio.gather(*(self.one(task, 1000 * rep + i) for i in range(streams)))
        n = sum(r["n"] for r in rs)
        span = max(r["last"] for r in rs) - min(r["first"] for r in rs)
        return {"tok_s": (n - streams) / span if span > 0 else float("nan"), "n": n,
                "draft_n": sum(r["draft_n"] for r in rs), "draft_ok": sum(r["draft_ok"] for r in rs),
                "text": rs[0]["text"], "load": max(load0, load_average())}

    async def stop(self):
        if self.session:
            await self.session.close()
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def llama_server(name: str, model: str, threads: int, extra: list[str]) -> Server:
    port = free_port()
    cmd = [str(SERVER), "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(NUM_CTX * N_PAR),
           "-np", str(N_PAR), "-b", str(N_BATCH), "-ub", str(N_BATCH), "--no-kv-unified", "-fa", "auto", "--jinja",
           "--no-webui", "--host", "127.0.0.1", "--port", str(port), *extra]
    return Server(name, cmd, port, "model")


def strata(name: str, model: str, threads: int, speculative: str, draft: str | None = None) -> Server:
    port = free_port()
    home = tempfile.mkdtemp(prefix="strata-bench-spec-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(STRATA_HOME=home, STRATA_HOST=f"127.0.0.1:{port}", STRATA_NUM_PARALLEL=str(N_PAR),
               STRATA_NUM_CTX=str(NUM_CTX), STRATA_KEEP_ALIVE="-1", STRATA_NUM_THREADS=str(threads),
               STRATA_SPECULATIVE=speculative, PYTHONPATH=str(ROOT))
    pre = [sys.executable, "-m", "app", "import", model, "--name", "bench"]
    if draft is None:
        return Server(name, [sys.executable, "-m", "app", "serve"], port, "bench", env=env, pre=pre,
                      health="/api/version")
    # a draft model (--draft): imported from its GGUF, named by the benchmarked model's `draft` parameter
    creates = [{"model": "bench-draft", "from": draft}, {"model": "bench-drafted", "from": "bench",
                                                         "parameters": {"draft": "bench-draft"}}]
    return Server(name, [sys.executable, "-m", "app", "serve"], port, "bench-drafted", env=env, pre=pre,
                  health="/api/version", creates=creates)


async def main(args):
    model = args.model
    if model is None and QWEN.exists():
        model = str(QWEN)
    if model is None:
        sys.path.insert(0, str(ROOT))
        from app.engine.gguf.builtin_model import builtin_model_path
        model = str(builtin_model_path())
    if not SERVER.exists() and "llama-server" in args.engines:
        sys.exit(f"{SERVER} is missing: run bench/build_llama_server.sh first")
    servers = [strata("strata", model, args.threads, ""),
               strata("strata-nospec", model, args.threads, "off"),
               llama_server("llama-server", model, args.threads, []),
               llama_server("llama-server-ngram", model, args.threads, ["--spec-type", "ngram-simple"])]
    if args.draft:
        servers.append(strata("strata-draft", model, args.threads, "", draft=args.draft))
    servers = [s for s in servers if s.name in args.engines.split(",")]
    streams = [int(x) for x in args.streams.split(",")]
    results: dict = {}
    for s in servers:
        await s.start()
    try:
        for s in servers:                                    # load, warm up
            await s.one("free", 0)
        for rep in range(args.reps):
            for task in args.tasks.split(","):
                for k in streams:
                    order = servers[rep % len(servers):] + servers[:rep % len(servers)]
                    for s in order:
                        r = await s.run(task, k, rep)
                        results.setdefault((task, k, s.name), []).append(r)
                        print(f"rep {rep + 1} {task} x{k} {s.name}: {r['tok_s']:.1f} tok/s, {r['n']} tokens, "
                              f"drafted {r['draft_n']} accepted {r['draft_ok']}, load {r['load']:.1f}",
                              file=sys.stderr, flush=True)
        repeats: dict = {}
        for s in servers:
            if args.repeat and s.name not in ("strata-nospec", "llama-server"):
                for i in range(args.repeat):
                    r = await s.run("edit", 1, 100 + i)
                    repeats.setdefault(s.name, []).append(r)
                    print(f"repeat {i + 1} edit {s.name}: drafted {r['draft_n']} accepted {r['draft_ok']}, "
                          f"{r['tok_s']:.1f} tok/s, load {r['load']:.1f}", file=sys.stderr, flush=True)
    finally:
        for s in servers:
            await s.stop()
    report(results, servers, streams, args, model)
    report_repeats(repeats)


def report(results, servers, streams, args, model):
    names = [s.name for s in servers]
    base = "llama-server" if "llama-server" in names else names[-1]
    loads = [r["load"] for rs in results.values() for r in rs]
    print(f"\nmodel {Path(model).name}, {args.threads} thread(s), {N_PAR} slots x {NUM_CTX} ctx, {args.reps} "
          f"interleaved reps, {os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f} while measuring")
    print(f"cells: generation tok/s median (range over reps), ratio of medians to {base}, drafted -> accepted "
          f"tokens summed over reps (acceptance); load = the 1-minute load average's median over the cell's runs")
    print("| task | streams | " + " | ".join(names) + " | load |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for task in args.tasks.split(","):
        for k in streams:
            ref = statistics.median(r["tok_s"] for r in results[(task, k, base)])
            cells, cell_loads = [], []
            for n in names:
                rs = results[(task, k, n)]
                tps = [r["tok_s"] for r in rs]
                med = statistics.median(tps)
                dn, ok = sum(r["draft_n"] for r in rs), sum(r["draft_ok"] for r in rs)
                drafts = f", {dn} -> {ok} ({ok / dn:.0%})" if dn else ""
                cells.append(f"{med:.1f} ({min(tps):.1f}-{max(tps):.1f}) **{med / ref:.2f}x**{drafts}")
                cell_loads += [r["load"] for r in rs]
            print(f"| {task} | {k} | " + " | ".join(cells) + f" | {statistics.median(cell_loads):.1f} |")


def report_repeats(repeats):
    """The same edit sent again and again: drafted counts and their largest distance from the median."""
    if not repeats:
        return
    print("\nthe same edit sent in a row, 1 stream: drafted (accepted) per request")
    print("| engine | drafted (accepted) | largest distance from the median | tok/s (range) | load |")
    print("|---|---|---|---|---|")
    for name, rs in repeats.items():
        drafted = [r["draft_n"] for r in rs]
        med = statistics.median(drafted)
        dist = max(abs(d - med) for d in drafted) / med if med else 0.0
        tps = [r["tok_s"] for r in rs]
        print(f"| {name} | " + ", ".join(f"{r['draft_n']} ({r['draft_ok']})" for r in rs) + f" | {dist:.0%} | "
              f"{statistics.median(tps):.1f} ({min(tps):.1f}-{max(tps):.1f}) | "
              f"{statistics.median(r['load'] for r in rs):.1f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the Qwen2.5-Coder-0.5B test fixture if "
                                                  "present, else the built-in SmolLM2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--tasks", default="edit,complete,free")
    ap.add_argument("--engines", default="strata,llama-server,llama-server-ngram,strata-draft",
                    help="of strata, strata-nospec (speculation off), llama-server, llama-server-ngram "
                         "(--spec-type ngram-simple), strata-draft (with --draft)")
    ap.add_argument("--repeat", type=int, default=5, help="then the edit this many times in a row (0: not)")
    ap.add_argument("--draft", default=None, help="a GGUF with the model's vocabulary that drafts for it (the row "
                                                  "strata-draft; the model itself measures the overhead)")
    asyncio.run(main(ap.parse_args()))
