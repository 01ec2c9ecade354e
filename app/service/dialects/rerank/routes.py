"""Reranking: POST /v1/rerank and /rerank in the shape llama-server, Jina and Cohere use (`query`, `documents`,
`top_n`, `return_documents`; `results` of `index` and `relevance_score`, best first), and /api/rerank with the
same fields. For GGUF rerankers (pooling type rank: the BGE and Qwen3 reranker families); any other model is a 400
that says so. The pairs go through the runner's embedding batch (pipeline.rerank; runner/embedding/embeddings.py) with
the embeddings' truncation rule: a pair longer than the context is cut at its end, or refused with
`truncate: false`.
Covered by tests/integration/service/test_rerank.py."""
from __future__ import annotations

from typing import Any

from aiohttp import web

from ... import appkeys as keys
from ...generation import pipeline
from ...generation.request import field, model_name, ollama_options
from ...http.bodies import read_json
from ...http.errors import ApiError, error_bodies, plain_body
from ...generation.keep_alive import request_keep_alive


def _documents(body: dict) -> list[str]:
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs:
        raise ApiError(400, "'documents' must be a non-empty array of strings", param="documents")
    out = []
    for i, d in enumerate(docs):
        if isinstance(d, dict) and isinstance(d.get("text"), str):     # Jina / Cohere: {"text": ...}
            d = d["text"]
        if not isinstance(d, str):
            raise ApiError(400, f"documents[{i}] must be a string (or an object with 'text')", param="documents")
        out.append(d)
    return out


def parse_rerank(body: dict) -> pipeline.RerankRequest:
    query = field(body, "query", str, required=True)
    top_n = field(body, "top_n", int)
    if top_n is not None and top_n < 1:
        raise ApiError(400, f"'top_n' must be >= 1, got {top_n}", param="top_n")
    return pipeline.RerankRequest(
        model=model_name(body), query=query, documents=_documents(body), top_n=top_n,
        return_documents=field(body, "return_documents", bool, False), truncate=field(body, "truncate", bool, True),
        options=ollama_options(body), keep_alive=request_keep_alive(body.get("keep_alive")))


def render_rerank(req: pipeline.RerankRequest, res: pipeline.RerankResult) -> dict:
    order = sorted(range(len(res.scores)), key=lambda i: -res.scores[i])[:req.top_n or len(res.scores)]
    results = []
    for i in order:
        r: dict[str, Any] = {"index": i, "relevance_score": res.scores[i]}
        if req.return_documents:
            r["document"] = {"text": req.documents[i]}
        results.append(r)
    return {"id": res.id, "model": res.model, "object": "list", "results": results,
            "usage": {"prompt_tokens": res.prompt_tokens, "total_tokens": res.prompt_tokens},
            "meta": {"billed_units": {"search_units": 1}}}


async def rerank(request: web.Request) -> web.Response:
    req = parse_rerank(await read_json(request))
    res = await pipeline.rerank(request.app[keys.SCHEDULER], request.app[keys.METRICS], req)
    return web.json_response(render_rerank(req, res))


def openai_error_body(err: ApiError) -> dict:
    """The errors of /v1/rerank (llama-server's and vLLM's path): OpenAI's error object, as their other /v1 routes
    answer."""
    return {"error": {"message": err.openai_message(), "type": err.type, "param": err.param, "code": err.code}}


def add_routes(app: web.Application) -> None:
    bodies = error_bodies(app)
    for path, body in (("/v1/rerank", openai_error_body), ("/rerank", plain_body), ("/api/rerank", plain_body)):
        with bodies.speaking(app, body):
            app.router.add_post(path, rerank)
