"""OpenAI's endpoints (/v1): chat completions, completions, embeddings, models. Each generation handler is
parse (parse.py) -> run (generation/pipeline.py, via base.serve) -> render (render.py).
Covered by tests/integration/service/test_service_api.py (the openai client)."""
from __future__ import annotations

from aiohttp import web

from ...generation import pipeline
from ...http.bodies import read_json
from ...http.errors import ApiError
from ..base import context, serve
from . import parse, render


async def chat_completions(request):
    req, wire = parse.parse_chat(await read_json(request))
    cid = pipeline.new_id("chatcmpl")
    return await serve(request, req, lambda job: render.ChatRenderer(
        req.model, wire, logprobs=req.logprobs, top=req.top_logprobs, id=cid))


async def completions(request):
    req, wire = parse.parse_completion(await read_json(request))
    cid = pipeline.new_id("cmpl")
    return await serve(request, req, lambda job: render.CompletionRenderer(req.model, wire, prompt=req.prompt,
                                                                            id=cid))


async def apply_template(request):
    """llama-server's POST /apply-template: a chat completion body -> {"prompt": the text the model would read}
    (its chat template over the messages and tools), so a client can see exactly what reached the model."""
    scheduler, _, _ = context(request)
    req, _ = parse.parse_chat(await read_json(request))
    res = await pipeline.render_prompt(scheduler, req)
    return web.json_response({"prompt": res.text, "n_tokens": len(res.tokens)})


async def embeddings(request):
    scheduler, _, metrics = context(request)
    req, encoding = parse.parse_embeddings(await read_json(request))
    res = await pipeline.embed(scheduler, metrics, req)
    return web.json_response(render.embeddings_answer(req.model, res, encoding))


async def list_models(request):
    _, store, _ = context(request)
    records = await store.list()
    return web.json_response({"object": "list", "data": [render.model_entry(r) for r in records]})


async def get_model(request):
    scheduler, _, _ = context(request)
    name = request.match_info["model"]
    try:
        record = await scheduler.resolve(name)
    except ApiError as e:
        if e.status == 404:
            raise ApiError(404, f"The model {name!r} does not exist", param="model", code="model_not_found") from None
        raise
    return web.json_response(render.model_entry(record))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_post("/v1/completions", completions)
    r.add_post("/apply-template", apply_template)
    r.add_post("/v1/embeddings", embeddings)
    r.add_get("/v1/models", list_models)
    r.add_get("/v1/models/{model:.+}", get_model)
