"""Strata's own routes: devices, the what-if layout, server-sent events, Prometheus metrics, OpenAPI."""
from __future__ import annotations

import asyncio
from aiohttp import web

from . import appkeys as keys

from .errors import ApiError
from .http_util import SSEWriter, field, model_name, read_json
from .options import parse_ollama_options, plan_options
from .scheduler import _subtract

PING_SECONDS = 15.0
LAYOUT_OPTION_KEYS = ("num_ctx", "num_parallel", "num_gpu", "main_gpu", "tensor_split", "cpu_moe", "kv_type",
                      "flash_attn", "num_batch")


async def devices(request):
    scheduler = request.app[keys.SCHEDULER]
    if request.query.get("refresh") in ("1", "true"):
        inv = await scheduler.refresh_inventory()
    else:
        inv = await scheduler.get_inventory()
    return web.json_response(inv.to_dict())


def _inventory_from_json(data: dict):
    """A simulated inventory from the same JSON a STRATA_DEVICES file holds (parsed by discovery itself)."""
    from app.discovery.simulated import inventory_from_dict

    return inventory_from_dict(data)


async def layout(request):
    scheduler = request.app[keys.SCHEDULER]
    body = await read_json(request)
    name = model_name(body)
    opts = field(body, "options", dict) or {}
    unknown = sorted(set(opts) - set(LAYOUT_OPTION_KEYS))
    if unknown:
        raise ApiError(400, f"unknown layout option(s) {', '.join(unknown)}; known: {', '.join(LAYOUT_OPTION_KEYS)}",
                       param="options")
    num_parallel = scheduler.config.num_parallel
    if "num_parallel" in opts:
        num_parallel = opts.pop("num_parallel")
        if isinstance(num_parallel, bool) or not isinstance(num_parallel, int) or not 1 <= num_parallel <= 256:
            raise ApiError(400, "option 'num_parallel' must be an integer between 1 and 256", param="options")
    ro = parse_ollama_options(opts)
    record = await scheduler.resolve(name)
    try:
        info = await scheduler.model_info(record.path)
    except Exception as e:  # noqa: BLE001
        raise ApiError(400, f"cannot read model {name!r}: {e}", param="model") from None
    devices_json = body.get("devices")
    if devices_json is not None:
        if not isinstance(devices_json, dict):
            raise ApiError(400, "'devices' must be an inventory object (the STRATA_DEVICES file format)",
                           param="devices")
        try:
            inventory = await asyncio.to_thread(_inventory_from_json, devices_json)
        except Exception as e:  # noqa: BLE001 - a malformed simulated inventory is the client's mistake
            raise ApiError(400, f"'devices': {e}", param="devices") from None
    else:
        inventory = _subtract(await scheduler.get_inventory(), scheduler.used_bytes(exclude=record.name))
    options = plan_options(ro.plan, num_ctx_default=scheduler.config.num_ctx, num_parallel=num_parallel,
                           n_ctx_train=info.context_length)
    try:
        lay = await scheduler.plan(info, options, inventory)
    except ValueError as e:
        raise ApiError(400, f"cannot plan {name!r}: {e}") from None
    return web.json_response({"model": record.name, "fits": bool(lay.fits), "layout": lay.to_dict(),
                              "inventory": inventory.to_dict(), "suggestions": list(lay.suggestions)})


async def events(request):
    bus = request.app[keys.EVENTS]
    w = SSEWriter(request)
    await w.raw(b": connected\n\n")
    with bus.subscribe() as q:
        while True:
            try:
                ev = await asyncio.wait_for(q.get(), PING_SECONDS)
            except asyncio.TimeoutError:
                await w.raw(b": ping\n\n")
                continue
            await w.raw(ev.sse())


async def metrics(request):
    app = request.app
    scheduler = app[keys.SCHEDULER]
    text = app[keys.METRICS].render(scheduler, scheduler.effective_inventory())
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


async def openapi(request):
    from .openapi import build_openapi

    return web.json_response(build_openapi(request.app))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/api/devices", devices)
    r.add_post("/api/layout", layout)
    r.add_get("/api/events", events)
    r.add_get("/metrics", metrics)
    r.add_get("/api/openapi.json", openapi)
