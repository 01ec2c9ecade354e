"""Coding agents end to end on Strata: Claude Code, Codex (custom provider and --oss) and OpenCode, each started by
`strata launch` on Qwen2.5-Coder-0.5B-Instruct, asked to do one small task in an empty project folder.

    make agents-e2e                       # or: .venv/bin/python bench/agents_e2e.py [--agents claude,codex,...]
        [--model-file GGUF] [--timeout 1500] [--task "..."] [--task-for AGENT="..."] [--out DIR] [--parallel]

Not part of the test suite (an agent's first request carries 5,000-20,000 prompt tokens; on 2 CPU cores a run takes
minutes per agent). What runs:
- the agent CLIs (app/cli/agents.py's AGENTS; one from npm is installed with `npm install -g` when missing, one
  from PyPI must be on PATH), each in its non-interactive mode with its tools allowed;
- `strata serve` in a fresh STRATA_HOME with the model imported as `coder:0.5b` (tests/support/model_cache.py's
  Qwen fixture by default), loaded once before the agents start so load time is not counted as a first token;
- a logging proxy in this process between the agent and the service: every request, its status, a refusal's
  message, the time to the first token of the reply (first text, thinking or tool-call delta), the prompt tokens
  the reply's usage reports, the tool calls the model made and whether the agent sent back their results;
- per agent, `strata launch AGENT --model coder:0.5b -- <non-interactive task>` with STRATA_HOST pointing at the
  proxy, in a fresh project folder and a fresh HOME (the user's agent settings are not read or changed). For
  `codex --oss` the proxy listens on 127.0.0.1:11434 (Codex's default) while holding /work/port11434.lock
  (STRATA_E2E_PORT_LOCK), as the port is shared.

`--parallel` runs the agents at the same time (each with its own proxy and project; the service gets two slots per
agent: the agents send side requests, titles and summaries, beside the main one): the wall time is the slowest
agent's instead of the sum, and every time to first token includes the others' prompts.

Per agent it reports: exit status, requests, refused requests (4xx/5xx with their messages), tool calls made and
executed (a result for the call's id came back), whether the task is done (the file exists with the content),
prompt tokens of the first request and the largest, prompt tokens sent / found in the prompt cache / computed
(summed over the replies that reported usage), time to first token of the first request and the median of
the later ones, wall time; then a markdown table. Everything the proxy saw (each request's body and its reply as it came) is in OUT/AGENT/requests.jsonl, the
agent's output in OUT/AGENT/agent.log, the service's log in OUT/serve.log.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

MODEL = "coder:0.5b"
TASK = "Create a file named hello.txt in the current directory containing exactly the word hi."
FILE, CONTENT = "hello.txt", "hi"
RUNS = ("claude", "codex", "codex-oss", "opencode", "qwen", "crush", "droid", "pi", "continue", "copilot", "aider",
        "mini", "claude-compact")
DEFAULT_RUNS = ("claude", "codex", "codex-oss", "opencode")     # `make agents-e2e`; the others with --agents
OSS_PORT = 11434
# claude-compact: a session that grows past the input budget launch tells Claude Code, so that it compacts. With
# `--tools Read,Write,Bash` its first request is ~3,000 tokens and, on a 32,768 context, it compacts past 11,576
# (32,768 - 8,192 - 13,000). One file of this repository (app/cli/agents.py, ~12,000 tokens as Read returns it,
# over 13,000 by Claude Code's own estimate of 3 characters a token) passes that with the first call the model
# makes. The task names the file by its absolute path, as Read wants it: a 0.5B model guesses a wrong one otherwise,
# and asked to read several files one after another it reads one of them again and again (Claude Code answers a
# repeated Read with "file unchanged"), so the session would not grow.
COMPACT_FILES = {"agents.py": "app/cli/agents.py"}
COMPACT_TASK = ("Read the file {folder}/agents.py with the Read tool. Then write a file named summary.txt with one "
                "line saying what agents.py does.")
COMPACT_DONE = "summary.txt"
# Claude Code's own texts: its compaction request's instruction, and the first turn after a compaction
COMPACT_ASK = "Your task is to create a detailed summary of"
COMPACT_CONTINUED = "This session is being continued from a previous conversation"


def agent_command(run: str, task: str) -> list[str]:
    """`strata launch` arguments of one run: the agent's non-interactive mode, its permissions opened for the
    project folder (it is a throwaway folder)."""
    if run == "claude":
        return ["claude", "--model", MODEL, "--", "-p", task, "--dangerously-skip-permissions", "--max-turns", "8"]
    if run == "claude-compact":
        return ["claude", "--model", MODEL, "--", "-p", task, "--tools", "Read,Write,Bash",
                "--dangerously-skip-permissions", "--max-turns", "12"]
    if run in ("codex", "codex-oss"):
        oss = ["--oss"] if run == "codex-oss" else []
        return ["codex", *oss, "--model", MODEL, "--", "exec", "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox", task]
    if run == "opencode":
        return ["opencode", "--model", MODEL, "--", "run", task]
    tails = {"qwen": [task, "--yolo"], "crush": ["-y", "run", task], "droid": ["exec", "--auto", "high", task],
             "pi": ["-p", task], "continue": ["-p", task, "--auto"], "copilot": ["-p", task, "--allow-all"],
             "aider": ["--yes-always", "--no-git", "--message", task, FILE],
             "mini": ["-t", task, "-y", "--exit-immediately"]}
    if run in tails:
        return [run, "--model", MODEL, "--", *tails[run]]
    raise ValueError(run)


# ---- what a reply says: first token, usage, tool calls --------------------------------------------------------

@dataclass
class Exchange:
    method: str
    path: str
    user_agent: str
    request_bytes: int
    started: float
    status: int = 0
    ttft: float | None = None              # seconds to the first generated token (text, thinking or tool call)
    elapsed: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None       # of prompt_tokens, found in Strata's prompt cache (the reply's usage)
    tool_calls: list = field(default_factory=list)       # (id, name)
    results_sent: list = field(default_factory=list)     # tool call ids whose results this request carries
    error: str | None = None
    stream_error: str | None = None
    stop: str | None = None
    client_closed: bool = False            # the agent hung up before the reply ended (its own timeout, or killed)

    def row(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


TOKEN_EVENTS = {"content_block_delta", "response.output_text.delta", "response.reasoning_text.delta",
                "response.function_call_arguments.delta", "response.custom_tool_call_input.delta",
                "response.reasoning_summary_text.delta"}


def tool_results_in(body: dict) -> list[str]:
    """The tool-call ids whose results a request sends back (Anthropic tool_result, Responses
    function_call_output / custom_tool_call_output, OpenAI chat tool messages)."""
    ids = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" and m.get("tool_call_id"):
            ids.append(m["tool_call_id"])
        content = m.get("content")
        if isinstance(content, list):
            ids += [b.get("tool_use_id") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    inp = body.get("input")
    if isinstance(inp, list):
        ids += [i.get("call_id") for i in inp if isinstance(i, dict)
                and i.get("type") in ("function_call_output", "custom_tool_call_output")]
    return [i for i in ids if i]


class ReplyReader:
    """Reads a reply as it streams (SSE of the Anthropic, Responses or chat dialect, or a whole JSON body)."""

    def __init__(self, ex: Exchange):
        self.ex, self.buf, self.whole = ex, b"", b""
        self.chat_calls: dict[int, list] = {}

    def feed(self, chunk: bytes, now: float) -> None:
        self.whole += chunk if len(self.whole) < 4 << 20 else b""
        self.buf += chunk
        while b"\n\n" in self.buf:
            event, self.buf = self.buf.split(b"\n\n", 1)
            self._event(event.decode("utf-8", "replace"), now)

    def _token(self, now: float) -> None:
        if self.ex.ttft is None:
            self.ex.ttft = now - self.ex.started

    def _event(self, text: str, now: float) -> None:
        data = "\n".join(line[5:].lstrip() for line in text.splitlines() if line.startswith("data:"))
        if not data or data == "[DONE]":
            return
        try:
            ev = json.loads(data)
        except ValueError:
            return
        if not isinstance(ev, dict):
            return
        kind = ev.get("type") or ""
        if kind in TOKEN_EVENTS:
            self._token(now)
        if kind == "message_start":
            self._usage((ev.get("message") or {}).get("usage"))
        elif kind == "message_delta":
            self._usage(ev.get("usage"))
            self.ex.stop = (ev.get("delta") or {}).get("stop_reason") or self.ex.stop
        elif kind == "content_block_start":
            block = ev.get("content_block") or {}
            if block.get("type") in ("tool_use", "thinking"):
                self._token(now)
            if block.get("type") == "tool_use":
                self.ex.tool_calls.append((block.get("id"), block.get("name")))
        elif kind == "response.output_item.added":
            item = ev.get("item") or {}
            if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                self._token(now)
        elif kind == "response.output_item.done":
            item = ev.get("item") or {}
            if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                self.ex.tool_calls.append((item.get("call_id"), item.get("name") or item.get("type")))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            resp = ev.get("response") or {}
            self._usage(resp.get("usage"))
            self.ex.stop = resp.get("status")
            if kind == "response.failed":
                self.ex.stream_error = json.dumps(resp.get("error"))[:500]
        elif kind == "error" or "error" in ev and not ev.get("choices"):
            self.ex.stream_error = json.dumps(ev.get("error") or ev)[:500]
        elif ev.get("object") == "chat.completion.chunk":
            for ch in ev.get("choices") or []:
                delta = ch.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                        or delta.get("tool_calls"):
                    self._token(now)
                for tc in delta.get("tool_calls") or []:
                    slot = self.chat_calls.setdefault(tc.get("index", 0), [None, None])
                    slot[0] = tc.get("id") or slot[0]
                    slot[1] = (tc.get("function") or {}).get("name") or slot[1]
                if ch.get("finish_reason"):
                    self.ex.stop = ch["finish_reason"]
            self._usage(ev.get("usage"))

    def _usage(self, usage) -> None:
        if not isinstance(usage, dict):
            return
        n = usage.get("input_tokens") or usage.get("prompt_tokens")
        if isinstance(n, int) and n > 0:
            n += int(usage.get("cache_read_input_tokens") or 0) + int(usage.get("cache_creation_input_tokens") or 0)
            self.ex.prompt_tokens = max(self.ex.prompt_tokens or 0, n)
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        cached = usage.get("cache_read_input_tokens") or (details.get("cached_tokens") if isinstance(details, dict)
                                                          else None)
        if isinstance(cached, int):
            self.ex.cached_tokens = max(self.ex.cached_tokens or 0, cached)

    def close(self, now: float) -> None:
        self.ex.tool_calls += [tuple(v) for v in self.chat_calls.values()]
        if self.buf.strip():
            self._event(self.buf.decode("utf-8", "replace"), now)
        if self.ex.status >= 400:
            try:
                body = json.loads(self.whole)
                err = body.get("error", body)
                self.ex.error = (err.get("message") if isinstance(err, dict) else str(err))[:600]
            except ValueError:
                self.ex.error = self.whole[:600].decode("utf-8", "replace")
            return
        try:
            body = json.loads(self.whole)           # a reply that was not streamed
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        self._usage(body.get("usage"))
        for block in body.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.ex.tool_calls.append((block.get("id"), block.get("name")))
        for item in body.get("output") or []:
            if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call"):
                self.ex.tool_calls.append((item.get("call_id"), item.get("name")))
        for ch in body.get("choices") or []:
            for tc in ((ch or {}).get("message") or {}).get("tool_calls") or []:
                self.ex.tool_calls.append((tc.get("id"), (tc.get("function") or {}).get("name")))
        if body.get("usage") and self.ex.ttft is None and (body.get("content") or body.get("choices")
                                                           or body.get("output")):
            self.ex.ttft = now - self.ex.started       # whole reply: first token time unknown, upper bound


# ---- the logging proxy ------------------------------------------------------------------------------------------

def ours(user_agent: str) -> bool:
    """A request of `strata launch` itself (its look-ups before the agent starts), not of the agent."""
    return user_agent.startswith("strata-launch/") or "aiohttp" in user_agent.lower()


HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}


class Proxy:
    """A reverse proxy on its own loop thread; `log` collects one Exchange per request."""

    def __init__(self, upstream: str, port: int, journal: Path | None = None, name: str = ""):
        self.upstream, self.port, self.name = upstream, port, name
        self.journal = open(journal, "w") if journal else None
        self.log: list[Exchange] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None
        self.session: aiohttp.ClientSession | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        ex = Exchange(request.method, request.path_qs, request.headers.get("User-Agent", ""), len(body),
                      time.monotonic())
        self.log.append(ex)
        try:
            ex.results_sent = tool_results_in(json.loads(body)) if body else []
        except ValueError:
            pass
        ex.request_body = body[:2 << 20].decode("utf-8", "replace")      # type: ignore[attr-defined]
        ex.request_headers = {k.lower(): "<redacted>" if k.lower() in ("authorization", "x-api-key") else v  # type: ignore[attr-defined]
                              for k, v in request.headers.items()}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP | {"accept-encoding"}}
        reader = ReplyReader(ex)
        assert self.session is not None
        try:
            async with self.session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                            data=body, timeout=aiohttp.ClientTimeout(total=None)) as up:
                ex.status = up.status
                resp = web.StreamResponse(status=up.status, headers={k: v for k, v in up.headers.items()
                                                                      if k.lower() not in HOP})
                await resp.prepare(request)
                async for chunk in up.content.iter_any():
                    reader.feed(chunk, time.monotonic())
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except (ConnectionResetError, aiohttp.ClientConnectionResetError, asyncio.CancelledError):
            ex.client_closed = True        # leaving the upstream block closes Strata's stream: it stops generating
            raise
        finally:
            reader.close(time.monotonic())
            ex.reply_body = reader.whole[:1 << 20].decode("utf-8", "replace")    # type: ignore[attr-defined]
            ex.elapsed = time.monotonic() - ex.started
            self._journal(ex)

    def _journal(self, ex: Exchange) -> None:
        if not ours(ex.user_agent):
            ttft = "-" if ex.ttft is None else f"{ex.ttft:.1f}s"
            print(f"   [{self.name}] {ex.method} {ex.path} -> {ex.status} ttft {ttft} total {ex.elapsed:.1f}s prompt "
                  f"{ex.prompt_tokens} calls {[n for _, n in ex.tool_calls]} results {len(ex.results_sent)}"
                  + (" CLIENT CLOSED" if ex.client_closed else "")
                  + (f" ERROR {ex.error or ex.stream_error}" if ex.error or ex.stream_error else ""), flush=True)
        if self.journal:
            self.journal.write(json.dumps(ex.row(), default=str) + "\n")
            self.journal.flush()

    def start(self) -> "Proxy":
        self.thread.start()

        async def up():
            self.session = aiohttp.ClientSession(auto_decompress=False)
            app = web.Application(client_max_size=64 << 20)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            # handler_cancellation: an agent that hangs up (its own timeout) cancels the handler, which closes the
            # request to Strata, which then stops working on it, as it would with the agent connected directly
            self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=5, handle_signals=False,
                                        handler_cancellation=True)
            await self.runner.setup()
            await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        asyncio.run_coroutine_threadsafe(up(), self.loop).result(30)
        return self

    def stop(self) -> None:
        async def down():
            if self.runner:
                await self.runner.cleanup()
            if self.journal:
                self.journal.close()
            if self.session:
                await self.session.close()
        try:
            asyncio.run_coroutine_threadsafe(down(), self.loop).result(60)
        except Exception as e:  # noqa: BLE001 - the log is what matters; a stuck handler must not lose it
            print(f"proxy stop: {type(e).__name__}: {e}", flush=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# ---- the service -------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def start_service(home: Path, model_file: Path, log_path: Path, slots: int) -> tuple[subprocess.Popen, str, dict]:
    port = free_port()
    env = {**os.environ, "STRATA_HOME": str(home), "STRATA_HOST": f"127.0.0.1:{port}",
           "STRATA_EXTERNAL_MODELS": "0", "STRATA_NUM_PARALLEL": str(slots)}
    log = open(log_path, "w")
    proc = subprocess.Popen([python(), "-m", "app", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 180
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"strata serve ended: see {log_path}")
        with contextlib.suppress(OSError):
            import urllib.request
            urllib.request.urlopen(url + "/api/version", timeout=2).close()
            break
        time.sleep(0.3)
    import urllib.request
    req = urllib.request.Request(url + "/api/create", data=json.dumps(
        {"model": MODEL, "from": str(model_file), "stream": False}).encode(), method="POST")
    urllib.request.urlopen(req, timeout=300).read()
    t0 = time.monotonic()
    req = urllib.request.Request(url + "/api/generate", data=json.dumps(
        {"model": MODEL, "keep_alive": -1, "stream": False}).encode(), method="POST")
    urllib.request.urlopen(req, timeout=600).read()
    print(f"service {url}: {MODEL} loaded in {time.monotonic() - t0:.1f} s", flush=True)
    return proc, url, env


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---- one agent -------------------------------------------------------------------------------------------------

@dataclass
class Result:
    run: str
    exit: int | None = None
    wall: float = 0.0
    timed_out: bool = False
    done: bool = False
    file_text: str | None = None
    exchanges: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @property
    def gen(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.method == "POST" and any(
            p in e.path for p in ("/v1/messages", "/v1/responses", "/v1/chat/completions", "/api/chat"))
            and "count_tokens" not in e.path]

    @property
    def refused(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.status >= 400 or e.stream_error]

    def summary(self) -> dict:
        gen = self.gen
        calls = [c for e in gen for c in e.tool_calls]
        sent = {i for e in self.exchanges for i in e.results_sent}
        executed = [c for c in calls if c[0] in sent]
        ttfts = [e.ttft for e in gen if e.ttft is not None]
        prompts = [e.prompt_tokens for e in gen if e.prompt_tokens]
        cached = sum(e.cached_tokens or 0 for e in gen if e.prompt_tokens)
        return {
            "run": self.run, "exit": self.exit, "timed_out": self.timed_out, "wall_s": round(self.wall, 1),
            "requests": len(self.exchanges), "generation_requests": len(gen),
            "status_4xx": sum(1 for e in self.exchanges if 400 <= e.status < 500),
            "status_5xx": sum(1 for e in self.exchanges if e.status >= 500),
            "abandoned": sum(1 for e in self.exchanges if e.client_closed),
            "refused": [f"{e.method} {e.path} -> {e.status}: {e.error or e.stream_error}" for e in self.refused],
            "tool_calls": [n for _, n in calls], "tool_calls_executed": [n for _, n in executed],
            "task_done": self.done, "file_text": self.file_text,
            "prompt_tokens_first": prompts[0] if prompts else None,
            "prompt_tokens_max": max(prompts) if prompts else None,
            # over the requests whose reply reported usage (an abandoned one has none)
            "prompt_tokens_sent": sum(prompts), "prompt_tokens_cached": cached,
            "prompt_tokens_computed": sum(prompts) - cached,
            "ttft_first_s": round(ttfts[0], 1) if ttfts else None,
            "ttft_later_median_s": round(statistics.median(ttfts[1:]), 1) if len(ttfts) > 1 else None,
            "ttft_later_n": max(0, len(ttfts) - 1),
            "compaction_requests": [i for i, e in enumerate(gen) if COMPACT_ASK in getattr(e, "request_body", "")],
            "continued_requests": [i for i, e in enumerate(gen)
                                   if COMPACT_CONTINUED in getattr(e, "request_body", "")],
            "notes": self.notes,
        }


@contextlib.contextmanager
def port_lock(path: str):
    with open(path, "w") as f:
        print(f"waiting for {path} (port {OSS_PORT})...", flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_agent(run: str, upstream: str, out: Path, task: str, timeout: float, lock_path: str) -> Result:
    from app.cli.agents import AGENTS
    res = Result(run)
    agent = AGENTS[run.split("-")[0]]
    if shutil.which(agent.command) is None:
        print(f"{agent.command} missing: {agent.install_hint}", flush=True)
        if agent.registry == "npm":
            subprocess.run(["npm", "install", "-g", agent.package], check=False)
        if shutil.which(agent.command) is None:
            res.notes.append(f"{agent.title} could not be installed")
            return res
    folder = out / run
    folder.mkdir(parents=True, exist_ok=True)
    project, home = Path(tempfile.mkdtemp(prefix=f"e2e-{run}-proj-")), Path(tempfile.mkdtemp(prefix="e2e-home-"))
    if run == "claude-compact":
        for name, source in COMPACT_FILES.items():
            shutil.copyfile(ROOT / source, project / name)
        task = COMPACT_TASK.format(folder=project)
    oss = run == "codex-oss"
    lock = port_lock(lock_path) if oss else contextlib.nullcontext()
    with lock:
        proxy = Proxy(upstream, OSS_PORT if oss else free_port(), folder / "requests.jsonl", run).start()
        # PWD too: OpenCode takes its project folder from it, and this script's own PWD is not the project
        env = {**os.environ, "STRATA_HOST": f"127.0.0.1:{proxy.port}", "HOME": str(home), "PWD": str(project),
               "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
               "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state"),
               "CODEX_HOME": str(home / ".codex"), "NO_COLOR": "1",
               "IS_SANDBOX": "1"}      # Claude Code refuses --dangerously-skip-permissions as root outside a sandbox
        (home / ".codex").mkdir()
        env.pop("STRATA_HOME", None)
        cmd = [python(), "-m", "app", "launch", *agent_command(run, task)]
        print(f"== {run}: {' '.join(cmd[3:])}", flush=True)
        t0 = time.monotonic()
        with open(folder / "agent.log", "w") as log:
            proc = subprocess.Popen(cmd, env={**env, "PYTHONPATH": str(ROOT)}, cwd=project, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                res.exit = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                res.timed_out = True
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                res.exit = proc.returncode
        res.wall = time.monotonic() - t0
        time.sleep(0.5)
        proxy.stop()
    res.exchanges = [e for e in proxy.log if not ours(e.user_agent)]
    target = project / (COMPACT_DONE if run == "claude-compact" else FILE)
    if target.exists():
        res.file_text = target.read_text(errors="replace")[:200]
        res.done = res.file_text.strip() != "" if run == "claude-compact" else res.file_text.strip() == CONTENT
    listing = sorted(str(p.relative_to(project)) for p in project.rglob("*") if ".git" not in p.parts)[:30]
    res.notes.append(f"project files: {listing}")
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(project, ignore_errors=True)
    return res


def table(results: list[dict]) -> str:
    head = ["agent", "exit", "requests (gen)", "4xx/5xx", "tool calls made", "executed", "task done",
            "prompt tok first/max", "prompt tok sent/cached/computed", "TTFT first", "TTFT later (median, n)", "wall"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in results:
        tt = "-" if s["ttft_later_median_s"] is None else f"{s['ttft_later_median_s']} s ({s['ttft_later_n']})"
        rows.append("| " + " | ".join(str(x) for x in (
            s["run"], f"{s['exit']}{' (timeout)' if s['timed_out'] else ''}",
            f"{s['requests']} ({s['generation_requests']}" + (f", {s['abandoned']} abandoned)" if s["abandoned"]
                                                              else ")"),
            f"{s['status_4xx']}/{s['status_5xx']}",
            ", ".join(s["tool_calls"]) or "none", ", ".join(s["tool_calls_executed"]) or "none",
            "yes" if s["task_done"] else f"no ({s['file_text']!r})" if s["file_text"] is not None else "no",
            f"{s['prompt_tokens_first']}/{s['prompt_tokens_max']}",
            f"{s['prompt_tokens_sent']:,}/{s['prompt_tokens_cached']:,}/{s['prompt_tokens_computed']:,}",
            "-" if s["ttft_first_s"] is None else f"{s['ttft_first_s']} s", tt, f"{s['wall_s']} s")) + " |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", default=",".join(DEFAULT_RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--model-file", help="GGUF (default: the Qwen2.5-Coder-0.5B test fixture)")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds per agent")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--task-for", action="append", default=[], metavar="AGENT=TASK",
                    help="this agent's task instead of --task (repeatable)")
    ap.add_argument("--out", default=None, help="folder for logs (default: a new temp folder)")
    ap.add_argument("--parallel", action="store_true",
                    help="run the agents at the same time (one service, a slot each and one for side requests)")
    ap.add_argument("--port-lock", default=os.environ.get("STRATA_E2E_PORT_LOCK", "/work/port11434.lock"))
    args = ap.parse_args()
    runs = [r.strip() for r in args.agents.split(",") if r.strip()]
    for r in runs:
        if r not in RUNS:
            ap.error(f"unknown agent {r!r}")
    tasks = {}
    for item in args.task_for:
        run, sep, text = item.partition("=")
        if not sep or run not in RUNS or not text:
            ap.error(f"--task-for wants AGENT=TASK, got {item!r}")
        tasks[run] = text
    if args.model_file:
        model_file = Path(args.model_file)
    else:
        import model_cache
        model_file = model_cache.cached(model_cache.QWEN_CODER.name)
        if model_file is None:
            raise SystemExit("the Qwen2.5-Coder-0.5B fixture is missing: run `make test-models`")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="agents-e2e-"))
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="agents-e2e-strata-"))
    print(f"logs in {out}; load {open('/proc/loadavg').read().strip()}", flush=True)
    from app.cli.agents import AGENTS
    for name in sorted({r.split('-')[0] for r in runs}):
        command = AGENTS[name].command
        path = shutil.which(command)
        version = (subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120).stdout.strip()
                   if path else "-")
        print(f"{name}: {version}", flush=True)
    slots = 2 * len(runs) if args.parallel else 4
    proc, url, _ = start_service(home, model_file, out / "serve.log", slots)
    summaries = []

    def one(run: str) -> dict:
        s = run_agent(run, url, out, tasks.get(run, args.task), args.timeout, args.port_lock).summary()
        print(json.dumps(s, indent=1), flush=True)
        print(f"load {open('/proc/loadavg').read().strip()}", flush=True)
        return s
    try:
        if args.parallel:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(len(runs)) as pool:
                summaries = list(pool.map(one, runs))
        else:
            summaries = [one(run) for run in runs]
    finally:
        stop(proc)
        shutil.rmtree(home, ignore_errors=True)
    (out / "summary.json").write_text(json.dumps(summaries, indent=1))
    print("\n" + table(summaries))
    print(f"\nlogs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
