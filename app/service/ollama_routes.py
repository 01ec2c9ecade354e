"""Ollama-compatible routes. Thin: parse (ollama_schema), lease a model (scheduler), stream (generation)."""
from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta, timezone

from aiohttp import web

from . import appkeys as keys

from app import __version__

from . import generation
from .errors import ApiError
from .gotemplate import TemplateError, render as render_template
from .http_util import NDJSONWriter, field, model_name, read_json
from .modelfile import ModelfileError, parse_modelfile, parse_param_value, render_modelfile, render_parameters
from .ollama_schema import (details, digest_of, done_reason, iso_time, logprobs_json, now_iso, parse_chat,
                            parse_embed_input, parse_generate, tag_entry, timing_fields)
from .options import parse_ollama_options
from .scheduler import parse_keep_alive
from .store_proxy import store_error, with_digest

FAR_FUTURE = "2318-01-01T00:00:00Z"     # expires_at of a model kept forever (Ollama does the same)


def _ctx(request):
    app = request.app
    return app[keys.SCHEDULER], app[keys.STORE], app[keys.METRICS]


async def _info_or_none(scheduler, record):
    try:
        return await scheduler.model_info(record.path)
    except Exception:  # noqa: BLE001 - a listing must not fail because one file is unreadable
        return None


# ---- models ---------------------------------------------------------------------------------------------

async def root(request):
    return web.Response(text="Strata is running (Ollama- and OpenAI-compatible API)")


async def version(request):
    return web.json_response({"version": __version__})


async def tags(request):
    scheduler, store, _ = _ctx(request)
    records = await store.call("list")
    out = []
    for r in records:
        r = await with_digest(store, r)
        out.append(tag_entry(r, await _info_or_none(scheduler, r)))
    return web.json_response({"models": out})


def _model_info_json(info) -> dict:
    arch = info.architecture
    return {
        "general.architecture": arch,
        "general.name": info.name,
        "general.parameter_count": info.n_params,
        "general.file_type": info.quantization,
        f"{arch}.context_length": info.context_length,
        f"{arch}.embedding_length": info.n_embd,
        f"{arch}.block_count": info.n_layer,
        f"{arch}.attention.head_count": info.n_head,
        f"{arch}.attention.head_count_kv": (info.n_head_kv[0] if info.n_head_kv else info.n_head),
        f"{arch}.attention.key_length": info.head_dim_k,
        f"{arch}.attention.value_length": info.head_dim_v,
        f"{arch}.vocab_size": info.n_vocab,
        f"{arch}.expert_count": info.n_expert,
        f"{arch}.expert_used_count": info.n_expert_used,
        "tokenizer.ggml.model": info.tokenizer_model,
    }


async def show(request):
    scheduler, store, _ = _ctx(request)
    body = await read_json(request)
    name = model_name(body, "model") if body.get("model") is not None else model_name(body, "name")
    record = await with_digest(store, await scheduler.resolve(name))
    info = await _info_or_none(scheduler, record)
    template = record.template or (info.chat_template if info else None) or ""
    caps = ["embedding"] if info is not None and info.is_embedding else ["completion"]
    return web.json_response({
        "modelfile": render_modelfile(str(record.path), record.parameters or {}, record.template, record.system),
        "parameters": render_parameters(record.parameters or {}),
        "template": template,
        "system": record.system or "",
        "license": "",
        "details": details(info, record),
        "model_info": _model_info_json(info) if info else {},
        "capabilities": caps,
        "modified_at": iso_time(record.modified_at),
        "strata": {"source": record.source, "read_only": bool(record.read_only), "path": str(record.path),
                   "digest": digest_of(record)},
    })


async def create(request):
    """From a Modelfile (`modelfile`), or the newer fields (`from`, `parameters`, `template`, `system`).
    `from` is a model name or a GGUF path on this machine; uploads (`files`, blobs) are not supported."""
    _, store, _ = _ctx(request)
    body = await read_json(request)
    name = model_name(body, "model") if body.get("model") is not None else model_name(body, "name")
    stream = field(body, "stream", bool, True)
    if body.get("quantize"):
        raise ApiError(400, "quantize is not supported: create from an already quantized GGUF", param="quantize")
    if body.get("files") or body.get("adapters"):
        raise ApiError(400, "uploading files/adapters is not supported; set 'from' to a GGUF path on this machine "
                            "or an existing model name", param="files")
    parameters: dict = {}
    template = system = None
    from_ = None
    if body.get("modelfile") is not None:
        try:
            mf = parse_modelfile(field(body, "modelfile", str))
        except ModelfileError as e:
            raise ApiError(400, f"Modelfile: {e}", param="modelfile") from None
        from_, parameters, template, system = mf.from_, dict(mf.parameters), mf.template, mf.system
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
    if not from_:
        raise ApiError(400, "'from' (a model name or a GGUF path on this machine) or a 'modelfile' with FROM is "
                            "required", param="from")
    try:
        record = await store.call("create", name, from_, parameters, template, system)
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


async def copy(request):
    _, store, _ = _ctx(request)
    body = await read_json(request)
    src = model_name(body, "source")
    dst = model_name(body, "destination")
    try:
        await store.call("copy", src, dst)
    except Exception as e:  # noqa: BLE001
        raise store_error(e, src) from None
    return web.json_response({})


async def delete(request):
    scheduler, store, _ = _ctx(request)
    body = await read_json(request)
    name = model_name(body, "model") if body.get("model") is not None else model_name(body, "name")
    try:
        record = await store.call("get", name)
        if record.name in scheduler.models:
            await scheduler.unload(record.name, reason="deleted")
        await store.call("remove", name)
    except Exception as e:  # noqa: BLE001
        raise store_error(e, name) from None
    return web.json_response({})


async def pull(request):
    body = await read_json(request, allow_empty=True)
    name = body.get("model") or body.get("name") or ""
    raise ApiError(501, f"pulling models from a registry is not supported (asked for {name!r}); add a GGUF with "
                        "`strata import PATH` or POST /api/create {\"model\": NAME, \"from\": \"/path/to/model.gguf\"}",
                   code="not_supported")


async def push(request):
    raise ApiError(501, "pushing models to a registry is not supported", code="not_supported")


async def blobs(request):
    raise ApiError(501, "blob uploads are not supported; create models from a GGUF path on this machine with "
                        "POST /api/create {\"model\": NAME, \"from\": PATH}", code="not_supported")


async def ps(request):
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


# ---- generation -----------------------------------------------------------------------------------------

async def _load_or_unload(request, scheduler, name: str, keep_alive, chat: bool, options):
    """Empty prompt / no messages: load the model (or unload it with keep_alive 0), like Ollama."""
    ka = parse_keep_alive(keep_alive, scheduler.config.keep_alive)
    record = await scheduler.resolve(name)
    ro = parse_ollama_options(options, record.parameters)     # load-time options (num_ctx...) apply to the load
    base = {"model": name, "created_at": now_iso()}
    if ka == 0:
        scheduler.request_unload(record.name)
        reason = "unload"
    else:
        async with scheduler.lease(record.name, ro, keep_alive):
            pass
        reason = "load"
    if chat:
        base["message"] = {"role": "assistant", "content": ""}
    else:
        base["response"] = ""
    base.update({"done": True, "done_reason": reason})
    return web.json_response(base)


async def _run(request, *, name, ro, keep_alive, req, stream, chat, top_logprobs, want_context=False):
    scheduler, _, metrics = _ctx(request)
    outcome = generation.Outcome()
    gen = generation.events(scheduler, metrics, name, ro, keep_alive, req, outcome)
    w = NDJSONWriter(request) if stream else None

    def chunk(text: str, lps) -> dict:
        d = {"model": name, "created_at": now_iso()}
        if chat:
            d["message"] = {"role": "assistant", "content": text}
        else:
            d["response"] = text
        d["done"] = False
        if req.logprobs and lps:
            d["logprobs"] = logprobs_json(lps, top_logprobs)
        return d

    try:
        await gen.__anext__()       # the lease: loaded, slot taken
        async for ev in gen:
            if type(ev).__name__ == "TokenEvent" and stream:
                await w.send(chunk(ev.text, ev.logprobs))
    except ApiError as e:
        if w is None or not w.resp.prepared:
            raise
        await w.send({"error": e.message})
        return await w.finish()
    finally:
        await gen.aclose()
    done = outcome.done
    final = chunk("" if stream else "".join(outcome.text), None if stream else outcome.logprobs)
    final["done"] = True
    final["done_reason"] = done_reason(done.reason) if done else "stop"
    final.update(timing_fields(done, outcome.elapsed, outcome.load_wait))
    if done is not None and done.context_tokens and want_context:
        final["context"] = list(done.context_tokens)
    if not stream:
        if req.logprobs:
            final["logprobs"] = logprobs_json(outcome.logprobs, top_logprobs)
        return web.json_response(final)
    await w.send(final)
    return await w.finish()


async def _resolve(scheduler, p):
    """The model record and its request options for a generate/chat body; a bad keep_alive is a 400 here,
    before any work."""
    record = await scheduler.resolve(p.model)
    ro = parse_ollama_options(p.options, record.parameters)
    parse_keep_alive(p.keep_alive, scheduler.config.keep_alive)
    return record, ro


async def generate(request):
    scheduler, _, _ = _ctx(request)
    p = parse_generate(await read_json(request))
    if not p.prompt:
        return await _load_or_unload(request, scheduler, p.model, p.keep_alive, chat=False, options=p.options)
    record, ro = await _resolve(scheduler, p)
    prompt, system, raw = p.prompt, p.system or record.system, p.raw
    template = p.template or record.template
    if template and not raw:
        try:   # an Ollama (Go) prompt template: render it here and send the result raw
            prompt = render_template(template, {"System": system or "", "Prompt": p.prompt, "Response": ""})
            system, raw = None, True
        except TemplateError as e:
            if p.template:
                raise ApiError(400, f"template: {e}", param="template") from None
            # a Modelfile TEMPLATE beyond the subset: the GGUF's own chat template is used instead
    req = generation.build_request(ro, prompt=prompt, system=system, raw=raw, json_mode=p.json_mode,
                                   json_schema=p.json_schema, logprobs=p.logprobs, top_logprobs=p.top_logprobs)
    return await _run(request, name=record.name, ro=ro, keep_alive=p.keep_alive, req=req, stream=p.stream,
                      chat=False, top_logprobs=p.top_logprobs, want_context=not p.raw)


async def chat(request):
    scheduler, _, _ = _ctx(request)
    p = parse_chat(await read_json(request))
    if not p.messages:
        return await _load_or_unload(request, scheduler, p.model, p.keep_alive, chat=True, options=p.options)
    record, ro = await _resolve(scheduler, p)
    messages = generation.with_default_system(p.messages, record.system)
    req = generation.build_request(ro, messages=messages, json_mode=p.json_mode, json_schema=p.json_schema,
                                   logprobs=p.logprobs, top_logprobs=p.top_logprobs)
    return await _run(request, name=record.name, ro=ro, keep_alive=p.keep_alive, req=req, stream=p.stream,
                      chat=True, top_logprobs=p.top_logprobs)


def _fit_dimensions(vectors: list[list[float]], dims: int | None) -> list[list[float]]:
    if not dims:
        return vectors
    out = []
    for v in vectors:
        v = v[:dims]
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append([x / norm for x in v])
    return out


async def embed(request):
    scheduler, _, metrics = _ctx(request)
    body = await read_json(request)
    name = model_name(body)
    inputs = parse_embed_input(body, "input")
    truncate = field(body, "truncate", bool, True)
    dims = field(body, "dimensions", int)
    if dims is not None and dims < 1:
        raise ApiError(400, "'dimensions' must be >= 1", param="dimensions")
    record = await scheduler.resolve(name)
    ro = parse_ollama_options(field(body, "options", dict), record.parameters)
    keep_alive = body.get("keep_alive")
    parse_keep_alive(keep_alive, scheduler.config.keep_alive)
    t0 = asyncio.get_running_loop().time()
    if not inputs:
        async with scheduler.lease(record.name, ro, keep_alive) as lease:
            load = lease.load_wait
        return web.json_response({"model": name, "embeddings": [], "total_duration": 0,
                                  "load_duration": int(load * 1e9), "prompt_eval_count": 0})
    res, load = await generation.embed(scheduler, metrics, record.name, ro, keep_alive, inputs, truncate)
    total = asyncio.get_running_loop().time() - t0
    return web.json_response({
        "model": name,
        "embeddings": _fit_dimensions(res.embeddings, dims),
        "total_duration": int(total * 1e9),
        "load_duration": int(load * 1e9),
        "prompt_eval_count": res.prompt_tokens,
    })


async def embeddings(request):
    """Legacy /api/embeddings: one `prompt`, answers {"embedding": [...]}."""
    scheduler, _, metrics = _ctx(request)
    body = await read_json(request)
    name = model_name(body)
    prompt = field(body, "prompt", str, "")
    record = await scheduler.resolve(name)
    ro = parse_ollama_options(field(body, "options", dict), record.parameters)
    keep_alive = body.get("keep_alive")
    parse_keep_alive(keep_alive, scheduler.config.keep_alive)
    if not prompt:
        async with scheduler.lease(record.name, ro, keep_alive):
            pass
        return web.json_response({"embedding": []})
    res, _ = await generation.embed(scheduler, metrics, record.name, ro, keep_alive, [prompt], True,
                                    normalize=False)
    return web.json_response({"embedding": res.embeddings[0] if res.embeddings else []})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/", root)
    r.add_get("/api/version", version)
    r.add_get("/api/tags", tags)
    r.add_post("/api/show", show)
    r.add_post("/api/create", create)
    r.add_post("/api/copy", copy)
    r.add_delete("/api/delete", delete)
    r.add_post("/api/pull", pull)
    r.add_post("/api/push", push)
    r.add_route("*", "/api/blobs/{digest}", blobs)
    r.add_get("/api/ps", ps)
    r.add_post("/api/generate", generate)
    r.add_post("/api/chat", chat)
    r.add_post("/api/embed", embed)
    r.add_post("/api/embeddings", embeddings)
