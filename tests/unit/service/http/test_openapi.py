"""The OpenAPI document (http/openapi.py) covers every route, each described."""
from __future__ import annotations

from app.service.config import ServiceConfig


def test_openapi_covers_every_route():
    from app.service.app import create_app
    from app.service.http.openapi import build_openapi

    app = create_app(ServiceConfig(port=0))
    doc = build_openapi(app)
    assert doc["openapi"].startswith("3.")
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        path = route.resource.canonical.replace("{model:.+}", "{model}")
        methods = doc["paths"][path]
        assert (route.method.lower() in methods) or route.method == "*", (route.method, path)
        for op in methods.values():
            assert op["summary"] and not op["summary"].startswith(route.method + " "), path   # described, not default
    for needed in ("/api/generate", "/api/chat", "/v1/chat/completions", "/api/layout", "/api/events", "/metrics"):
        assert needed in doc["paths"]
