"""OpenAI's Responses API: POST /v1/responses (stateless), parse -> run -> render like every dialect.
Covered by tests/integration/service/test_service_agents.py (Responses through the openai client)."""
from __future__ import annotations

from aiohttp import web

from ...http.bodies import read_json
from ...http.errors import error_bodies
from ..base import serve
from . import parse, render


async def responses(request):
    req, wire = parse.parse_responses(await read_json(request))
    return await serve(request, req, lambda job: render.ResponsesRenderer(req.model, wire,
                                                                          show_thinking=req.think is not False))


def add_routes(app: web.Application) -> None:
    with error_bodies(app).speaking(app, render.error_body):
        app.router.add_post("/v1/responses", responses)
