"""OpenAI's endpoints (/v1): chat completions, completions, embeddings, models. Each generation handler is
parse (parse.py) -> run (generation/pipeline.py, via base.serve) -> render (render.py).
Covered by tests/integration/service/test_service_api.py (the openai client)."""
from __future__ import annotations

from aiohttp import web

from ...generation import pipeline
from ...generation.model_card import model_card
from ...http.bodies import read_json
from ...http.errors import ApiError, error_bodies
from ...scheduling.door import ServiceHost
from ...store.records import ModelRecord
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


async def apply_template(request: web.Request) -> web.StreamResponse:
    """llama-server's POST /apply-template: a chat completion body -> {"prompt": the text the model would read}
    (its chat template over the messages and tools), so a client can see exactly what reached the model."""
    scheduler, _, _ = context(request)
    req, _ = parse.parse_chat(await read_json(request))
    res = await pipeline.render_prompt(scheduler, req)
    return web.json_response({"prompt": res.text, "n_tokens": len(res.tokens)})


async def embeddings(request: web.Request) -> web.StreamResponse:
    scheduler, _, metrics = context(request)
    req, encoding = parse.parse_embeddings(await read_json(request))
    res = await pipeline.embed(scheduler, metrics, req)
    return web.json_response(render.embeddings_answer(req.model, res, encoding))


async def _model_object(scheduler: ServiceHost, record: ModelRecord) -> dict:
    """OpenAI's model object plus what agents and their providers read to size prompts and pick features, each
    field in the spelling some client reads: `context_length` (OpenRouter, LM Studio, OpenCode's model lists),
    `max_model_len` (vLLM), `capabilities` (Ollama's names), `input_modalities` / `output_modalities` and
    `supported_features` (OpenCode's and OpenRouter's), `meta` (llama-server's: the GGUF's own numbers).
    The context is what a request without num_ctx gets now (loaded, or what a load would choose)."""
    card = await model_card(scheduler, record)
    entry = render.model_entry(record)
    caps = list(card.capabilities)
    embedding = "embedding" in caps and "completion" not in caps
    entry.update({
        "context_length": card.context or None,
        "max_model_len": card.context or None,
        "capabilities": caps,
        "input_modalities": ["text", "image"] if "vision" in caps else ["text"],
        "output_modalities": ["embedding"] if embedding else ["text"],
        "supported_features": [f for c, f in (("tools", "tools"), ("thinking", "reasoning")) if c in caps],
    })
    if card.info is not None:
        info = card.info
        entry["meta"] = {"n_ctx_train": info.context_length, "n_params": info.n_params, "n_embd": info.n_embd,
                         "n_vocab": info.n_vocab, "size": info.file_size}
    return entry


async def list_models(request: web.Request) -> web.StreamResponse:
    scheduler, store, _ = context(request)
    records = await store.list()
    return web.json_response({"object": "list", "data": [await _model_object(scheduler, r) for r in records]})


async def get_model(request: web.Request) -> web.StreamResponse:
    scheduler, _, _ = context(request)
    name = request.match_info["model"]
    try:
        record = await scheduler.resolve(name)
    except ApiError as e:
        if e.status == 404:
            raise ApiError(404, f"The model {name!r} does not exist", param="model", code="model_not_found") from None
        raise
    return web.json_response(await _model_object(scheduler, record))


def add_routes(app: web.Application) -> None:
    r = app.router
    with error_bodies(app).speaking(app, render.error_body, namespace="/v1"):
        r.add_post("/v1/chat/completions", chat_completions)
        r.add_post("/v1/completions", completions)
        r.add_post("/v1/embeddings", embeddings)
        r.add_get("/v1/models", list_models)
        r.add_get("/v1/models/{model:.+}", get_model)
    # llama-server's endpoint, beside its API rather than in OpenAI's: its errors keep the plain body
    r.add_post("/apply-template", apply_template)
