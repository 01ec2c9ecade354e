"""Small helpers shared by the route modules: reading a JSON body with clear 400s, typed field access,
and streaming writers for NDJSON (Ollama) and SSE (OpenAI, /api/events)."""
from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .errors import ApiError
from .security import apply_cors


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict:
    raw = await request.read()          # raises 413 past client_max_size
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
    return body


_TYPES = {str: "a string", bool: "true or false", int: "an integer", float: "a number", dict: "an object",
          list: "an array"}


def field(body: dict, key: str, typ: type | tuple, default: Any = None, *, required: bool = False) -> Any:
    """body[key] checked against a type; None/absent -> default (or a 400 when required)."""
    v = body.get(key)
    if v is None:
        if required:
            raise ApiError(400, f"{key!r} is required", param=key)
        return default
    types = typ if isinstance(typ, tuple) else (typ,)
    if float in types and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if int in types and isinstance(v, float) and v.is_integer() and bool not in types:
        return int(v)
    ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
    if not ok:
        want = " or ".join(_TYPES.get(t, t.__name__) for t in types)
        raise ApiError(400, f"{key!r} must be {want}, got {json.dumps(v)[:60]}", param=key)
    return v


def model_name(body: dict, key: str = "model") -> str:
    name = field(body, key, str, required=True)
    if not name.strip():
        raise ApiError(400, f"{key!r} must not be empty", param=key)
    return name.strip()


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


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


class SSEWriter:
    """Server-sent events: `data: JSON\\n\\n` (OpenAI) or `event: T\\ndata: JSON\\n\\n` (/api/events)."""

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

    async def raw(self, chunk: bytes) -> None:
        await self.start()
        await self.resp.write(chunk)

    async def finish(self) -> web.StreamResponse:
        await self.start()
        await self.resp.write_eof()
        return self.resp
