"""One exception type for every answer that is not a success, rendered by the error middleware (security.py) and
a non-streamed answer's late failure (dialects/whole.py) in the body of the route's dialect: each dialect registers
its routes with its own error body (`ErrorBodies.speaking`: Ollama's `{"error": "..."}`, OpenAI's `{"error":
{"message", "type", "param", "code"}}`, Anthropic's `{"type": "error", "error": {...}}`, ...); a path no route
serves (a 404, a 405) gets the body of the dialect whose namespace holds it (`/v1`: OpenAI's, `/v1/messages`:
Anthropic's), else the plain one.
Covered by tests/unit/service/http/test_error_bodies.py (every route's body) and the integration tests' clients."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from aiohttp import web


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type or _default_type(status)
        self.param = param
        self.code = code
        self.headers = headers or {}

    def openai_message(self) -> str:
        """The message as OpenAI's error object words it (ContextLengthError has its own words)."""
        return self.message

    def anthropic_message(self) -> str:
        """The message as Anthropic's error words it (ContextLengthError has its own words)."""
        return self.message


class ContextLengthError(ApiError):
    """A prompt that leaves no room for a reply in the model's context, answered in each dialect's words:
    OpenAI's `context_length_exceeded`, Anthropic's "prompt is too long: N tokens > M maximum", Ollama's
    plain error (error_body). Never a silent cut (docs/architecture.md, "Context"). The reply's max_tokens is never
    part of it (a prompt that fits is served, its reply capped by the room left, as llama-server does); `reserve`
    is what the request's own rule claimed besides (Ollama's num_predict, at most half the context)."""

    def __init__(self, model: str, prompt_tokens: int, reserve: int, limit: int, why: str = ""):
        self.prompt_tokens, self.reserve, self.limit = prompt_tokens, reserve, limit
        extra = f" plus {reserve} reserved for the reply" if reserve else ""
        super().__init__(400, f"model {model!r}: the prompt is {prompt_tokens} tokens{extra}, more than the "
                              f"context of {limit} tokens (num_ctx){why}; shorten it, or ask for a larger num_ctx",
                         param="messages", code="context_length_exceeded")

    def openai_message(self) -> str:
        if not self.reserve:
            return (f"This model's maximum context length is {self.limit} tokens. However, your messages resulted "
                    f"in {self.prompt_tokens} tokens. Please reduce the length of the messages.")
        return (f"This model's maximum context length is {self.limit} tokens. However, you requested "
                f"{self.prompt_tokens + self.reserve} tokens ({self.prompt_tokens} in the messages, {self.reserve} "
                f"in the completion). Please reduce the length of the messages or completion.")

    def anthropic_message(self) -> str:
        # the longest prompt that fits leaves one token of room for the reply
        return f"prompt is too long: {self.prompt_tokens} tokens > {max(0, self.limit - max(1, self.reserve))} maximum"


def _default_type(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 404:
        return "not_found_error"
    if status == 429 or status == 503:
        return "server_overloaded"
    if status < 500:
        return "invalid_request_error"
    return "server_error"


ErrorBody = Callable[[ApiError], dict]      # an error as one dialect's JSON body


def plain_body(err: ApiError) -> dict:
    """`{"error": "..."}`: Ollama's error body, and that of a path no dialect speaks for."""
    return {"error": err.message}


class ErrorBodies:
    """Which body each route's errors are rendered in: the one of the dialect that added the route (`speaking`);
    for a request no route serves, the one of the dialect whose namespace holds its path (the longest), else
    `plain_body`."""

    def __init__(self) -> None:
        self._routes: dict[web.AbstractRoute, ErrorBody] = {}
        self._namespaces: dict[str, ErrorBody] = {}

    @contextmanager
    def speaking(self, app: web.Application, body: ErrorBody, namespace: str | None = None) -> Iterator[None]:
        """Every route `app` gains inside the block renders its errors with `body`; `namespace` (a path prefix such
        as "/v1"): so do the paths under it that no route serves."""
        before = set(app.router.routes())
        yield
        for route in app.router.routes():
            if route not in before:
                self._routes[route] = body
        if namespace is not None:
            self._namespaces[namespace] = body

    def body_for(self, request: web.Request) -> ErrorBody:
        body = self._routes.get(request.match_info.route)
        if body is not None:
            return body
        path = request.path
        claims = [ns for ns in self._namespaces if path == ns or path.startswith(ns.rstrip("/") + "/")]
        return self._namespaces[max(claims, key=len)] if claims else plain_body


ERROR_BODIES = web.AppKey("error_bodies", ErrorBodies)


def error_bodies(app: web.Application) -> ErrorBodies:
    """The app's ErrorBodies (made on first use, while the routes are added)."""
    bodies = app.get(ERROR_BODIES)
    if bodies is None:
        bodies = app[ERROR_BODIES] = ErrorBodies()
    return bodies


def error_body(request: web.Request, err: ApiError) -> dict:
    """`err` as the body of the dialect that serves `request`'s route (ErrorBodies)."""
    bodies = request.app.get(ERROR_BODIES)
    return (bodies.body_for(request) if bodies is not None else plain_body)(err)
