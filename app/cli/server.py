"""`strata serve`, `strata run MODEL [PROMPT]`, `strata ps`: the service and its command-line clients.

`run` and `ps` talk to the service over HTTP like `ollama run` does; when nothing answers at STRATA_HOST,
`run` starts a service inside its own process for the session.
Covered by tests/integration/cli/test_service_cli.py (`strata serve` / `ps` / `stop`).
"""
from __future__ import annotations

import logging
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone

from app.api_client import NO_TOTAL, ApiClient, ApiError
from app.format import format_bytes, format_duration
from app.service.config import ConfigError, ServiceConfig, parse_host
from app.service.server import ServiceError, ServiceThread

from .loop_thread import LoopThread


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the local API service (Ollama- and OpenAI-compatible) without the GUI")
    p.add_argument("--host", help="host[:port] to bind (default: STRATA_HOST or 127.0.0.1:11434)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("run", help="chat with a model (interactive), or answer one prompt and exit")
    p.add_argument("model")
    p.add_argument("prompt", nargs="*", help="one-shot prompt (else interactive; stdin is read when piped)")
    p.add_argument("--keepalive", help="how long the model stays loaded after this (e.g. 5m, 0, -1)")
    p.add_argument("--format", help="'json' for JSON output")
    p.add_argument("--verbose", action="store_true", help="print timings after each answer")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("ps", help="list loaded models")
    p.set_defaults(func=cmd_ps)

    p = sub.add_parser("stop", help="unload a model now")
    p.add_argument("model")
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("pin", help="keep a model loaded (never unloaded for another model), set its default "
                                   "keep-alive, or list both (no NAME)")
    p.add_argument("model", nargs="?", help="the model (none: list every pin and keep-alive set)")
    p.add_argument("--off", action="store_true", help="unpin it (it may be unloaded for another model again)")
    p.add_argument("--keep-alive", dest="keep_alive", metavar="DURATION",
                   help="its default keep-alive when a request sets none: 5m, 1h, -1 (forever), 'default' (the "
                        "server's)")
    p.add_argument("--no-pin", dest="no_pin", action="store_true",
                   help="with --keep-alive: only set the keep-alive, leave the pin as it is")
    p.set_defaults(func=cmd_pin)


# ---- serve --------------------------------------------------------------------------------------------

def cmd_serve(args) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        overrides = {}
        if args.host:
            overrides["host"], overrides["port"] = parse_host(args.host)
        config = ServiceConfig.from_env(**overrides)
    except ConfigError as e:
        print(f"strata serve: {e}", file=sys.stderr)
        return 2
    svc = ServiceThread(config)
    try:
        svc.start()
    except ServiceError as e:
        print(f"strata serve: {e}", file=sys.stderr)
        return 1
    print(f"Strata is listening on {svc.url}  (Ctrl+C to stop)", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(0.5):
        if svc._thread is not None and not svc._thread.is_alive():
            print("strata serve: the service stopped unexpectedly", file=sys.stderr)
            return 1
    print("stopping: unloading models...", file=sys.stderr)
    svc.stop()
    return 0


# ---- talking to the service ------------------------------------------------------------------------------

def _client() -> ApiClient:
    """The client of the service STRATA_HOST names (a service bound to every address answers on loopback)."""
    cfg = ServiceConfig.from_env()
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
    return ApiClient(replace(cfg, host=host).base_url, cfg.api_key)


@contextmanager
def service_client():
    """(loop, client) of the service at STRATA_HOST; when nothing answers there, of a service started in this
    process for the command, on a free port, and stopped after it (as `ollama run` needs a server, `strata run`
    brings one). Raises ServiceError when that service cannot start."""
    loop, client, local = LoopThread(), _client(), None
    try:
        if not loop.run(client.alive()):
            local = ServiceThread(ServiceConfig.from_env(port=0)).start()
            loop.run(client.close())
            client = ApiClient(local.url, local.config.api_key)
        yield loop, client
    finally:
        loop.run(client.close())
        loop.close()
        if local is not None:
            local.stop()


# ---- run ------------------------------------------------------------------------------------------------

class ProgressBar:
    """Load progress from /api/events, drawn on stderr while the load request waits."""

    def __init__(self, loop: LoopThread, client: ApiClient, model: str):
        self.loop, self.client, self.model = loop, client, model
        self.stop = threading.Event()
        self.progress = 0.0
        self.task = None

    async def _listen(self):
        try:
            async for etype, data in self.client.events():
                if etype == "load_progress" and data.get("model", "").split(":")[0] == self.model.split(":")[0]:
                    self.progress = float(data.get("progress", 0))
                    self.draw()
        except Exception:  # noqa: BLE001 - the bar is a nicety
            pass

    def draw(self):
        if self.stop.is_set() or not sys.stderr.isatty():
            return
        width = 30
        filled = int(self.progress * width)
        sys.stderr.write(f"\rloading {self.model} [{'#' * filled}{'.' * (width - filled)}] {self.progress * 100:3.0f}%")
        sys.stderr.flush()

    def __enter__(self):
        self.task = self.loop.spawn(self._listen())
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.task.cancel()
        if sys.stderr.isatty():
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()


def _print_stats(final: dict) -> None:
    ev, evd = final.get("eval_count", 0), final.get("eval_duration", 0)
    pe, ped = final.get("prompt_eval_count", 0), final.get("prompt_eval_duration", 0)
    print(f"total duration:       {final.get('total_duration', 0) / 1e9:.3f}s", file=sys.stderr)
    print(f"load duration:        {final.get('load_duration', 0) / 1e9:.3f}s", file=sys.stderr)
    print(f"prompt eval count:    {pe} token(s)", file=sys.stderr)
    if ped:
        print(f"prompt eval rate:     {pe / (ped / 1e9):.2f} tokens/s", file=sys.stderr)
    print(f"eval count:           {ev} token(s)", file=sys.stderr)
    if evd:
        print(f"eval rate:            {ev / (evd / 1e9):.2f} tokens/s", file=sys.stderr)


def cmd_run(args) -> int:
    try:
        with service_client() as (loop, client):
            return _run(loop, client, args)
    except ServiceError as e:
        print(f"strata run: {e}", file=sys.stderr)
        return 1
    except ApiError as e:
        print(f"\nError: {e}", file=sys.stderr)
        return 1


def _run(loop: LoopThread, client: ApiClient, args) -> int:
    base = {"model": args.model}
    if args.keepalive is not None:
        base["keep_alive"] = args.keepalive
    if args.format:
        base["format"] = args.format
    with ProgressBar(loop, client, args.model):
        loop.run(client.request("POST", "/api/generate", {**base, "stream": False}, timeout=NO_TOTAL))
    prompt = " ".join(args.prompt)
    if not prompt and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if prompt:
        return _one_shot(loop, client, base, prompt, args.verbose)
    return _interactive(loop, client, base, args.verbose)


def _one_shot(loop: LoopThread, client: ApiClient, base: dict, prompt: str, verbose: bool) -> int:
    final = {}
    for obj in loop.iterate(client.ndjson("/api/generate", {**base, "prompt": prompt})):
        sys.stdout.write(obj.get("response", ""))
        sys.stdout.flush()
        if obj.get("done"):
            final = obj
    print()
    if verbose:
        _print_stats(final)
    return 0


def _interactive(loop: LoopThread, client: ApiClient, base: dict, verbose: bool) -> int:
    messages: list[dict] = []
    print("Send a message (/bye to quit, /clear to forget the conversation)", file=sys.stderr)
    while True:
        try:
            line = input(">>> ")
        except EOFError:
            print()
            return 0
        if not line.strip():
            continue
        if line.strip() in ("/bye", "/exit", "/quit"):
            return 0
        if line.strip() == "/clear":
            messages.clear()
            continue
        messages.append({"role": "user", "content": line})
        answer, final = [], {}
        try:
            for obj in loop.iterate(client.ndjson("/api/chat", {**base, "messages": messages})):
                piece = obj.get("message", {}).get("content", "")
                answer.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
                if obj.get("done"):
                    final = obj
        except KeyboardInterrupt:
            print("\n(interrupted)", file=sys.stderr)
        print("\n")
        messages.append({"role": "assistant", "content": "".join(answer)})
        if verbose and final:
            _print_stats(final)


# ---- ps / stop ------------------------------------------------------------------------------------------

def _until(expires_at: str) -> str:
    try:
        t = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        return expires_at
    secs = (t - datetime.now(timezone.utc)).total_seconds()
    if secs > 3600 * 24 * 365:
        return "Forever"
    if secs <= 0:
        return "Stopping..."
    return f"{format_duration(secs)} from now"


def _processor(size: int, vram: int) -> str:
    if vram and vram >= size:
        return "100% GPU"
    if vram:
        return f"{100 * (size - vram) / size:.0f}%/{100 * vram / size:.0f}% CPU/GPU"
    return "100% CPU"


def cmd_ps(args) -> int:
    loop, client = LoopThread(), _client()
    try:
        models = loop.run(client.ps())
    except ApiError as e:
        print(f"strata ps: {e}", file=sys.stderr)
        return 1
    finally:
        loop.run(client.close())
        loop.close()
    rows = [("NAME", "STATE", "SIZE", "PROCESSOR", "SLOTS", "CONTEXT", "UNTIL", "PINNED")]
    for m in models:
        s = m.get("strata", {})
        size, vram = m.get("size", 0), m.get("size_vram", 0)
        state = s.get("state", "loaded")
        if state == "loading":
            state = f"loading {100 * s.get('progress', 0):.0f}%"
        rows.append((m["name"], state, format_bytes(size, si=True), _processor(size, vram),
                     f"{s.get('slots_busy', 0)}/{s.get('slots_total', 0)}", str(m.get("context_length", "")),
                     _until(m.get("expires_at", "")), "yes" if s.get("pinned") else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def cmd_pin(args) -> int:
    """`strata pin NAME` pins; `--off` unpins; `--keep-alive D` sets its default keep-alive (with the pin, unless
    --no-pin or --off says otherwise); no NAME lists what is set."""
    loop, client = LoopThread(), _client()
    try:
        if not args.model:
            rows = [("NAME", "PINNED", "KEEP ALIVE")]
            for m in loop.run(client.pins()):
                rows.append((m["name"], "yes" if m.get("pinned") else "", m.get("keep_alive") or "the server's"))
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                print("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            return 0
        pinned = False if args.off else (None if args.no_pin else True)
        keep: str | None | bool = False
        if args.keep_alive is not None:
            keep = None if args.keep_alive.strip().lower() in ("default", "") else args.keep_alive
        out = loop.run(client.pin(args.model, pinned, keep))
        print(f"{out['name']}: {'pinned' if out.get('pinned') else 'not pinned'}, keep-alive "
              f"{out.get('keep_alive') or 'the server default'}")
        return 0
    except ApiError as e:
        print(f"strata pin: {e}", file=sys.stderr)
        return 1
    finally:
        loop.run(client.close())
        loop.close()


def cmd_stop(args) -> int:
    loop, client = LoopThread(), _client()
    try:
        loop.run(client.unload(args.model))
    except ApiError as e:
        print(f"strata stop: {e}", file=sys.stderr)
        return 1
    finally:
        loop.run(client.close())
        loop.close()
    return 0
