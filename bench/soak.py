"""Soak test: many clients on one real `strata serve` (loopback only) for a set time.

    .venv/bin/python bench/soak.py                 # 5 minutes, 32 clients, SmolLM2
    .venv/bin/python bench/soak.py --seconds 60 --json soak.json

32 clients loop over streamed and non-streamed /api/generate and /api/chat, /api/embed and a streamed OpenAI
chat, with small random outputs; a quarter of them disconnect at random points (while queued, before the first
byte, mid-stream, mid-answer). The service runs in its own process (so its RSS is its own), with its own empty
STRATA_HOME. After a warm-up (every kind of request at full concurrency, so lazily built things exist), the
soak measures; at the end it waits for in-flight work to drain and reports:

  requests done, disconnects, errors by kind (only 503 "busy" from a full queue is allowed), slots in use at the
  end from /api/ps and /metrics (must be 0), the service's RSS at start and end (growth under 5%), runner
  restarts (0: same runner pid, no new load in /metrics).

Bounded: every request has a deadline (a hang is reported as an error), the run has a fixed length, clients
are a fixed number, and the service is stopped at the end whatever happens. Exit status 1 if an invariant fails.
tests/integration/service/test_soak_short.py runs the same code for ~40 s in CI.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

MODEL = "smollm2:135m"
ROOT = Path(__file__).resolve().parent.parent
KINDS = ("generate_stream", "generate", "chat_stream", "chat", "embed", "openai_chat_stream")
WORDS = ("sky", "river", "stone", "light", "engine", "garden", "number", "winter", "signal", "paper")


@dataclass
class SoakConfig:
    seconds: float = 300.0
    clients: int = 32
    disconnect_fraction: float = 0.25      # this share of the clients disconnect at random points
    disconnect_rate: float = 0.6           # ... on this share of their requests
    warmup_seconds: float = 20.0
    num_parallel: int = 4
    max_queue: int = 512
    num_ctx: int = 1024
    threads: int = 2
    max_tokens: int = 24
    request_timeout: float = 120.0         # a request slower than this is a hang
    drain_timeout: float = 60.0
    rounds: int = 5                        # the measured time is cut into rounds; RSS is read after each drains
    rss_trend_limit: float = 0.01          # a leak: RSS rose after every round of the second half, by more
    rss_trend_floor: int = 4 << 20         # than this share of the start (and this many bytes) in all
    seed: int = 1
    python: str = sys.executable


@dataclass
class Tally:
    done: Counter = field(default_factory=Counter)            # kind -> completed requests
    disconnects: Counter = field(default_factory=Counter)     # where -> deliberate disconnects
    errors: Counter = field(default_factory=Counter)          # "what" -> count
    allowed: Counter = field(default_factory=Counter)         # tolerated answers (503 busy)
    tokens: int = 0
    latency: dict = field(default_factory=dict)               # kind -> [seconds of each completed request]

    def merge(self, other: "Tally") -> None:
        self.done.update(other.done)
        self.disconnects.update(other.disconnects)
        self.errors.update(other.errors)
        self.allowed.update(other.allowed)
        self.tokens += other.tokens
        for k, v in other.latency.items():
            self.latency.setdefault(k, []).extend(v)

    def finished(self, kind: str, seconds: float) -> None:
        self.done[kind] += 1
        self.latency.setdefault(kind, []).append(seconds)


# ---- the service process -----------------------------------------------------------------------------------

class Service:
    """`strata serve` in a child process on a free loopback port, with its own STRATA_HOME."""

    def __init__(self, cfg: SoakConfig, home: Path):
        env = dict(os.environ)
        env.update({
            "STRATA_HOME": str(home), "STRATA_EXTERNAL_MODELS": "0", "STRATA_NUM_PARALLEL": str(cfg.num_parallel),
            "STRATA_MAX_QUEUE": str(cfg.max_queue), "STRATA_NUM_CTX": str(cfg.num_ctx),
            "STRATA_NUM_THREADS": str(cfg.threads), "STRATA_KEEP_ALIVE": "-1",
        })
        for k in ("STRATA_API_KEY", "STRATA_DEVICES", "STRATA_TEST_FAIL", "STRATA_TEST_ABORT_MARKER"):
            env.pop(k, None)
        self.log_path = home / "serve.log"
        self._log = open(self.log_path, "wb")
        serve = [cfg.python, "-c", "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))",
                 "serve", "--host", "127.0.0.1:0", "--log-level", "warning"]
        self.proc = subprocess.Popen(serve, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log,
                                     start_new_session=True)
        # a thread reads stdout (so a chatty service never blocks on a full pipe, and the wait has a deadline)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.url = self._read_url(timeout=120)

    def _pump(self) -> None:
        for raw in self.proc.stdout:
            self._lines.put(raw.decode(errors="replace"))
        self._lines.put(None)

    def _read_url(self, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                line = self._lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                self.proc.wait(10)
                raise RuntimeError(f"strata serve exited with {self.proc.returncode}; see {self.log_path}")
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                return m.group(1)
        self.stop()
        raise RuntimeError(f"strata serve did not say where it listens within {timeout:.0f} s")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                # the service and its runners are in the session this script started: end them all
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (Linux /proc; elsewhere `ps`)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True, timeout=10)
        return int(out.stdout.strip()) * 1024
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


# ---- observing the service ---------------------------------------------------------------------------------

async def model_state(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(url + "/api/ps") as r:
        models = (await r.json())["models"]
    m = next((m for m in models if m["name"] == MODEL), None)
    return m["strata"] if m else {}


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


async def metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as r:
        return parse_metrics(await r.text())


def loads_ok(m: dict[str, float]) -> int:
    return int(m.get(f'strata_model_loads_total{{model="{MODEL}",result="ok"}}', 0))


# ---- clients -----------------------------------------------------------------------------------------------

def make_request(kind: str, rng: random.Random) -> tuple[str, dict, bool]:
    """(path, body, streamed) for one request of this kind."""
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))
    opts = {"num_predict": rng.randint(2, MAX_TOKENS[0]), "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randint(0, 10**6)}
    if kind in ("generate_stream", "generate"):
        return "/api/generate", {"model": MODEL, "prompt": f"Write about {words}.", "options": opts,
                                 "stream": kind == "generate_stream"}, kind == "generate_stream"
    if kind in ("chat_stream", "chat"):
        msgs = [{"role": "user", "content": f"Tell me about {words}."}]
        if rng.random() < 0.3:
            msgs = [{"role": "system", "content": "Be brief."}, *msgs,
                    {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go on."}]
        return "/api/chat", {"model": MODEL, "messages": msgs, "options": opts,
                             "stream": kind == "chat_stream"}, kind == "chat_stream"
    if kind == "embed":
        return "/api/embed", {"model": MODEL, "input": [words] * rng.randint(1, 3)}, False
    return "/v1/chat/completions", {"model": MODEL, "stream": True, "max_tokens": opts["num_predict"],
                                    "messages": [{"role": "user", "content": words}]}, True


MAX_TOKENS = [24]        # set from the config (module-level so make_request stays a pure helper)


def _error_of(obj) -> str | None:
    if isinstance(obj, dict) and "error" in obj:
        e = obj["error"]
        return e.get("message", str(e)) if isinstance(e, dict) else str(e)
    return None


async def one_request(session, url: str, kind: str, rng: random.Random, tally: Tally, disconnect: str | None,
                      timeout: float) -> None:
    path, body, streamed = make_request(kind, rng)
    cut_after_lines = rng.randint(1, 6)
    t0 = time.monotonic()

    async def go():
        async with session.post(url + path, json=body) as resp:
            if resp.status != 200:
                text = await resp.text()
                try:
                    msg = _error_of(json.loads(text)) or text[:80]
                except ValueError:
                    msg = f"non-JSON error body {text[:60]!r}"
                if resp.status == 503 and "busy" in msg:
                    tally.allowed["503 queue full"] += 1
                    # a polite client waits as Retry-After says (scaled down, jittered) before the next try
                    retry = float(resp.headers.get("Retry-After", "1") or 1)
                    await asyncio.sleep(rng.uniform(0.1, min(retry, 2.0)))
                else:
                    tally.errors[f"{kind}: HTTP {resp.status}: {msg[:100]}"] += 1
                return
            if not streamed:
                obj = await resp.json()
                err = _error_of(obj)
                if err:
                    tally.errors[f"{kind}: error body: {err[:100]}"] += 1
                    return
                if kind == "embed" and len(obj.get("embeddings", [])) != len(body["input"]):
                    tally.errors[f"{kind}: wrong number of embeddings"] += 1
                    return
                tally.tokens += int(obj.get("eval_count", 0) or 0)
                tally.finished(kind, time.monotonic() - t0)
                return
            lines = 0
            finished = False
            async for raw in resp.content:
                line = raw.decode(errors="replace").strip()
                if not line or line.startswith(":"):   # an SSE comment (a queued or long-prompt stream's keepalive),
                    continue                           # which every SSE client skips
                if line.startswith("data: "):
                    line = line[6:]
                    if line == "[DONE]":
                        finished = True
                        break
                obj = json.loads(line)
                err = _error_of(obj)
                if err:
                    tally.errors[f"{kind}: error in stream: {err[:100]}"] += 1
                    return
                lines += 1
                if obj.get("done") is True:
                    tally.tokens += int(obj.get("eval_count", 0) or 0)
                    finished = True
                if disconnect == "mid_stream" and lines >= cut_after_lines and not finished:
                    tally.disconnects["mid-stream"] += 1
                    resp.close()                   # drop the connection with the answer half read
                    return
            if finished:
                tally.finished(kind, time.monotonic() - t0)
            else:
                tally.errors[f"{kind}: stream ended without done/[DONE]"] += 1

    if disconnect in ("early", "mid_answer"):
        # early: very likely while queued or before the first byte; mid_answer: during the generation
        delay = rng.uniform(0.0, 0.3) if disconnect == "early" else rng.uniform(0.3, 2.5)
        try:
            await asyncio.wait_for(go(), delay)
        except asyncio.TimeoutError:
            tally.disconnects[disconnect.replace("_", "-")] += 1
        return
    try:
        await asyncio.wait_for(go(), timeout)
    except asyncio.TimeoutError:
        tally.errors[f"{kind}: no answer within {timeout:.0f} s (hang)"] += 1


async def client(i: int, session, url: str, cfg: SoakConfig, until: float, tally: Tally, disconnector: bool):
    rng = random.Random(cfg.seed * 1000 + i)
    while time.monotonic() < until:
        kind = rng.choice(KINDS)
        disconnect = None
        if disconnector and rng.random() < cfg.disconnect_rate:
            disconnect = rng.choice(["early", "mid_answer"] + (["mid_stream"] * 2 if "stream" in kind else []))
        try:
            await one_request(session, url, kind, rng, tally, disconnect, cfg.request_timeout)
        except (aiohttp.ClientError, ConnectionError) as e:
            tally.errors[f"{kind}: connection {type(e).__name__}: {str(e)[:80]}"] += 1
            await asyncio.sleep(0.1)
        except (ValueError, KeyError) as e:          # a malformed answer
            tally.errors[f"{kind}: malformed answer {type(e).__name__}: {str(e)[:80]}"] += 1


async def phase(url: str, cfg: SoakConfig, seconds: float) -> Tally:
    until = time.monotonic() + seconds
    n_disc = round(cfg.clients * cfg.disconnect_fraction)
    tallies = [Tally() for _ in range(cfg.clients)]
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as session:
        await asyncio.gather(*(client(i, session, url, cfg, until, tallies[i], i < n_disc)
                               for i in range(cfg.clients)))
    total = Tally()
    for t in tallies:
        total.merge(t)
    return total


async def drain(session, url: str, timeout: float) -> dict:
    end = time.monotonic() + timeout
    st = {}
    while time.monotonic() < end:
        st = await model_state(session, url)
        if st.get("slots_busy", 0) == 0 and st.get("queued", 0) == 0:
            break
        await asyncio.sleep(0.2)
    return st


# ---- the run -----------------------------------------------------------------------------------------------

async def soak_against(url: str, service_pid: int, cfg: SoakConfig, log=print) -> dict:
    MAX_TOKENS[0] = cfg.max_tokens
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=cfg.request_timeout)) as s:
        async with s.post(url + "/api/generate", json={"model": MODEL}) as r:       # load once
            assert r.status == 200, await r.text()
    log(f"model loaded; warming up {cfg.warmup_seconds:.0f} s with {cfg.clients} clients")
    warm = await phase(url, cfg, cfg.warmup_seconds)
    async with aiohttp.ClientSession() as s:
        await drain(s, url, cfg.drain_timeout)
        st0, m0 = await model_state(s, url), await metrics(s, url)
    rss0 = rss_bytes(service_pid)
    runner_pid0 = st0.get("pid")
    runner_rss0 = rss_bytes(runner_pid0) if runner_pid0 else None
    log(f"soak: {cfg.seconds:.0f} s, service RSS {rss0 / 2**20:.1f} MiB, runner pid {runner_pid0}")

    samples: list[tuple[float, int | None]] = []

    async def sample_rss(stop: asyncio.Event):
        t0 = time.monotonic()
        while not stop.is_set():
            samples.append((round(time.monotonic() - t0, 1), rss_bytes(service_pid)))
            try:
                await asyncio.wait_for(stop.wait(), 10)
            except asyncio.TimeoutError:
                pass

    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_rss(stop))
    t0 = time.monotonic()
    # Rounds of load, each drained before RSS is read: a leak shows as a rise after every round however fast the
    # machine is (a slow machine serves fewer requests a round, and leaks less a round, but still every round)
    tally, rounds_rss = Tally(), [rss0]
    for _ in range(max(1, cfg.rounds)):
        tally.merge(await phase(url, cfg, cfg.seconds / max(1, cfg.rounds)))
        async with aiohttp.ClientSession() as s:
            await drain(s, url, cfg.drain_timeout)
        rounds_rss.append(rss_bytes(service_pid))
    elapsed = time.monotonic() - t0
    stop.set()
    await sampler
    async with aiohttp.ClientSession() as s:
        st1 = await drain(s, url, cfg.drain_timeout)
        m1 = await metrics(s, url)
        # still serving: one more request of each plain kind
        async with s.post(url + "/api/generate", json={"model": MODEL, "prompt": "Hi", "stream": False,
                                                       "options": {"num_predict": 2}}) as r:
            alive_after = r.status == 200
    rss1 = rss_bytes(service_pid)
    runner_pid1 = st1.get("pid")
    busy_metrics = m1.get(f'strata_slots_busy{{model="{MODEL}"}}')
    summary = {
        "config": asdict(cfg),
        "seconds": round(elapsed, 1),
        "requests_done": sum(tally.done.values()),
        "done_by_kind": dict(tally.done),
        "requests_per_second": round(sum(tally.done.values()) / elapsed, 2) if elapsed else 0,
        "completion_tokens": tally.tokens,
        "disconnects": dict(tally.disconnects),
        "disconnects_total": sum(tally.disconnects.values()),
        "errors": dict(tally.errors),
        "errors_total": sum(tally.errors.values()),
        "allowed": dict(tally.allowed),
        "latency_s": {k: percentiles(v) for k, v in sorted(tally.latency.items())},
        "warmup_requests_done": sum(warm.done.values()),
        "warmup_errors": dict(warm.errors),
        "slots_busy_end_ps": st1.get("slots_busy"),
        "queued_end_ps": st1.get("queued"),
        "slots_busy_end_metrics": busy_metrics,
        "service_rss_start": rss0,
        "service_rss_end": rss1,
        "service_rss_growth": (rss1 - rss0) / rss0 if rss0 and rss1 else None,
        "service_rss_rounds": rounds_rss,
        "service_rss_samples_mib": [(t, round(b / 2**20, 1) if b else None) for t, b in samples],
        "runner_pid_start": runner_pid0,
        "runner_pid_end": runner_pid1,
        "runner_rss_start": runner_rss0,
        "runner_rss_end": rss_bytes(runner_pid1) if runner_pid1 else None,
        "runner_restarts": (loads_ok(m1) - loads_ok(m0)) + (1 if runner_pid0 != runner_pid1 and
                                                            loads_ok(m1) == loads_ok(m0) else 0),
        "alive_after": alive_after,
    }
    summary["failures"] = check(summary, cfg)
    return summary


def percentiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {}
    pick = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)      # noqa: E731
    return {"n": len(xs), "p50": pick(0.5), "p95": pick(0.95), "max": round(xs[-1], 2)}


def leaking(rss: list[int], cfg: SoakConfig) -> bool:
    """RSS after each round (the first value before any): a leak keeps growing once the first rounds have
    warmed the allocator and caches, so the second half rises at every step and by more than the noise floor."""
    tail = rss[len(rss) // 2:]
    rising = len(tail) >= 2 and all(b > a for a, b in zip(tail, tail[1:]))
    return rising and tail[-1] - tail[0] > max(cfg.rss_trend_limit * rss[0], cfg.rss_trend_floor)


def check(s: dict, cfg: SoakConfig) -> list[str]:
    """The invariants; an empty list means the soak passed."""
    bad = []
    if s["errors_total"] or s["warmup_errors"]:
        bad.append(f"errors other than 503 queue-full: {s['errors'] or s['warmup_errors']}")
    if s["requests_done"] == 0:
        bad.append("no request completed")
    if cfg.disconnect_fraction > 0 and s["disconnects_total"] == 0:
        bad.append("no client disconnected")
    if s["slots_busy_end_ps"] != 0 or s["queued_end_ps"] != 0:
        bad.append(f"slots still in use at the end: busy {s['slots_busy_end_ps']}, queued {s['queued_end_ps']}")
    if s["slots_busy_end_metrics"] not in (0, 0.0):
        bad.append(f"/metrics says {s['slots_busy_end_metrics']} slots busy at the end")
    rss = s.get("service_rss_rounds") or []
    if len(rss) < 2 or any(b is None for b in rss):
        bad.append("service RSS could not be read")
    elif leaking(rss, cfg):
        mib = ", ".join(f"{b / 2**20:.1f}" for b in rss)
        bad.append(f"service RSS grew after every round of the second half (a leak): {mib} MiB")
    if s["runner_restarts"] != 0 or s["runner_pid_start"] != s["runner_pid_end"]:
        bad.append(f"runner restarted ({s['runner_restarts']} loads, pid {s['runner_pid_start']} -> "
                   f"{s['runner_pid_end']})")
    if not s["alive_after"]:
        bad.append("the service did not answer after the soak")
    return bad


def run_soak(cfg: SoakConfig, log=print) -> dict:
    """Start a service, soak it, stop it; the summary dict (its "failures" list is empty on success)."""
    with tempfile.TemporaryDirectory(prefix="strata-soak-") as tmp:
        svc = Service(cfg, Path(tmp))
        try:
            log(f"strata serve (pid {svc.pid}) at {svc.url}")
            summary = asyncio.run(soak_against(svc.url, svc.pid, cfg, log))
        except BaseException:
            sys.stderr.write(svc.log_path.read_text(errors="replace")[-4000:])
            raise
        finally:
            code = svc.stop()
        summary["service_exit_code"] = code
        if code not in (0, None):
            summary["failures"].append(f"strata serve exited with {code}")
            summary["serve_log_tail"] = svc.log_path.read_text(errors="replace")[-2000:]
    return summary


def report(s: dict) -> str:
    mib = lambda b: f"{b / 2**20:.1f} MiB" if b else "?"          # noqa: E731
    growth = s["service_rss_growth"]
    lines = [
        f"soak: {s['config']['clients']} clients ({round(s['config']['clients'] * s['config']['disconnect_fraction'])}"
        f" disconnecting) for {s['seconds']} s on {MODEL}",
        f"requests done      {s['requests_done']} ({s['requests_per_second']}/s; {s['completion_tokens']} completion "
        f"tokens) by kind {s['done_by_kind']}",
        "latency (s)        " + ", ".join(f"{k} p50 {v['p50']} p95 {v['p95']}" for k, v in s["latency_s"].items()),
        f"disconnects        {s['disconnects_total']} {s['disconnects']}",
        f"errors             {s['errors_total']} {s['errors'] or ''}",
        f"allowed            {s['allowed'] or 'none'}",
        f"slots in use, end  /api/ps busy {s['slots_busy_end_ps']} queued {s['queued_end_ps']}; "
        f"/metrics busy {s['slots_busy_end_metrics']}",
        f"service RSS        {mib(s['service_rss_start'])} -> {mib(s['service_rss_end'])} "
        f"({'?' if growth is None else f'{growth:+.2%}'}); after each round "
        + ", ".join(mib(b) for b in s.get("service_rss_rounds") or []),
        f"runner             pid {s['runner_pid_start']} -> {s['runner_pid_end']}, restarts {s['runner_restarts']}, "
        f"RSS {mib(s['runner_rss_start'])} -> {mib(s['runner_rss_end'])}",
        "RESULT             " + ("PASS" if not s["failures"] else "FAIL: " + "; ".join(s["failures"])),
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=300.0, help="length of the measured soak (default 300)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--warmup", type=float, default=None, help="warm-up seconds (default: 20, or seconds/4 if less)")
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads of the runner")
    ap.add_argument("--num-parallel", type=int, default=4)
    ap.add_argument("--max-queue", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args(argv)
    if not 1 <= a.clients <= 256 or not 1 <= a.seconds <= 3600:
        ap.error("--clients must be 1..256 and --seconds 1..3600")
    warm = a.warmup if a.warmup is not None else min(20.0, a.seconds / 4)
    cfg = SoakConfig(seconds=a.seconds, clients=a.clients, warmup_seconds=warm, threads=a.threads,
                     num_parallel=a.num_parallel, max_queue=a.max_queue, seed=a.seed)
    s = run_soak(cfg, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(report(s))
    if a.json:
        Path(a.json).write_text(json.dumps(s, indent=2, default=str))
    return 0 if not s["failures"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
