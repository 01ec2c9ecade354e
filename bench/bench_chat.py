"""Multi-turn chat and shared-system-prompt benchmark: Strata's service against llama-server, both through
/v1/chat/completions with streaming (the prompt cache).

    bench/build_llama_server.sh          # once: llama-server from llama-cpp-python 0.3.36's vendored llama.cpp
    .venv/bin/python bench/bench_chat.py [--threads 1] [--reps 2] [--turns 8] [--model PATH | --synthetic FAMILY]
                                         [--server PATH] [--no-shared]

--synthetic writes a family GGUF of tests/support/gguf_families.py (qwen3next, lfm2, granitehybrid, mamba, rwkv7: the
recurrent and hybrid families, whose prompt cache rests on context checkpoints; random weights, so the replies are
noise, but both engines decode the same tokens) and benchmarks it; --model benchmarks any GGUF (imported into
Strata's fresh store). Default: the built-in SmolLM2.

Both servers run as their own processes with the same model, threads, 4 slots of 2048 tokens each (per-sequence
KV streams) and n_batch = n_ubatch = 512; both with their default prompt caching (llama-server: cache_prompt on,
--cache-ram default; Strata: slot reuse, host-RAM cache, shared prefixes). Measured alternately (A then B each
turn, the order swapped every repetition) so the machine's noise hits both alike:
- chat     an 8-turn conversation per repetition (a fresh topic each time, so turn 1 is cold for both): ~150-token
           user messages, replies of at most 40 tokens (greedy), the reply sent back as the next turn's history.
           Time to first token per turn; the figure is the sum over turns 2-8.
- shared   four clients at once, one 1000-token system prompt (new each repetition), a different question each:
           aggregate time to first token (the sum of the four).
Ratios are Strata / llama-server: lower is better, <= 1.0 means Strata is at least as fast.
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
SERVER = ROOT / "bench" / "_build" / "llama-server"
if not SERVER.exists() and (ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server").exists():
    SERVER = ROOT / "bench" / "_build" / "cmake" / "bin" / "llama-server"     # built, not yet copied
NUM_CTX, N_PAR, N_BATCH = 2048, 4, 512
MAX_TOKENS = 40

WORDS = ("river mountain lantern harbor orchard meadow glacier canyon village market bridge tower garden forest "
         "island valley desert castle library window engine compass signal harvest winter summer thunder "
         "pepper copper silver marble velvet canvas ribbon feather pebble candle").split()


def user_message(topic: int, turn: int) -> str:
    """~150 tokens of plain English that differ by topic and turn."""
    k = topic * 31 + turn * 7
    sentences = []
    for i in range(9):
        a, b, c = (WORDS[(k + i * j) % len(WORDS)] for j in (1, 3, 5))
        sentences.append(f"The {a} near the {b} reminded me of a {c} we once saw")
    return (f"Topic {topic}, question {turn}: " + ". ".join(sentences)
            + ". What do you think about that, in a few words?")


def system_prompt(rep: int) -> str:
    """~1000 tokens, new for every repetition so no earlier run can have cached it."""
    lines = [f"You are assistant number {rep} of the harbor office. Follow these house rules."]
    for i in range(64):
        a, b = WORDS[(rep + i) % len(WORDS)], WORDS[(rep * 3 + i * 5) % len(WORDS)]
        lines.append(f"Rule {i}: when asked about the {a}, mention the {b} politely.")
    return " ".join(lines)


QUESTIONS = ("What is rule 3 about?", "Summarise the rules in one sentence.",
             "Which rule mentions a lantern?", "Say hello to the harbor office.")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Endpoint:
    """One OpenAI-compatible server process and a streaming chat call."""

    TIMEOUT_S = 1200          # a whole request, at most
    CONNECTIONS = 100         # aiohttp's default pool (0: no limit)
    START_S = 120             # to become healthy

    def __init__(self, name: str, cmd: list[str], port: int, model_field: str, env=None):
        self.name, self.cmd, self.port, self.model_field, self.env = name, cmd, port, model_field, env
        self.proc = None
        self.session: aiohttp.ClientSession | None = None
        self.url = f"http://127.0.0.1:{port}"

    async def start(self, health_path: str):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.TIMEOUT_S),
                                             connector=aiohttp.TCPConnector(force_close=True, limit=self.CONNECTIONS))
        for _ in range(int(self.START_S * 10)):
            try:
                async with self.session.get(self.url + health_path) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {' '.join(self.cmd)}")
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} did not become healthy")

    async def chat(self, messages: list[dict]) -> dict:
        """-> {"ttft": s, "text": reply, "prompt_tokens": n, "cached": n}"""
        # num_ctx (Strata's; llama-server ignores it): the context is fixed, so a long turn is never a reason for
        # Strata to reload the model with a larger one (which would start its caches empty)
        body = {"model": self.model_field, "messages": messages, "stream": True, "max_tokens": MAX_TOKENS,
                "temperature": 0.0, "stream_options": {"include_usage": True}, "num_ctx": NUM_CTX}
        t0 = time.perf_counter()
        ttft, parts, usage = None, [], {}
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
                    text = (ch.get("delta") or {}).get("content")
                    if text:
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        parts.append(text)
        details = usage.get("prompt_tokens_details") or {}
        return {"ttft": ttft if ttft is not None else time.perf_counter() - t0, "text": "".join(parts),
                "prompt_tokens": usage.get("prompt_tokens", 0), "cached": details.get("cached_tokens", 0)}

    async def stop(self):
        if self.session:
            await self.session.close()
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def llama_server(model: str, threads: int) -> Endpoint:
    port = free_port()
    cmd = [str(SERVER), "-m", model, "-t", str(threads), "-tb", str(threads), "-c", str(NUM_CTX * N_PAR),
           "-np", str(N_PAR), "-b", str(N_BATCH), "-ub", str(N_BATCH), "--no-kv-unified", "-fa", "auto",
           "--jinja", "--no-webui", "--host", "127.0.0.1", "--port", str(port)]
    return Endpoint("llama-server", cmd, port, "model")


def strata(model_name: str, threads: int, home: str, model_path: str | None = None) -> Endpoint:
    port = free_port()
    cmd = [sys.executable, __file__, "--serve-strata", str(port), "--threads", str(threads), "--home", home]
    if model_path:
        cmd += ["--import", model_path, "--model-name", model_name]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return Endpoint("strata", cmd, port, model_name, env=env)


def serve_strata(port: int, threads: int, home: str, import_path: str | None = None, name: str | None = None) -> None:
    """Child mode: Strata's service with a fresh store under `home` (the built-in model, and `import_path` as
    `name` when given)."""
    sys.path.insert(0, str(ROOT))
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread
    from app.service.store.model_store import ModelStore

    h = Path(home)
    if import_path:
        ModelStore(db_path=h / "strata.db", models_dir=h / "models", discover_external=False).import_gguf(
            import_path, name=name)
    cfg = ServiceConfig(port=port, n_threads=threads, num_ctx=NUM_CTX, num_parallel=N_PAR, keep_alive=-1)
    svc = ServiceThread(cfg, store_factory=lambda: ModelStore(db_path=h / "strata.db", models_dir=h / "models",
                                                              discover_external=False)).start()
    try:
        while True:
            time.sleep(3600)
    finally:
        svc.stop()


async def run_chat(engines, args) -> dict:
    """{engine: [[ttft per turn] per rep]} plus one sample of cached-token counts."""
    out = {e.name: [] for e in engines}
    cached = {e.name: [] for e in engines}
    for rep in range(args.reps):
        order = engines if rep % 2 == 0 else engines[::-1]
        convo = {e.name: [] for e in engines}
        ttfts = {e.name: [] for e in engines}
        for turn in range(args.turns):
            for e in order:
                msgs = convo[e.name] + [{"role": "user", "content": user_message(100 + rep, turn)}]
                r = await e.chat(msgs)
                convo[e.name] = msgs + [{"role": "assistant", "content": r["text"]}]
                ttfts[e.name].append(r["ttft"])
                print(f"chat rep {rep + 1} turn {turn + 1} {e.name}: TTFT {r['ttft']:.3f} s, prompt "
                      f"{r['prompt_tokens']} tokens ({r['cached']} cached)", file=sys.stderr, flush=True)
                if rep == 0:
                    cached[e.name].append((r["prompt_tokens"], r["cached"]))
        for e in engines:
            out[e.name].append(ttfts[e.name])
    return {"ttft": out, "tokens": cached}


async def run_shared(engines, args) -> dict:
    out = {e.name: [] for e in engines}
    for rep in range(args.reps):
        order = engines if rep % 2 == 0 else engines[::-1]
        for e in order:
            sys_p = system_prompt(1000 * rep + (0 if e.name == "strata" else 1))
            rs = await asyncio.gather(*(e.chat([{"role": "system", "content": sys_p},
                                                {"role": "user", "content": q}]) for q in QUESTIONS))
            out[e.name].append([r["ttft"] for r in rs])
            print(f"shared rep {rep + 1} {e.name}: TTFT " + ", ".join(f"{r['ttft']:.2f}" for r in rs) + " s",
                  file=sys.stderr, flush=True)
    return out


def report(chat: dict, shared: dict, args) -> None:
    names = list(chat["ttft"])
    s_name, l_name = names
    print(f"\n## 8-turn chat: time to first token per turn (s), median of {args.reps} reps, threads {args.threads}\n")
    print("| turn | Strata prompt / cached tokens | llama-server prompt / cached | Strata TTFT | llama-server TTFT "
          "| ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    med = {n: [statistics.median(rep[t] for rep in chat["ttft"][n]) for t in range(args.turns)] for n in names}
    for t in range(args.turns):
        pt, ct = chat["tokens"][s_name][t]
        lpt, lct = chat["tokens"][l_name][t]
        print(f"| {t + 1} | {pt} / {ct} | {lpt} / {lct} | {med[s_name][t]:.3f} | {med[l_name][t]:.3f} | "
              f"{med[s_name][t] / med[l_name][t]:.2f} |")
    sums = {n: [sum(rep[1:]) for rep in chat["ttft"][n]] for n in names}
    s_sum, l_sum = statistics.median(sums[s_name]), statistics.median(sums[l_name])
    print(f"\nsum of turns 2-{args.turns}: Strata {s_sum:.3f} s, llama-server {l_sum:.3f} s, "
          f"ratio {s_sum / l_sum:.3f} (per rep: " + ", ".join(
              f"{a / b:.2f}" for a, b in zip(sums[s_name], sums[l_name])) + ")")
    if not shared:
        return
    agg = {n: [sum(rep) for rep in shared[n]] for n in names}
    s_agg, l_agg = statistics.median(agg[s_name]), statistics.median(agg[l_name])
    print(f"\n## four clients, one 1000-token system prompt: aggregate TTFT (sum of 4), median of {args.reps}\n")
    print(f"Strata {s_agg:.3f} s, llama-server {l_agg:.3f} s, ratio {s_agg / l_agg:.3f} (per rep: " + ", ".join(
        f"{a / b:.2f}" for a, b in zip(agg[s_name], agg[l_name])) + ")")
    for n in names:
        print(f"  {n}: per-client TTFT, rep 1: " + ", ".join(f"{x:.2f}" for x in shared[n][0]))


async def main(args):
    model = args.model
    if args.synthetic:
        sys.path.insert(0, str(ROOT / "tests" / "support"))
        from gguf_factory import write_family

        model = str(write_family(args.synthetic, tempfile.mkdtemp(prefix="strata-bench-synth-"),
                                 **json.loads(args.synthetic_args)))
        args.model_name = f"bench-{args.synthetic}"
    if args.model and not args.model_name:
        args.model_name = "bench-model"
    if model is None:
        from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME, builtin_model_path

        model, model_name = str(builtin_model_path()), DEFAULT_MODEL_NAME
    else:
        model_name = args.model_name
    if not SERVER.exists() and not args.only_strata:
        sys.exit(f"{SERVER} is missing: run bench/build_llama_server.sh first")
    home = tempfile.mkdtemp(prefix="strata-bench-chat-")
    engines = [strata(model_name, args.threads, home, model if args.model or args.synthetic else None)]
    if not args.only_strata:
        engines.append(llama_server(model, args.threads))
    await engines[0].start("/api/version")
    if not args.only_strata:
        await engines[1].start("/health")
    try:
        for e in engines:                            # load and warm up (page cache, thread pools)
            await e.chat([{"role": "user", "content": "Hello"}])
        chat = await run_chat(engines, args) if args.turns else None
        shared = await run_shared(engines, args) if args.shared else None
    finally:
        for e in engines:
            await e.stop()
    if args.only_strata:
        print("\n| turn | prompt tokens | cached tokens | TTFT s |\n| ---: | ---: | ---: | ---: |")
        for t, ((pt, ct), ttft) in enumerate(zip(chat["tokens"]["strata"], chat["ttft"]["strata"][0])):
            print(f"| {t + 1} | {pt} | {ct} | {ttft:.3f} |")
        return
    report(chat, shared, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"chat": chat, "shared": shared}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF path (default: the built-in SmolLM2)")
    ap.add_argument("--model-name", default=None, help="Strata's name for --model (it must be in Strata's store)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--synthetic", default=None, help="a tests/support/gguf_families.py family to write and benchmark")
    ap.add_argument("--synthetic-args", default="{}",
                    help='the family writer\'s sizes as JSON, e.g. \'{"n_embd": 512, "n_layer": 8}\'')
    ap.add_argument("--server", default=None, help="llama-server binary (default: bench/_build/llama-server)")
    ap.add_argument("--no-shared", dest="shared", action="store_false", help="skip the shared-system-prompt part")
    ap.add_argument("--only-strata", action="store_true",
                    help="no llama-server: the chat part's prompt and cached tokens per turn (one rep)")
    ap.add_argument("--import", dest="import_path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--json", default=None, help="also write raw results here")
    ap.add_argument("--serve-strata", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--home", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.server:
        SERVER = Path(a.server)
    if a.serve_strata is not None:
        serve_strata(a.serve_strata, a.threads, a.home, a.import_path, a.model_name)
    else:
        sys.path.insert(0, str(ROOT))
        asyncio.run(main(a))
