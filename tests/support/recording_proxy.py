"""A logging reverse proxy for capturing what a client (a coding agent: Claude Code, Codex, OpenCode) really sends.

Run it in front of a Strata server (or any HTTP server) and point the agent at it:

    python tests/support/recording_proxy.py --listen 127.0.0.1:18080 --upstream http://127.0.0.1:18081 \\
        --out /tmp/capture [--redact /tmp/agent-home=<HOME>]

Every exchange is written to `--out` as `NNN-<method>-<path>.json`: the request (method, path, query, headers,
body: parsed JSON when it is JSON) and the response (status, headers, body; a streamed body is kept as its text,
an SSE stream also as its list of events). Secrets never reach the file: the values of authorization, x-api-key,
cookie and other credential headers are replaced by "<redacted>". `--redact OLD=NEW` replaces a string (a temp
home directory, say) everywhere in the recorded text. The proxy forwards the bytes unchanged and streams the
response back as it comes, so the client sees the server's own timing.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
from pathlib import Path

from aiohttp import ClientSession, ClientTimeout, web

SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "cookie", "set-cookie", "proxy-authorization",
                  "x-goog-api-key", "openai-organization", "openai-project"}
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
               "content-length", "content-encoding"}


def clean_headers(headers) -> dict[str, str]:
    """Headers as recorded: credentials redacted, names lower-cased."""
    return {k.lower(): ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}


def sse_events(text: str) -> list[dict]:
    """An SSE body -> [{"event": name or None, "data": parsed JSON or the raw line}]."""
    events = []
    for chunk in re.split(r"\r?\n\r?\n", text):
        name, data = None, []
        for line in chunk.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if name is None and not data:
            continue
        raw = "\n".join(data)
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        events.append({"event": name, "data": parsed})
    return events


def body_record(raw: bytes, content_type: str) -> dict:
    text = raw.decode("utf-8", "replace")
    if "json" in content_type:
        try:
            return {"json": json.loads(text)}
        except ValueError:
            pass
    if "event-stream" in content_type:
        return {"text": text, "events": sse_events(text)}
    return {"text": text}


class RecordingProxy:
    def __init__(self, upstream: str, out: Path, redactions: list[tuple[str, str]] = ()):
        self.upstream, self.out = upstream.rstrip("/"), out
        self.redactions = list(redactions)
        self.seq = itertools.count(1)
        self.session: ClientSession | None = None
        out.mkdir(parents=True, exist_ok=True)

    def _redact(self, text: str) -> str:
        for old, new in self.redactions:
            text = text.replace(old, new)
        return text

    def _write(self, n: int, method: str, path: str, record: dict) -> None:
        slug = re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_") or "root"
        text = self._redact(json.dumps(record, indent=1, ensure_ascii=False))
        (self.out / f"{n:03d}-{method.lower()}-{slug}.json").write_text(text + "\n", encoding="utf-8")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        n = next(self.seq)
        raw = await request.read()
        record: dict = {"request": {
            "method": request.method, "path": request.path, "query": dict(request.query),
            "headers": clean_headers(request.headers),
            "body": body_record(raw, request.headers.get("content-type", "")) if raw else None}}
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        try:
            async with self.session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                            data=raw or None, allow_redirects=False) as up:
                resp = web.StreamResponse(status=up.status, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in HOP_HEADERS})
                await resp.prepare(request)
                got = bytearray()
                async for chunk in up.content.iter_any():
                    got += chunk
                    await resp.write(chunk)
                await resp.write_eof()
                record["response"] = {"status": up.status, "headers": clean_headers(up.headers),
                                      "body": body_record(bytes(got), up.headers.get("content-type", ""))}
                return resp
        except asyncio.CancelledError:
            record["response"] = {"error": "the client closed the connection before the answer was complete"}
            raise
        except (OSError, asyncio.TimeoutError) as e:
            record["response"] = {"error": f"{type(e).__name__}: {e}"}
            return web.json_response({"error": f"proxy: upstream failed: {e}"}, status=502)
        finally:
            self._write(n, request.method, request.path, record)

    def app(self) -> web.Application:
        async def start(_app):
            self.session = ClientSession(timeout=ClientTimeout(total=None), auto_decompress=False)

        async def stop(_app):
            if self.session is not None:
                await self.session.close()

        a = web.Application(client_max_size=1 << 30)
        a.on_startup.append(start)
        a.on_cleanup.append(stop)
        a.router.add_route("*", "/{tail:.*}", self.handle)
        return a


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:18080", help="host:port to listen on")
    p.add_argument("--upstream", required=True, help="base URL of the server behind the proxy")
    p.add_argument("--out", required=True, type=Path, help="folder for the recorded exchanges")
    p.add_argument("--redact", action="append", default=[], metavar="OLD=NEW",
                   help="replace OLD by NEW in every recorded file (a temp path, say)")
    a = p.parse_args(argv)
    host, _, port = a.listen.rpartition(":")
    redactions = [tuple(r.split("=", 1)) for r in a.redact]
    # handler_cancellation: a client that hangs up cancels its forwarded request too (the server then frees the slot)
    web.run_app(RecordingProxy(a.upstream, a.out, redactions).app(), host=host or "127.0.0.1", port=int(port),
                handler_cancellation=True, shutdown_timeout=2.0, print=lambda *_: print(f"recording proxy on {a.listen} -> {a.upstream}, to {a.out}", flush=True))


if __name__ == "__main__":
    main()
