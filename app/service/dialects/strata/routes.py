"""Strata's own routes: devices, the what-if layout, a GGUF import with progress, server-sent events, Prometheus
metrics, OpenAPI.
Covered by tests/integration/service/test_service_api.py and test_import_api.py."""
from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
from aiohttp import web

from app.discovery.inventory import subtract
from app.discovery.simulated import inventory_from_dict

from ... import appkeys as keys

from ...generation.keep_alive import parse_keep_alive
from ...generation.options import parse_ollama_options
from ...generation.request import field, model_name
from ...http.bodies import NDJSONWriter, SSEWriter, read_json
from ...http.errors import ApiError, error_bodies, plain_body
from ...http.events import Event
from ...http.openapi import build_openapi
from ...http import request_log
from ...http.request_log import server_stats
from ...scheduling.loaded_model import ModelSettings
from ...store.proxy import store_error

PING_SECONDS = 15.0
STATS_SECONDS = 1.0
LAYOUT_OPTION_KEYS = ("draft", "num_ctx", "num_parallel", "num_gpu", "main_gpu", "tensor_split", "cpu_moe",
                      "kv_type", "flash_attn", "num_batch", "use_mmap")


async def pins(request: web.Request) -> web.StreamResponse:
    """GET /api/pin: every model's pin and default keep_alive that a user set."""
    scheduler = request.app[keys.SCHEDULER]
    return web.json_response({"models": [{"name": n, **st.to_dict()} for n, st in sorted(scheduler.settings.items())]})


async def pin(request: web.Request) -> web.StreamResponse:
    """POST /api/pin {"model", "pinned": bool, "keep_alive": duration | null}: a model's pin (never unloaded for
    another model, never expires) and default keep_alive (a request that sets none gets it; null: the server's).
    A field left out keeps its value. Kept in the store, so they outlive the service; applied at once to a loaded
    model."""
    scheduler, store = request.app[keys.SCHEDULER], request.app[keys.STORE]
    body = await read_json(request)
    record = await scheduler.resolve(model_name(body))
    old = scheduler.settings.get(record.name) or ModelSettings()
    pinned = field(body, "pinned", bool, old.pinned)
    keep_alive = old.keep_alive
    if "keep_alive" in body:
        raw = body["keep_alive"]
        if raw is None or raw == "":
            keep_alive = None
        else:
            parse_keep_alive(raw)                   # a 400 naming keep_alive when it is not a duration
            keep_alive = str(raw).strip()
    settings = ModelSettings(pinned, keep_alive)
    try:
        await store.set_model_settings(record.name, pinned, keep_alive)
    except Exception as e:  # noqa: BLE001 - mapped by type
        raise store_error(e, record.name) from None
    scheduler.set_settings(record.name, settings)
    request.app[keys.EVENTS].publish("model_settings", {"model": record.name, **settings.to_dict()})
    return web.json_response({"name": record.name, **settings.to_dict()})


async def devices(request: web.Request) -> web.StreamResponse:
    inv = await request.app[keys.SCHEDULER].inventory(refresh=request.query.get("refresh") in ("1", "true"))
    return web.json_response(inv.to_dict())


async def layout(request: web.Request) -> web.StreamResponse:
    """POST /api/layout: the plan a load of the model would use now (on what the loaded models leave free) or on a
    simulated inventory (`devices`), loading nothing. Planned by the load's own path (Loader.plan_load: options,
    context, the measured plan, projector, draft model, adapters), so it cannot differ from what a load does."""
    scheduler = request.app[keys.SCHEDULER]
    body = await read_json(request)
    name = model_name(body)
    opts = field(body, "options", dict) or {}
    unknown = sorted(set(opts) - set(LAYOUT_OPTION_KEYS))
    if unknown:
        raise ApiError(400, f"unknown layout option(s) {', '.join(unknown)}; known: {', '.join(LAYOUT_OPTION_KEYS)}",
                       param="options")
    num_parallel = None
    if "num_parallel" in opts:
        num_parallel = opts.pop("num_parallel")
        if isinstance(num_parallel, bool) or not isinstance(num_parallel, int) or not 1 <= num_parallel <= 256:
            raise ApiError(400, "option 'num_parallel' must be an integer between 1 and 256", param="options")
    record = await scheduler.resolve(name)
    ro = parse_ollama_options(opts, record.parameters)      # over the Modelfile's PARAMETERs, as a request's are
    devices_json = body.get("devices")
    if devices_json is not None:
        if not isinstance(devices_json, dict):
            raise ApiError(400, "'devices' must be an inventory object (the STRATA_DEVICES file format)",
                           param="devices")
        try:
            inventory = await asyncio.to_thread(inventory_from_dict, devices_json)
        except Exception as e:  # noqa: BLE001 - a malformed simulated inventory is the client's mistake
            raise ApiError(400, f"'devices': {e}", param="devices") from None
        used: dict[str, int] = {}
    else:
        inventory = await scheduler.inventory()
        used = scheduler.used_bytes(exclude=record.name)
    try:
        lay = await scheduler.plan_what_if(record, ro, num_parallel, inventory, used)
    except ValueError as e:
        raise ApiError(400, f"cannot plan {name!r}: {e}") from None
    return web.json_response({"model": record.name, "fits": bool(lay.fits), "layout": lay.to_dict(),
                              "inventory": subtract(inventory, used).to_dict(), "suggestions": list(lay.suggestions)})


class ImportCancelled(Exception):
    """The client closed the import stream: the store's import stops at its next chunk and removes its copy."""


async def import_model(request):
    """POST /api/import {"path": GGUF on this machine, "model": name (default from the file), "link": hard-link
    when possible (default true)}. NDJSON: {"status": "hashing"|"copying", "completed", "total"} ... then
    {"status": "success", "model", "digest", "size"}. Closing the stream cancels: nothing is left behind."""
    store = request.app[keys.STORE]
    body = await read_json(request)
    path = field(body, "path", str, required=True)
    if not path.strip():
        raise ApiError(400, "'path' must not be empty", param="path")
    name = model_name(body) if body.get("model") is not None else None
    link = field(body, "link", bool, True)
    mmproj = field(body, "mmproj", str)          # a vision projector GGUF stored with the model
    stream = field(body, "stream", bool, True)
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    cancel = threading.Event()
    step = [0]

    def progress(phase: str, done: int, total: int) -> None:      # runs in the import's thread
        if cancel.is_set():
            raise ImportCancelled()
        if done >= step[0] or done >= total:     # about 200 lines per file, however big
            step[0] = done + max(total // 200, 1 << 20)
            loop.call_soon_threadsafe(events.put_nowait, {"status": phase, "completed": done, "total": total})

    def finished(f: asyncio.Future) -> None:
        f.exception()              # retrieved here too: after a cancel nobody else asks for it
        events.put_nowait(None)

    job = asyncio.ensure_future(store.import_gguf(path, name, link=link, progress=progress,
                                                  mmproj=mmproj))
    job.add_done_callback(finished)
    w = NDJSONWriter(request) if stream else None
    try:
        while (ev := await events.get()) is not None:
            if w is not None:
                await w.send(ev)
        if job.exception() is not None:
            err = store_error(job.exception(), name or path)
            if w is None or not w.resp.prepared:
                raise err
            await w.send({"error": err.message})
            return await w.finish()
    finally:
        cancel.set()          # a client that went away cancels the handler: stop the import (a no-op when done)
    record = job.result()
    done = {"status": "success", "model": record.name, "digest": f"sha256:{record.sha256}", "size": record.size}
    if w is None:
        return web.json_response(done)
    await w.send(done)
    return await w.finish()


async def events(request):
    """Server-sent events. `?include=request,stats` adds what only the Server window wants: a `request` event per
    request start, lease and end (http/request_log.py), and a `stats` event every STATS_SECONDS (the plots' sample),
    computed for this subscriber alone while it listens."""
    app = request.app
    bus = app[keys.EVENTS]
    include = {t.strip() for t in request.query.get("include", "").split(",") if t.strip()}
    stats = "stats" in include
    w = SSEWriter(request)
    loop = asyncio.get_running_loop()
    next_stats = loop.time()
    with bus.subscribe(include) as q:
        # subscribed before anything is sent: a client that has the headers or ": connected" misses no event
        # published after them (the desktop reads the request log once connected, tests trigger loads)
        await w.raw(b": connected\n\n")
        while True:
            if stats and loop.time() >= next_stats:
                next_stats = loop.time() + STATS_SECONDS
                sample = server_stats(app[keys.REQUESTS], app[keys.SCHEDULER])
                await w.raw(Event("stats", sample, sample["time"]).sse())
            wait = max(0.0, next_stats - loop.time()) if stats else PING_SECONDS
            try:
                ev = await asyncio.wait_for(q.get(), wait)
            except asyncio.TimeoutError:
                if not stats:
                    await w.raw(b": ping\n\n")
                continue
            await w.raw(ev.sse())


async def requests_list(request):
    """GET /api/requests: the request log's records, newest first (without bodies): those in memory and, with the
    history on disk, earlier ones (earlier runs of the service too). Filters: `client`, `model` (a part of the
    name), `status` (a code, "4xx", "error", "ok"), `path`; `before` (an id) and `limit` page. `format=jsonl`:
    the records with their bodies as JSON lines (an export)."""
    q = request.query
    try:
        before = int(q["before"]) if q.get("before") else None
        limit = int(q["limit"]) if q.get("limit") else None
    except ValueError:
        raise ApiError(400, "before and limit must be integers") from None
    log = request.app[keys.REQUESTS]
    rows = log.listing(client=q.get("client", ""), model=q.get("model", ""), status=q.get("status", ""),
                       path=q.get("path", ""), before=before, limit=limit)
    if q.get("format") == "jsonl":
        lines = [json.dumps(log.detail(d["id"]) or d, ensure_ascii=False, default=str) for d in rows]
        return web.Response(text="\n".join(lines) + ("\n" if lines else ""), content_type="application/x-ndjson",
                            headers={"Content-Disposition": 'attachment; filename="strata-requests.jsonl"'})
    return web.json_response({"requests": rows})


async def request_detail(request):
    """GET /api/requests/{id}: one record with its headers (credentials masked) and bounded bodies."""
    try:
        rid = int(request.match_info["id"])
    except ValueError:
        raise ApiError(400, "request id must be an integer", param="id") from None
    rec = request.app[keys.REQUESTS].detail(rid)
    if rec is None:
        raise ApiError(404, f"request {rid} is no longer in the log (it keeps the last requests only)")
    return web.json_response(rec)


# headers of a logged request that belong to its connection, not to the request
_NOT_REPLAYED = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "accept-encoding",
                 "te", "upgrade", "expect"}


async def request_replay(request):
    """POST /api/requests/{id}/replay: send a logged request again, as it was (its method, path, headers whose
    values were kept, and body), to this service; -> {"replayed", "record" (the new request's id), "status"}.
    Refused (409) when its body was not kept whole (a body over the history's bound, or bodies turned off)."""
    try:
        rid = int(request.match_info["id"])
    except ValueError:
        raise ApiError(400, "request id must be an integer", param="id") from None
    d = request.app[keys.REQUESTS].detail(rid)
    if d is None:
        raise ApiError(404, f"request {rid} is no longer in the log (it keeps the last requests only)")
    body = (d.get("request_body") or "").encode("utf-8")
    size = int(d.get("request_bytes") or 0)
    if size and len(body) < size:
        raise ApiError(409, f"request {rid}'s body was not kept whole ({len(body)} of {size} bytes): it cannot "
                            "be replayed")
    headers = {k: v for k, v in (d.get("headers") or {}).items()
               if k.lower() not in _NOT_REPLAYED and v != request_log.MASK}
    if request.headers.get("Authorization"):
        headers["Authorization"] = request.headers["Authorization"]     # the caller was let in: so is its replay
    headers[request_log.REPLAY_HEADER] = str(rid)
    url = f"{request.url.origin()}{d.get('path') or '/'}"
    async with aiohttp.ClientSession() as session:
        async with session.request(d.get("method") or "POST", url, data=body or None, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=None)) as resp:
            await resp.read()
            new_id = resp.headers.get(request_log.ID_HEADER, "")
            return web.json_response({"replayed": rid, "status": resp.status,
                                      "record": int(new_id) if new_id.isdigit() else None})


async def metrics(request: web.Request) -> web.StreamResponse:
    app = request.app
    scheduler = app[keys.SCHEDULER]
    text = app[keys.METRICS].render(scheduler, scheduler.effective_inventory())
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


async def openapi(request):
    return web.json_response(build_openapi(request.app))


def add_routes(app: web.Application) -> None:
    r = app.router
    with error_bodies(app).speaking(app, plain_body):      # Strata's errors are Ollama's shape, as its paths are
        r.add_get("/api/devices", devices)
        r.add_get("/api/pin", pins)
        r.add_post("/api/pin", pin)
        r.add_post("/api/layout", layout)
        r.add_post("/api/import", import_model)
        r.add_get("/api/events", events)
        r.add_get("/api/requests", requests_list)
        r.add_get("/api/requests/{id}", request_detail)
        r.add_post("/api/requests/{id}/replay", request_replay)
        r.add_get("/metrics", metrics)
        r.add_get("/api/openapi.json", openapi)
