"""Small helpers shared by the route modules: reading a JSON body with clear 400s, and streaming writers for
NDJSON (Ollama) and SSE (OpenAI, /api/events). Typed field access is request.field()."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from aiohttp import web

from . import request_log
from .errors import ApiError
from .security import apply_cors


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict:
    raw = await request.read()          # raises 413 past client_max_size
    request_log.note_body(raw)
    if not raw.strip():
        if allow_empty:
            return {}
        raise ApiError(400, "request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"invalid JSON in request body: {e}") from None
    except RecursionError:      # [[[[... thousands deep: the parser recurses per level
        raise ApiError(400, "invalid JSON in request body: nested too deeply") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
    request_log.note_model(body)
    return body


_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(obj) -> str:
    """Compact JSON text that encodes as UTF-8: a lone surrogate (a model's `\\ud83d` JSON escape without its other
    half, in a tool call's arguments) has no UTF-8 form, so it is written as JSON's escape for it, which decodes
    to the same string."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class NDJSONWriter:
    """Ollama-style streaming: one JSON object per line."""

    def __init__(self, request: web.Request):
        self.request = request
        self.resp = web.StreamResponse(status=200, headers={"Content-Type": "application/x-ndjson"})
        apply_cors(request, self.resp)

    async def start(self) -> None:
        if not self.resp.prepared:
            await self.resp.prepare(self.request)

    async def send(self, obj: dict) -> None:
        await self.start()
        await self.resp.write((dumps(obj) + "\n").encode())

    async def finish(self) -> web.StreamResponse:
        await self.start()
        await self.resp.write_eof()
        return self.resp


@dataclass(frozen=True)
class SSEEvent:
    """A named server-sent event (`event: NAME` before its data), for wire formats that name their events."""
    name: str
    data: dict


@dataclass(frozen=True)
class SSEComment:
    """An SSE comment line (`: text`): bytes on the wire that every SSE parser skips, for wire formats that have no
    event of their own to say "still working"."""
    text: str


class SSEWriter:
    """Server-sent events: `data: JSON\\n\\n` (OpenAI) or `event: T\\ndata: JSON\\n\\n` (SSEEvent, /api/events)."""

    def __init__(self, request: web.Request):
        self.request = request
        self.resp = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        apply_cors(request, self.resp)

    async def start(self) -> None:
        if not self.resp.prepared:
            await self.resp.prepare(self.request)

    async def data(self, obj) -> None:
        await self.start()
        payload = obj if isinstance(obj, str) else dumps(obj)
        await self.resp.write(f"data: {payload}\n\n".encode())

    async def send(self, frame) -> None:
        """A renderer's frame: a JSON object or a string as `data:`, an SSEEvent with its `event:` line."""
        if isinstance(frame, SSEEvent):
            await self.raw(f"event: {frame.name}\ndata: {dumps(frame.data)}\n\n".encode())
        elif isinstance(frame, SSEComment):
            await self.raw(f": {frame.text}\n\n".encode())
        else:
            await self.data(frame)

    async def raw(self, chunk: bytes) -> None:
        await self.start()
        await self.resp.write(chunk)

    async def finish(self) -> web.StreamResponse:
        await self.start()
        await self.resp.write_eof()
        return self.resp
