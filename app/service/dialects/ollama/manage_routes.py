"""Ollama's model-management routes: tags, show, create, copy, delete, ps, version. Pull, push and blobs are in
transfer_routes.py (the registry work in store/registry/); the generation routes (generate, chat, embed) in
routes.py.
Covered by tests/integration/service/test_service_api.py and test_names.py."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path

from aiohttp import web

from app import __version__

from ... import appkeys as keys
from ...generation.model_card import model_card
from ...generation.options import sampling_view
from ...generation.request import field, model_name
from ...http.bodies import NDJSONWriter, read_json
from ...http.errors import ApiError, error_bodies
from ...http.metrics import Metrics
from ...scheduling.door import ServiceHost
from ...scheduling.loaded_model import ModelSettings
from ...store.modelfile import ModelfileError, parse_modelfile, parse_param_value, render_modelfile, render_parameters
from ...store.proxy import AsyncStore, store_error, with_digest
from . import transfer_routes as model_routes
from .render import error_body
from .schema import details, digest_of, iso_time, tag_entry
from .schema import model_info as ollama_model_info

FAR_FUTURE = "2318-01-01T00:00:00Z"     # expires_at of a model kept forever (Ollama does the same)
# The Ollama release whose API /api/version answers as. Clients gate features on it: Codex's `--oss` refuses a
# server below 0.13.4, the first Ollama with /v1/responses, which Strata serves. Strata's own version rides beside.
OLLAMA_API_VERSION = "0.13.4"


def _ctx(request: web.Request) -> tuple[ServiceHost, AsyncStore, Metrics]:
    app = request.app
    return app[keys.SCHEDULER], app[keys.STORE], app[keys.METRICS]


# ---- models ---------------------------------------------------------------------------------------------

async def root(request):
    return web.Response(text="Strata is running (Ollama- and OpenAI-compatible API)")


async def version(request):
    return web.json_response({"version": OLLAMA_API_VERSION, "strata": {"version": __version__}})


async def tags(request: web.Request) -> web.StreamResponse:
    scheduler, store, _ = _ctx(request)
    records = await store.list()
    out = []
    for r in records:
        r = await with_digest(store, r)
        card = await model_card(scheduler, r, with_context=False)
        out.append({**tag_entry(r, card.info), "capabilities": list(card.capabilities)})
    return web.json_response({"models": out})


async def _model_info_or_empty(path, info, verbose: bool) -> dict:
    try:
        return await asyncio.to_thread(ollama_model_info, path, info.n_params, verbose)
    except Exception:  # noqa: BLE001 - the header was read a moment ago; a file gone since shows no model_info
        return {}


async def show(request: web.Request) -> web.StreamResponse:
    scheduler, store, _ = _ctx(request)
    body = await read_json(request)
    name = model_name(body, "model") if body.get("model") is not None else model_name(body, "name")
    verbose = field(body, "verbose", bool, False)
    record = await with_digest(store, await scheduler.resolve(name))
    card = await model_card(scheduler, record, with_context=False)
    info, facts, projector = card.info, card.facts, card.projector
    template = record.template or (facts.template if facts else None) or ""
    caps = list(card.capabilities)
    strata = {"source": record.source, "read_only": bool(record.read_only), "path": str(record.path),
              "digest": digest_of(record)}
    if projector is not None:
        strata["projector"] = {"path": projector.path, "projector_type": projector.projector_type,
                               "size": projector.file_size, "weight_bytes": projector.weight_bytes}
    if info is not None:      # the context a load gets (or got) and what decided it
        strata["context"] = await scheduler.context_preview(record, info)
    # what a request that sets nothing is sampled with: Modelfile PARAMETERs over the GGUF's general.sampling.*
    strata["sampling"] = sampling_view(record.parameters, info.sampling if info is not None else ())
    if facts is not None:     # which chat template is used and why (a GGUF without one gets a built-in)
        strata["chat"] = {**facts.to_dict(), "template_source": "modelfile" if record.template
                          else facts.template_source}
    return web.json_response({
        "modelfile": render_modelfile(str(record.path), record.parameters or {}, record.template, record.system,
                                      record.adapters, record.license),
        "parameters": render_parameters(record.parameters or {}),
        "template": template,
        "system": record.system or "",
        "license": record.license or "",
        "details": details(info, record),
        "model_info": await _model_info_or_empty(record.path, info, verbose) if info else {},
        "capabilities": caps,
        **({"projector_info": {"general.architecture": "clip", "clip.projector_type": projector.projector_type,
                               "clip.vision.image_size": projector.image_size,
                               "clip.vision.patch_size": projector.patch_size}} if projector else {}),
        "modified_at": iso_time(record.modified_at),
        "strata": strata,
    })


async def create(request: web.Request) -> web.StreamResponse:
    """From a Modelfile (`modelfile`), or the newer fields (`from`, `parameters`, `template`, `system`).
    `from` is a model name or a GGUF path on this machine; `files` names GGUF blobs uploaded with POST /api/blobs."""
    scheduler, store, _ = _ctx(request)
    body = await read_json(request)
    name = model_name(body, "model") if body.get("model") is not None else model_name(body, "name")
    stream = field(body, "stream", bool, True)
    if body.get("quantize"):
        raise ApiError(400, "quantize is not supported: create from an already quantized GGUF", param="quantize")
    parameters: dict = {}
    template = system = mf_license = None
    from_ = None
    adapter_paths: list[str] = []
    if body.get("modelfile") is not None:
        try:
            mf = parse_modelfile(field(body, "modelfile", str))
        except ModelfileError as e:
            raise ApiError(400, f"Modelfile: {e}", param="modelfile") from None
        from_, parameters, template, system = mf.from_, dict(mf.parameters), mf.template, mf.system
        adapter_paths, mf_license = mf.adapters, mf.license
    if body.get("from") is not None:
        from_ = field(body, "from", str)
    raw_params = field(body, "parameters", dict)
    if raw_params:
        for k, v in raw_params.items():
            try:
                val = parse_param_value(k, v)
            except ModelfileError as e:
                raise ApiError(400, f"parameters: {e}", param="parameters") from None
            parameters[k.lower()] = val
    if body.get("template") is not None:
        template = field(body, "template", str)
    if body.get("system") is not None:
        system = field(body, "system", str)
    license = _license(body) or mf_license
    projector = None
    if body.get("projector") is not None:            # Strata's: a vision projector GGUF (mmproj) on this machine
        try:
            projector = await store.store_projector(field(body, "projector", str))
        except Exception as e:  # noqa: BLE001 - mapped by type
            err = store_error(e, name)
            raise ApiError(err.status, f"projector: {err.message}", param="projector") from None
    if body.get("files") or body.get("adapters"):     # uploaded GGUF blobs (POST /api/blobs first)
        return await model_routes.create_from_files(request, body, name, from_, parameters, template, system,
                                                    license, stream, projector)
    if not from_:
        raise ApiError(400, "'from' (a model name or a GGUF path on this machine) or a 'modelfile' with FROM is "
                            "required", param="from")
    if parameters.get("draft"):                      # PARAMETER draft <model>: refused now if it cannot draft
        await _check_draft(scheduler, from_, name, parameters["draft"])
    try:
        adapters = tuple([str(await store.add_adapter(p)) for p in adapter_paths])
        record = await store.create(name, from_, parameters, template, system, license, adapters,
                                    projector)
    except Exception as e:  # noqa: BLE001 - mapped by type
        raise store_error(e, name) from None
    statuses = [{"status": "reading model metadata"}, {"status": f"using {record.path}"},
                {"status": "writing manifest"}, {"status": "success"}]
    if not stream:
        return web.json_response({"status": "success"})
    w = NDJSONWriter(request)
    for s in statuses:
        await w.send(s)
    return await w.finish()


async def _check_draft(scheduler: ServiceHost, from_: str, name: str, draft: str) -> None:
    """A 400 naming `draft` when the model `draft` is unknown or has another vocabulary than `from_` (a model name
    or a GGUF path; an unknown `from_` is left to the store's own 404)."""
    target: str | Path
    try:
        target = (await scheduler.resolve(from_)).path
    except ApiError:
        target = Path(from_).expanduser()
        if not target.is_file():
            return
    await scheduler.draft_for(target, name, draft)


def _license(body: dict) -> str | None:
    """`license`: a string or a list of strings (Ollama), kept as one text."""
    lic = body.get("license")
    if lic is None:
        return None
    if isinstance(lic, str):
        return lic
    if isinstance(lic, list) and all(isinstance(x, str) for x in lic):
        return "\n".join(lic)
    raise ApiError(400, "'license' must be a string or a list of strings", param="license")


async def copy(request):
    _, store, _ = _ctx(request)
    body = await read_json(request)
    src = model_name(body, "source")
    dst = model_name(body, "destination")
    try:
        await store.copy(src, dst)
    except Exception as e:  # noqa: BLE001
        raise store_error(e, src) from None
    return web.json_response({})


async def delete(request: web.Request) -> web.StreamResponse:
    scheduler, store, _ = _ctx(request)
    body = await read_json(request)
    name = model_name(body, "model") if body.get("model") is not None else model_name(body, "name")
    try:
        record = await store.get(name)
        await scheduler.unload(record.name, reason="deleted")      # (when it is loaded)
        await store.remove(name)
        if record.name in scheduler.settings:   # its pin and keep-alive go with it (a later model of that name
            await store.set_model_settings(record.name, False, None)     # starts without them)
            scheduler.set_settings(record.name, ModelSettings())
    except Exception as e:  # noqa: BLE001
        raise store_error(e, name) from None
    return web.json_response({})


async def ps(request: web.Request) -> web.StreamResponse:
    scheduler, _, _ = _ctx(request)
    out = []
    now = datetime.now(timezone.utc)
    for m in scheduler.snapshot():
        if m.state != "failed" and m.keep_alive is None:
            expires = FAR_FUTURE
        elif m.expires_at is not None:
            expires = iso_time(m.expires_at)
        else:   # busy or loading: expires keep_alive after its requests end
            expires = iso_time(now + timedelta(seconds=m.keep_alive or 0))
        out.append({
            "name": m.name,
            "model": m.name,
            "size": m.size,
            "digest": digest_of(m.record),
            "details": details(m.info, m.record),
            "expires_at": expires,
            "size_vram": m.size_vram,
            "context_length": m.options.num_ctx,
            "strata": m.strata_info(),
        })
    return web.json_response({"models": out})


def add_routes(app: web.Application) -> None:
    r = app.router
    with error_bodies(app).speaking(app, error_body):
        r.add_get("/", root)
        r.add_get("/api/version", version)
        r.add_get("/api/tags", tags)
        r.add_post("/api/show", show)
        r.add_post("/api/create", create)
        r.add_post("/api/copy", copy)
        r.add_delete("/api/delete", delete)
        r.add_get("/api/ps", ps)
