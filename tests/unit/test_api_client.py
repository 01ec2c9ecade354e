"""The service's HTTP client (app/api_client.py): server-sent events parsed, comments and keep-alives skipped."""
from __future__ import annotations

import asyncio

from app.api_client import parse_sse


def test_parse_sse_events_and_comments():
    raw = [b": ping\n", b"\n", b"event: load_progress\n", b'data: {"model": "m", "progress": 0.5}\n', b"\n",
           b"event: loaded\n", b"data: {\"model\":\n", b"data: \"m\"}\n", b"\n"]

    async def collect():
        async def lines():
            for r in raw:
                yield r
        return [e async for e in parse_sse(lines())]

    assert asyncio.run(collect()) == [("load_progress", {"model": "m", "progress": 0.5}), ("loaded", {"model": "m"})]
