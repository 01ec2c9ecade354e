"""A logging reverse proxy for recording what a coding agent sends: every request (method, path, query, the
headers that say what the client is, and the JSON body) and its response's status (and body, when it is an
error) go to a JSONL file, one line per request; the response itself streams through unchanged.

    python bench/agent_proxy.py --upstream http://127.0.0.1:11434 --port 18080 --log /tmp/agent.jsonl
    ANTHROPIC_BASE_URL=http://127.0.0.1:18080 claude -p "..."        # or an OpenAI base URL .../v1

Credentials (authorization, x-api-key, cookies) are never written. Used to record the agents' requests kept under
tests/support/fixtures/agents/ (tests/integration/service/test_agent_requests_opencode.py replays them).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiohttp
from aiohttp import web

HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding"}
SECRET = {"authorization", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}


def shown_headers(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower() not in HOP | SECRET}


def make_app(upstream: str, log_path: str) -> web.Application:
    state = {"n": 0}

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        state["n"] += 1
        entry: dict = {"n": state["n"], "t": round(time.time(), 3), "method": request.method, "path": request.path,
                       "query": dict(request.query), "headers": shown_headers(request.headers)}
        try:
            entry["body"] = json.loads(body) if body else None
        except ValueError:
            entry["body_text"] = body.decode("utf-8", "replace")
        print(f"{entry['n']} {request.method} {request.path} {len(body)} bytes", flush=True)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        t0 = time.monotonic()
        session: aiohttp.ClientSession = request.app["session"]
        try:
            async with session.request(request.method, upstream + request.path_qs, data=body or None,
                                       headers=headers, allow_redirects=False) as up:
                resp = web.StreamResponse(status=up.status, headers={
                    k: v for k, v in up.headers.items() if k.lower() not in HOP | {"content-encoding"}})
                await resp.prepare(request)
                first, size, head = None, 0, bytearray()
                async for chunk in up.content.iter_any():
                    if first is None:
                        first = time.monotonic() - t0
                    size += len(chunk)
                    if len(head) < 4000:
                        head += chunk[:4000 - len(head)]
                    await resp.write(chunk)
                await resp.write_eof()
                entry["response"] = {"status": up.status, "bytes": size,
                                     "first_byte_s": round(first or 0.0, 3),
                                     "seconds": round(time.monotonic() - t0, 3),
                                     "content_type": up.headers.get("content-type", ""),
                                     "headers": {k: v for k, v in up.headers.items()
                                                 if k.lower().startswith("x-strata")}}
                if up.status >= 400 or "json" in up.headers.get("content-type", ""):
                    entry["response"]["head"] = head.decode("utf-8", "replace")
                elif "event-stream" in up.headers.get("content-type", ""):
                    entry["response"]["head"] = head.decode("utf-8", "replace")[:1500]
                return resp
        except asyncio.CancelledError:
            entry["response"] = {**entry.get("response", {}), "cancelled_after_s": round(time.monotonic() - t0, 3)}
            raise
        finally:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    async def on_startup(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=3600),
                                               auto_decompress=False)

    async def on_cleanup(app: web.Application) -> None:
        await app["session"].close()

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", handle)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="e.g. http://127.0.0.1:11434")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--log", required=True, help="JSONL file the requests are appended to")
    a = ap.parse_args()
    # a client that gives up (an agent's request timeout) closes its upstream request too, as it would directly
    web.run_app(make_app(a.upstream.rstrip("/"), a.log), host=a.host, port=a.port, print=None,
                loop=asyncio.new_event_loop(), handler_cancellation=True)


if __name__ == "__main__":
    main()
