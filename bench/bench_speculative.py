"""Speculative decoding on a set of workloads: Strata (prompt-lookup drafts, on by default where measured step costs
say they pay) against llama-server from the same llama.cpp at its defaults (no speculation) and with each of its
prompt-lookup modes (`--spec-type ngram-simple`, `ngram-map-k`, `ngram-map-k4v`, `ngram-mod`, `ngram-cache`, at
their defaults), through the OpenAI API, same model, threads and slots. `llama-server-read` is llama-server with its
weights read into huge pages as Strata's CPU-only plans read them (`-lm none`, glibc's malloc asking for THP): against
it, the speculation's own gain.

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python 0.3.36's vendored llama.cpp
                                         # (or STRATA_BENCH_LLAMA_SERVER=path/to/llama-server)
    .venv/bin/python bench/bench_speculative.py [--model PATH] [--threads 1] [--reps 3] [--streams 1]
        [--tasks rename,hints,json,write,diff,extract,complete,free]
        [--engines strata,llama-server,llama-server-ngram-simple,...[,llama-server-read][,strata-nospec][,strata-N]]
        [--draft PATH]                   # adds strata-draft: PATH (same vocabulary) drafts for the model
        [--draft-log FILE]               # Strata's runner at DEBUG: each draft decision, then the lengths taken
        [--repeat N]                     # then the rename sent N times in a row (do drafts repeat?)

Workloads (bench/spec_workloads.py): six editing workloads whose replies copy their prompt in different ways
(rename through a module, add type hints, reformat JSON, an agent's Write tool call with one function changed,
apply a diff, extract a function; ChatML prompts, temperature 0), code completion (temperature 0) and free text
(temperature 0.8, seeds fixed). All go raw to /v1/completions, so both servers decode the same prompt tokens;
greedy replies that differ between engines are reported (a near-tie decoded in another batch shape can do that).
Generation tok/s per configuration = completion tokens / (last token - first token), summed over streams for
several streams; medians over repetitions, configurations measured in turn and the order rotated each repetition.
Acceptance = accepted / drafted tokens, from each server's `timings` (llama-server's draft_n / draft_n_accepted;
Strata renders the same object). The summary: Strata against llama-server's default and against its best prompt-
lookup mode (the one with the highest median ratio over the editing workloads), per workload and the median over
the editing workloads.
llama-server's prompt-lookup engines are restarted before each request (`--no-fresh`: not): `ngram-mod` and
`ngram-cache` keep what they saw across requests, so the same greedy request sent again drafts its whole reply
from memory (a workload's rep 2 and 3 at 88-100% acceptance, against Strata's prompt lookup, which sees only the
request's own tokens).
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

from spec_workloads import EDITS, WORKLOADS

ROOT = Path(__file__).resolve().parent.parent
SERVER = next((p for p in (Path(os.environ.get("STRATA_BENCH_LLAMA_SERVER", "/nonexistent")),
                           ROOT / "bench" / "_build" / "llama-server",
                           ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server") if p.exists()),
              ROOT / "bench" / "_build" / "llama-server")
NUM_CTX, N_PAR, N_BATCH = 4096, 4, 512
QWEN = Path.home() / ".cache" / "strata-test-models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"   # the tests' fixture
# llama-server's prompt-lookup modes (`--spec-type`, each at its defaults): an engine `llama-server-<mode>` each
NGRAM_MODES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


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
                 creates=(), stderr: str | None = None):
        self.stderr = stderr                # a file for the server's stderr (--draft-log), else discarded
        self.name, self.cmd, self.port, self.model, self.env, self.pre, self.health = \
            name, cmd, port, model, env, pre, health
        self.creates = creates              # /api/create bodies posted once healthy (Strata's draft-model row)
        self.url = f"http://127.0.0.1:{port}"
        self.proc = self.session = None

    async def start(self):
        if self.pre:
            subprocess.run(self.pre, env=self.env, check=True, capture_output=True)
        err = open(self.stderr, "w") if self.stderr else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=err)
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
        _edit, prompt, temp, n_max = WORKLOADS[task]
        # the same sampling on both: repeat penalty off (llama-server's default; Strata's, like Ollama's, is 1.1,
        # which also makes a reply that must repeat its prompt come out differently), top-k 40, top-p off
        knobs = {"repeat_penalty": 1.0, "top_k": 40, "top_p": 1.0}
        body = {"model": self.model, "max_tokens": n_max, "temperature": temp, "seed": seed, "stream": True,
                "prompt": prompt, **knobs, "options": knobs}
        first = last = None
        parts, timings, usage = [], {}, {}
        async with self.session.post(self.url + "/v1/completions", json=body) as r:
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
                    text = ch.get("text")
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
                "texts": [r["text"] for r in rs], "load": max(load0, load_average())}

    async def stop(self):
        if self.session:
            await self.session.close()
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def llama_server(name: str, model: str, threads: int, extra: list[str], env=None) -> Server:
    port = free_port()
    cmd = [str(SERVER), "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(NUM_CTX * N_PAR),
           "-np", str(N_PAR), "-b", str(N_BATCH), "-ub", str(N_BATCH), "--no-kv-unified", "-fa", "auto", "--jinja",
           "--no-webui", "--host", "127.0.0.1", "--port", str(port), *extra]
    return Server(name, cmd, port, "model", env=env)


def llama_server_read(name: str, model: str, threads: int) -> Server:
    """llama-server with its weights read into memory that glibc's malloc asks huge pages for, as Strata's CPU-only
    plans load them (Layout.load_mode "read"): Strata against it is the speculation's own gain, without the memory's."""
    env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    return llama_server(name, model, threads, ["-lm", "none"], env=env)


def strata(name: str, model: str, threads: int, speculative: str, draft: str | None = None,
           log: str | None = None) -> Server:
    port = free_port()
    home = tempfile.mkdtemp(prefix="strata-bench-spec-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env.update(STRATA_HOME=home, STRATA_HOST=f"127.0.0.1:{port}", STRATA_NUM_PARALLEL=str(N_PAR),
               STRATA_NUM_CTX=str(NUM_CTX), STRATA_KEEP_ALIVE="-1", STRATA_NUM_THREADS=str(threads),
               STRATA_SPECULATIVE=speculative, PYTHONPATH=str(ROOT))
    if log:                                 # every draft decision (ngram_draft.py), for the lengths taken
        env["STRATA_RUNNER_LOG"] = "DEBUG"
    pre = [sys.executable, "-m", "app", "import", model, "--name", "bench"]
    if draft is None:
        return Server(name, [sys.executable, "-m", "app", "serve"], port, "bench", env=env, pre=pre,
                      health="/api/version", stderr=log)
    # a draft model (--draft): imported from its GGUF, named by the benchmarked model's `draft` parameter
    creates = [{"model": "bench-draft", "from": draft}, {"model": "bench-drafted", "from": "bench",
                                                         "parameters": {"draft": "bench-draft"}}]
    return Server(name, [sys.executable, "-m", "app", "serve"], port, "bench-drafted", env=env, pre=pre,
                  health="/api/version", creates=creates)


def engines(model: str, args) -> list[Server]:
    wanted = args.engines.split(",")
    out = []
    for name in wanted:
        if name == "strata":
            out.append(strata(name, model, args.threads, "", log=args.draft_log))
        elif name == "strata-nospec":
            out.append(strata(name, model, args.threads, "off"))
        elif name.removeprefix("strata-").isdigit():      # strata-32: the default policy with that longest draft
            out.append(strata(name, model, args.threads, name.removeprefix("strata-")))
        elif name == "strata-draft" and args.draft:
            out.append(strata(name, model, args.threads, "", draft=args.draft))
        elif name == "llama-server":
            out.append(llama_server(name, model, args.threads, []))
        elif name == "llama-server-read":
            out.append(llama_server_read(name, model, args.threads))
        elif name.removeprefix("llama-server-") in NGRAM_MODES:
            out.append(llama_server(name, model, args.threads, ["--spec-type", name.removeprefix("llama-server-")]))
        else:
            sys.exit(f"unknown engine {name!r}")
    return out


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
    servers = engines(model, args)
    tasks = args.tasks.split(",")
    streams = [int(x) for x in args.streams.split(",")]
    results: dict = {}
    repeats: dict = {}
    try:
        for s in servers:
            await s.start()
        for s in servers:                                    # load, warm up
            await s.one("free", 0)
        for rep in range(args.reps):
            for task in tasks:
                for k in streams:
                    order = servers[rep % len(servers):] + servers[:rep % len(servers)]
                    for s in order:
                        if args.fresh and s.name.removeprefix("llama-server-") in NGRAM_MODES:
                            await s.stop()               # its n-gram pool would remember the last rep's reply
                            await s.start()
                        r = await s.run(task, k, rep)
                        results.setdefault((task, k, s.name), []).append(r)
                        print(f"rep {rep + 1} {task} x{k} {s.name}: {r['tok_s']:.1f} tok/s, {r['n']} tokens, "
                              f"drafted {r['draft_n']} accepted {r['draft_ok']}, load {r['load']:.1f}",
                              file=sys.stderr, flush=True)
        for s in servers:
            if args.repeat and s.name not in ("strata-nospec", "llama-server"):
                for i in range(args.repeat):
                    r = await s.run(EDITS[0], 1, 100 + i)
                    repeats.setdefault(s.name, []).append(r)
                    print(f"repeat {i + 1} {EDITS[0]} {s.name}: drafted {r['draft_n']} accepted {r['draft_ok']}, "
                          f"{r['tok_s']:.1f} tok/s, load {r['load']:.1f}", file=sys.stderr, flush=True)
    finally:
        for s in servers:
            await s.stop()
    report(results, servers, tasks, streams, args, model)
    report_repeats(repeats)
    report_differences(results, servers, tasks, streams)
    if args.draft_log:
        report_draft_lengths(args.draft_log)


def median_ratio(results, task: str, k: int, name: str, base: str) -> float:
    med = statistics.median(r["tok_s"] for r in results[(task, k, name)])
    return med / statistics.median(r["tok_s"] for r in results[(task, k, base)])


def paired_ratio(results, task: str, k: int, name: str, base: str) -> float:
    """The median over reps of each rep's ratio: the two runs of a rep ran minutes apart at most, so a machine
    whose speed drifts by several percent over a run (a shared host) moves both alike."""
    return statistics.median(a["tok_s"] / b["tok_s"] for a, b in zip(results[(task, k, name)],
                                                                      results[(task, k, base)]))


def report(results, servers, tasks, streams, args, model):
    names = [s.name for s in servers]
    base = "llama-server" if "llama-server" in names else names[-1]
    loads = [r["load"] for rs in results.values() for r in rs]
    print(f"\nmodel {Path(model).name}, {args.threads} thread(s), {N_PAR} slots x {NUM_CTX} ctx, {args.reps} "
          f"interleaved reps, {os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f} while measuring")
    print(f"cells: generation tok/s median (range over reps), ratio of medians to {base}, drafted -> accepted "
          f"tokens summed over reps (acceptance); load = the 1-minute load average's median over the cell's runs")
    print("| task | streams | " + " | ".join(names) + " | load |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for task in tasks:
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
    modes = [n for n in names if n.removeprefix("llama-server-") in NGRAM_MODES]
    edits = [t for t in tasks if t in EDITS]
    if "strata" not in names or base != "llama-server" or not edits:
        return
    for k in streams:
        best = max(modes, key=lambda m: statistics.median(median_ratio(results, t, k, m, base) for t in edits),
                   default=None)
        print(f"\n{k} stream(s): Strata over llama-server's default" + (f" and over its best prompt-lookup mode "
              f"on the editing workloads ({best})" if best else ""))
        ratios, over_best, paired = [], [], []
        for t in tasks:
            r = median_ratio(results, t, k, "strata", base)
            p = paired_ratio(results, t, k, "strata", base)
            line = f"- {t}: {r:.2f}x (paired by rep {p:.2f}x)"
            if best:
                b = median_ratio(results, t, k, "strata", best)
                line += f", {b:.2f}x {best}"
                if t in edits:
                    over_best.append(b)
            if "llama-server-read" in names:
                line += f", {median_ratio(results, t, k, 'strata', 'llama-server-read'):.2f}x llama-server-read"
            if t in edits:
                ratios.append(r)
                paired.append(p)
            print(line)
        print(f"- median editing workload: {statistics.median(ratios):.2f}x llama-server (paired by rep "
              f"{statistics.median(paired):.2f}x)" + (f", {statistics.median(over_best):.2f}x {best}" if best else ""))


def report_differences(results, servers, tasks, streams):
    """Greedy replies that differ from the first engine's (the first differing character of the first rep that
    does): a near-tie decoded in another batch shape can make a reply differ; the speeds then compare other texts."""
    names = [s.name for s in servers]
    for task in tasks:
        if WORKLOADS[task][2] != 0.0:
            continue
        for k in streams:
            ref_runs = results[(task, k, names[0])]
            for n in names[1:]:
                reps = [(i, a["texts"][0], b["texts"][0]) for i, (a, b) in enumerate(zip(ref_runs, results[(task, k, n)]))
                        if a["texts"][0] != b["texts"][0]]
                if reps:
                    i, ref, other = reps[0]
                    at = next((j for j, (x, y) in enumerate(zip(ref, other)) if x != y), min(len(ref), len(other)))
                    print(f"note: {task} x{k}: {n}'s reply differs from {names[0]}'s in {len(reps)} of "
                          f"{len(ref_runs)} reps (rep {i + 1}: at character {at}, {ref[at:at + 24]!r} vs "
                          f"{other[at:at + 24]!r})")


def report_draft_lengths(path: str):
    """The draft lengths Strata's policy took (its DEBUG log: one `draft ... take=N` line per sequence and step)."""
    takes = []
    with open(path, errors="replace") as f:
        for line in f:
            at = line.find(" take=")
            if at >= 0 and " draft " in line:
                takes.append(int(line[at + 6:].split()[0]))
    drafted = sorted(t for t in takes if t)
    if not takes:
        print("\nno draft decisions in", path)
        return
    hist: dict[int, int] = {}
    for t in drafted:
        hist[t] = hist.get(t, 0) + 1
    print(f"\nStrata's draft lengths: {len(takes)} decisions, {len(drafted)} drafted ({len(drafted) / len(takes):.0%})"
          + (f", median {statistics.median(drafted)}, lengths: " + ", ".join(f"{k}x{v}" for k, v in
                                                                             sorted(hist.items())) if drafted else ""))


def report_repeats(repeats):
    """The same edit sent again and again: drafted counts and their largest distance from the median."""
    if not repeats:
        return
    print(f"\nthe same edit ({EDITS[0]}) sent in a row, 1 stream: drafted (accepted) per request")
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
    ap.add_argument("--streams", default="1")
    ap.add_argument("--tasks", default=",".join(WORKLOADS))
    ap.add_argument("--engines", default="strata,llama-server," + ",".join(f"llama-server-{m}" for m in NGRAM_MODES),
                    help="of strata, strata-nospec (speculation off), llama-server, llama-server-<mode> for each "
                         "--spec-type mode in " + ", ".join(NGRAM_MODES) + ", strata-draft (with --draft)")
    ap.add_argument("--no-fresh", dest="fresh", action="store_false",
                    help="keep each llama-server prompt-lookup engine running between requests (by default it is "
                         "restarted before each: ngram-mod and ngram-cache keep what they saw across requests, so a "
                         "rep after the first drafts the same reply from memory: 100%% accepted)")
    ap.add_argument("--repeat", type=int, default=0, help="then the rename this many times in a row (0: not)")
    ap.add_argument("--draft", default=None, help="a GGUF with the model's vocabulary that drafts for it (the row "
                                                  "strata-draft; the model itself measures the overhead)")
    ap.add_argument("--draft-log", default=None, help="write Strata's server log (its runner at DEBUG) to this file "
                                                      "and report the draft lengths its policy took")
    asyncio.run(main(ap.parse_args()))
