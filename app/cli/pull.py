"""`strata pull NAME` and `strata push NAME`: thin clients of POST /api/pull and /api/push, drawn the way
`ollama pull` draws them (a bar per layer on a terminal; one line per step otherwise). When no service answers at
STRATA_HOST, the command starts one inside its own process for the transfer (as `strata run` does).

Ctrl+C stops the transfer; what was downloaded stays, and the next pull of the same model resumes from there.
"""
from __future__ import annotations

import sys
import time

from app.api_client import ApiError
from app.format import format_bytes
from app.service.store.registry.reference import InvalidReference, parse_reference
from app.service.server import ServiceError

from .server import service_client


def register(sub) -> None:
    p = sub.add_parser("pull", help="download a model from the Ollama registry or Hugging Face",
                       description="NAME: llama3.2, llama3.2:3b, namespace/model:tag, host:port/namespace/model:tag, "
                                   "hf.co/user/repo[:quant] or user/repo-GGUF:quant")
    p.add_argument("name")
    p.add_argument("--insecure", action="store_true", help="allow a plain-http registry")
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser("push", help="upload a model to a registry you name (host[:port]/namespace/model:tag)")
    p.add_argument("name", help="where to push: host[:port]/namespace/model:tag")
    p.add_argument("--model", help="the local model to push (default: the one NAME names, else model:tag)")
    p.add_argument("--insecure", action="store_true", help="allow a plain-http registry")
    p.set_defaults(func=cmd_push)


class ProgressView:
    """Ollama's pull display: a bar for the layer being transferred, status lines for the other steps."""

    def __init__(self, stream=None):
        self.out = stream or sys.stderr
        self.tty = self.out.isatty()
        self.current: str | None = None      # the status line being redrawn in place
        self.last_draw = 0.0
        self.started: dict[str, tuple[float, int]] = {}   # digest -> (time, completed) when first seen

    def update(self, line: dict) -> None:
        status = line.get("status", "")
        total, done = line.get("total", 0), line.get("completed", 0)
        if not line.get("digest") or not total:
            self._end_line()
            print(status, file=self.out, flush=True)
            return
        first = self.started.setdefault(line["digest"], (time.monotonic(), done))
        if self.tty:
            if status != self.current:
                self._end_line()
                self.current = status
            now = time.monotonic()
            if now - self.last_draw > 0.1 or done >= total:
                self.last_draw = now
                self.out.write("\r" + self.bar(status, done, total, first, now))
                self.out.flush()
        elif done >= total and status != self.current:
            self.current = status
            print(f"{status} {format_bytes(total, si=True)}", file=self.out, flush=True)

    @staticmethod
    def bar(status: str, done: int, total: int, first: tuple[float, int], now: float, width: int = 25) -> str:
        frac = min(1.0, done / total) if total else 1.0
        filled = int(frac * width)
        rate = (done - first[1]) / (now - first[0]) if now > first[0] else 0
        speed = f"  {format_bytes(int(rate), si=True)}/s" if rate and done < total else ""
        return (f"{status} {frac * 100:3.0f}% ▕{'█' * filled}{' ' * (width - filled)}▏ "
                f"{format_bytes(done, si=True)}/{format_bytes(total, si=True)}{speed}   ")

    def _end_line(self) -> None:
        if self.tty and self.current is not None:
            self.out.write("\n")
            self.current = None

    def close(self) -> None:
        self._end_line()


def _transfer(path: str, body: dict) -> int:
    view = ProgressView()
    try:
        with service_client() as (loop, client):     # a service in this process when none answers
            for line in loop.iterate(client.ndjson(path, body)):
                view.update(line)
        view.close()
        return 0
    except (ServiceError, ApiError) as e:
        view.close()
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        view.close()
        print("stopped; pull again to resume where it stopped", file=sys.stderr)
        return 130


def cmd_pull(args) -> int:
    try:
        local_name = parse_reference(args.name).local_name()
    except InvalidReference as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    rc = _transfer("/api/pull", {"model": args.name, "insecure": args.insecure})
    if rc == 0:
        print(f"pulled as {local_name}")
    return rc


def cmd_push(args) -> int:
    body = {"model": args.name, "insecure": args.insecure}
    if args.model:
        body["source"] = args.model
    return _transfer("/api/push", body)
