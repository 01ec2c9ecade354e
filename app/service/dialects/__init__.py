"""The API dialects: each one a parser (wire -> request.GenerationRequest) and a renderer (result -> wire) over
the one internal request and result types. See docs/architecture.md, "Adding an API dialect".
Covered by tests/unit/service/dialects/test_dialect_frames.py (each parser and renderer)."""
from __future__ import annotations

from aiohttp import web

from .anthropic import routes as anthropic
from .ollama import routes as ollama
from .openai import routes as openai
from .responses import routes as responses

DIALECTS = (ollama, openai, anthropic, responses)


def add_routes(app: web.Application) -> None:
    for dialect in DIALECTS:
        dialect.add_routes(app)
