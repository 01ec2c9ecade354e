"""`strata serve`, `strata run MODEL [PROMPT]`, `strata ps`: the service and its command-line clients.

`run` and `ps` talk to the service over HTTP like `ollama run` does; when nothing answers at STRATA_HOST,
`run` starts a service inside its own process for the session.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request


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


# ---- serve --------------------------------------------------------------------------------------------

def cmd_serve(args) -> int:
    from app.service.config import ConfigError, ServiceConfig, parse_host
    from app.service.server import ServiceError, ServiceThread

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


# ---- a small HTTP client ---------------------------------------------------------------------------------

class ApiClient:
    def __init__(self, base_url: str, api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    def _req(self, method: str, path: str, body=None) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)

    def call(self, method: str, path: str, body=None, timeout=30.0) -> dict:
        try:
            with urllib.request.urlopen(self._req(method, path, body), timeout=timeout) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError(_error_text(e)) from None

    def stream(self, path: str, body: dict):
        """Yield each NDJSON object of a streaming POST; an {"error"} line raises."""
        try:
            r = urllib.request.urlopen(self._req("POST", path, body), timeout=None)
        except urllib.error.HTTPError as e:
            raise RuntimeError(_error_text(e)) from None
        with r:
            for line in r:
                if not line.strip():
                    continue
                obj = json.loads(line)
                if "error" in obj:
                    raise RuntimeError(obj["error"])
                yield obj

    def alive(self) -> bool:
        try:
            self.call("GET", "/api/version", timeout=2)
            return True
        except (OSError, RuntimeError):
            return False


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read())
        err = body.get("error")
        return err.get("message") if isinstance(err, dict) else str(err)
    except Exception:  # noqa: BLE001
        return f"HTTP {e.code} {e.reason}"


def _client() -> ApiClient:
    from app.service.config import ServiceConfig

    cfg = ServiceConfig.from_env()
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
    from dataclasses import replace
    return ApiClient(replace(cfg, host=host).base_url, cfg.api_key)


# ---- run ------------------------------------------------------------------------------------------------

class ProgressBar:
    """Load progress from /api/events, drawn on stderr while the load request waits."""

    def __init__(self, client: ApiClient, model: str):
        self.client, self.model = client, model
        self.stop = threading.Event()
        self.progress = 0.0
        self.thread = threading.Thread(target=self._listen, daemon=True)

    def _listen(self):
        try:
            req = self.client._req("GET", "/api/events")
            with urllib.request.urlopen(req, timeout=None) as r:
                event = None
                for raw in r:
                    if self.stop.is_set():
                        return
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "load_progress":
                        data = json.loads(line[6:])
                        if data.get("model", "").split(":")[0] == self.model.split(":")[0]:
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
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
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
    client = _client()
    local = None
    if not client.alive():
        from app.service.config import ServiceConfig
        from app.service.server import ServiceError, ServiceThread

        try:   # nothing is listening: run a service in this process for the session, on a free port
            local = ServiceThread(ServiceConfig.from_env(port=0)).start()
        except ServiceError as e:
            print(f"strata run: {e}", file=sys.stderr)
            return 1
        client = ApiClient(local.url)
    try:
        return _run(client, args)
    except RuntimeError as e:
        print(f"\nError: {e}", file=sys.stderr)
        return 1
    finally:
        if local is not None:
            local.stop()


def _run(client: ApiClient, args) -> int:
    base = {"model": args.model}
    if args.keepalive is not None:
        base["keep_alive"] = args.keepalive
    if args.format:
        base["format"] = args.format
    with ProgressBar(client, args.model):
        client.call("POST", "/api/generate", {**base, "stream": False}, timeout=None)
    prompt = " ".join(args.prompt)
    if not prompt and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    if prompt:
        final = {}
        for obj in client.stream("/api/generate", {**base, "prompt": prompt}):
            sys.stdout.write(obj.get("response", ""))
            sys.stdout.flush()
            if obj.get("done"):
                final = obj
        print()
        if args.verbose:
            _print_stats(final)
        return 0
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
            for obj in client.stream("/api/chat", {**base, "messages": messages}):
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
        if args.verbose and final:
            _print_stats(final)


# ---- ps / stop ------------------------------------------------------------------------------------------

def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _until(expires_at: str) -> str:
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(expires_at.replace("Z", "+00:00"))
    except ValueError:
        return expires_at
    secs = (t - datetime.now(timezone.utc)).total_seconds()
    if secs > 3600 * 24 * 365:
        return "Forever"
    if secs <= 0:
        return "Stopping..."
    if secs < 60:
        return f"{secs:.0f} seconds from now"
    if secs < 3600:
        return f"{secs / 60:.0f} minutes from now"
    return f"{secs / 3600:.0f} hours from now"


def cmd_ps(args) -> int:
    client = _client()
    try:
        models = client.call("GET", "/api/ps").get("models", [])
    except (OSError, RuntimeError) as e:
        print(f"strata ps: cannot reach the service at {client.base_url}: {e}", file=sys.stderr)
        return 1
    rows = [("NAME", "STATE", "SIZE", "PROCESSOR", "SLOTS", "CONTEXT", "UNTIL")]
    for m in models:
        s = m.get("strata", {})
        size, vram = m.get("size", 0), m.get("size_vram", 0)
        if vram and vram >= size:
            proc = "100% GPU"
        elif vram:
            proc = f"{100 * (size - vram) / size:.0f}%/{100 * vram / size:.0f}% CPU/GPU"
        else:
            proc = "100% CPU"
        state = s.get("state", "loaded")
        if state == "loading":
            state = f"loading {100 * s.get('progress', 0):.0f}%"
        rows.append((m["name"], state, _size(size), proc, f"{s.get('slots_busy', 0)}/{s.get('slots_total', 0)}",
                     str(m.get("context_length", "")), _until(m.get("expires_at", ""))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("    ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def cmd_stop(args) -> int:
    client = _client()
    try:
        client.call("POST", "/api/generate", {"model": args.model, "keep_alive": 0, "stream": False})
    except (OSError, RuntimeError) as e:
        print(f"strata stop: {e}", file=sys.stderr)
        return 1
    return 0
