"""Anthropic's Messages API: POST /v1/messages (streamed or not) and /v1/messages/count_tokens. Each handler is
parse (parse.py) -> run (generation/pipeline.py, via base.serve) -> render (render.py).
Covered by tests/integration/service/test_service_agents.py (the anthropic client)."""
from __future__ import annotations

from aiohttp import web

from ...generation import pipeline
from ...http.bodies import read_json
from ...http.errors import error_bodies
from ..base import context, serve
from . import parse, render


async def messages(request):
    req, wire = parse.parse_messages_request(await read_json(request))
    return await serve(request, req, lambda job: render.MessagesRenderer(req.model, wire,
                                                                         show_thinking=req.think is not False))


async def count_tokens(request: web.Request) -> web.StreamResponse:
    """The prompt's tokens through the model's chat template (tools included), counted by its runner."""
    scheduler, _, _ = context(request)
    req, _ = parse.parse_messages_request(await read_json(request), count_only=True)
    n = await pipeline.count_prompt(scheduler, req)
    return web.json_response({"input_tokens": n})


def add_routes(app: web.Application) -> None:
    r = app.router
    with error_bodies(app).speaking(app, render.error_body, namespace="/v1/messages"):
        r.add_post("/v1/messages", messages)
        r.add_post("/v1/messages/count_tokens", count_tokens)
