"""Ollama's generation endpoints: /api/generate, /api/chat, /api/embed, /api/embeddings. Each handler is
parse (parse.py) -> run (generation/pipeline.py, via base.serve) -> render (render.py). The model-management
endpoints (tags, show, create, ps, ...) are in manage_routes.py, pull/push/blobs in transfer_routes.py.
Covered by tests/integration/service/test_service_api.py (the ollama client)."""
from __future__ import annotations

from aiohttp import web

from ...generation import pipeline
from ...generation.request import GenerationRequest
from ...http.bodies import read_json
from ...http.errors import error_bodies
from ..base import context, serve
from . import parse, render


async def _load_or_unload(request: web.Request, req: GenerationRequest, *, chat: bool) -> web.Response:
    """Empty prompt / no messages: load the model (or unload it with keep_alive 0), like Ollama."""
    scheduler, _, _ = context(request)
    record = await scheduler.resolve(req.model)
    ro = pipeline.request_options(req.options, record.parameters)   # load-time options (num_ctx...) apply
    ka = scheduler.keep_alive_for(req.keep_alive)
    if ka == 0:
        scheduler.request_unload(record.name)
        reason = "unload"
    else:
        async with pipeline.leased(scheduler, record.name, ro, req.keep_alive, record):
            pass
        reason = "load"
    return web.json_response(render.load_answer(req.model, chat=chat, reason=reason))


async def generate(request):
    req = parse.parse_generate(await read_json(request))
    if not req.prompt:
        return await _load_or_unload(request, req, chat=False)
    return await serve(request, req, lambda job: render.OllamaRenderer(job.model, req, chat=False))


async def chat(request):
    req = parse.parse_chat(await read_json(request))
    if not req.messages:
        return await _load_or_unload(request, req, chat=True)
    return await serve(request, req, lambda job: render.OllamaRenderer(job.model, req, chat=True))


async def embed(request: web.Request) -> web.StreamResponse:
    scheduler, _, metrics = context(request)
    req = parse.parse_embed(await read_json(request))
    res = await pipeline.embed(scheduler, metrics, req)
    return web.json_response(render.embed_answer(req, res))


async def embeddings(request: web.Request) -> web.StreamResponse:
    scheduler, _, metrics = context(request)
    req = parse.parse_embeddings(await read_json(request))
    res = await pipeline.embed(scheduler, metrics, req)
    return web.json_response(render.embeddings_answer(res))


def add_routes(app: web.Application) -> None:
    r = app.router
    with error_bodies(app).speaking(app, render.error_body):
        r.add_post("/api/generate", generate)
        r.add_post("/api/chat", chat)
        r.add_post("/api/embed", embed)
        r.add_post("/api/embeddings", embeddings)
