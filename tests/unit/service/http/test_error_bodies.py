"""Each error is rendered by the dialect that serves its route (http/errors.py: ErrorBodies; each dialect registers
its routes with its own body), and the bodies are the ones clients have always read: checked over every route the
app has, through a real aiohttp server on loopback, against the path rule the bodies followed before (Anthropic's
under /v1/messages, OpenAI's under /v1, Ollama's plain body elsewhere)."""
from __future__ import annotations

import asyncio
import re

import aiohttp
from aiohttp import web

from app.service.app import create_app
from app.service.config import ServiceConfig
from app.service.dialects.anthropic.render import error_body as anthropic_body
from app.service.dialects.ollama.render import error_body as ollama_body
from app.service.dialects.openai.render import error_body as openai_body
from app.service.dialects.responses.render import error_body as responses_body
from app.service.http.errors import ApiError, ContextLengthError, error_bodies, plain_body
from app.service.http.security import make_middlewares

KEY = "secret"


def body_by_path(path: str, err: ApiError) -> dict:
    """The bodies as the path chose them before each dialect rendered its own (the wire clients read)."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return anthropic_body(err)
    if path.startswith("/v1/") or path == "/v1":
        return openai_body(err)
    return plain_body(err)


def concrete(canonical: str) -> str:
    return re.sub(r"\{[^}]*\}", "x", canonical)


async def _answers(app: web.Application, requests: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    out = {}
    try:
        async with aiohttp.ClientSession() as http:
            for method, path in requests:
                async with http.request(method, f"http://127.0.0.1:{port}{path}") as r:
                    out[(method, path)] = (r.status, await r.json() if method != "HEAD" else None)
    finally:
        await runner.cleanup()
    return out


def test_every_route_answers_errors_in_its_dialects_body():
    """An API key the requests do not send: every route refuses with a 401 before its handler runs, rendered by
    the route's dialect; paths no route serves (404, 405) by the dialect whose namespace holds them."""
    app = create_app(ServiceConfig(port=0, api_key=KEY))
    app.cleanup_ctx.clear()          # no store, no scheduler: no request gets past the key
    routes = sorted({(r.method, concrete(r.resource.canonical)) for r in app.router.routes()
                     if r.method not in ("HEAD", "*") and concrete(r.resource.canonical) != "/api/version"})
    unserved = [("GET", "/v1/nope"), ("GET", "/v1"), ("GET", "/v1/messages/nope"), ("GET", "/v1/messages"),
                ("GET", "/api/nope"), ("GET", "/nope"), ("GET", "/v1x"), ("DELETE", "/v1/chat/completions")]
    assert len(routes) > 30
    answers = asyncio.run(_answers(app, routes + unserved))
    refused = ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <STRATA_API_KEY>'",
                       code="invalid_api_key")
    for (method, path), (status, body) in answers.items():
        assert status == 401, (method, path, status, body)
        assert body == body_by_path(path, refused), (method, path, body)
    kinds = {("anthropic" if "type" in b else "openai" if isinstance(b["error"], dict) else "plain")
             for _, b in answers.values()}
    assert kinds == {"anthropic", "openai", "plain"}


def test_the_route_not_its_path_chooses_the_body():
    """A route under /v1 registered by a dialect with the plain body answers in it, and one outside /v1 with
    OpenAI's body answers in that; a path no route serves falls to the longest namespace that holds it."""
    app = web.Application(middlewares=make_middlewares(ServiceConfig(port=0)))

    async def fail(request):
        raise ApiError(400, "no", param="x")

    bodies = error_bodies(app)
    with bodies.speaking(app, plain_body):
        app.router.add_get("/v1/plain", fail)
    with bodies.speaking(app, openai_body, namespace="/v1"):
        app.router.add_get("/elsewhere", fail)
    with bodies.speaking(app, anthropic_body, namespace="/v1/messages"):
        pass
    app.router.add_get("/unclaimed", fail)
    answers = asyncio.run(_answers(app, [("GET", "/v1/plain"), ("GET", "/elsewhere"), ("GET", "/unclaimed"),
                                         ("GET", "/v1/messages/x"), ("GET", "/v1/other")]))
    err = ApiError(400, "no", param="x")
    assert answers[("GET", "/v1/plain")] == (400, {"error": "no"})
    assert answers[("GET", "/elsewhere")] == (400, openai_body(err))
    assert answers[("GET", "/unclaimed")] == (400, {"error": "no"})
    assert answers[("GET", "/v1/messages/x")][1]["type"] == "error"          # a 404 in Anthropic's body
    assert answers[("GET", "/v1/other")][1]["error"]["type"] == "not_found_error"   # ... and in OpenAI's


def test_each_dialect_words_a_prompt_too_long_its_own_way():
    err = ContextLengthError("m", prompt_tokens=5000, reserve=0, limit=4096)
    assert openai_body(err)["error"]["message"].startswith("This model's maximum context length is 4096 tokens")
    assert openai_body(err)["error"]["code"] == "context_length_exceeded"
    assert responses_body(err) == openai_body(err)
    assert anthropic_body(err) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 5000 tokens > 4095 maximum"}}
    assert ollama_body(err) == {"error": err.message}
    assert anthropic_body(ApiError(503, "busy"))["error"]["type"] == "overloaded_error"
