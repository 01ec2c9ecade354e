"""One exception type for every answer that is not a success, rendered by the error middleware in the dialect
of the route: Ollama's `{"error": "..."}` or OpenAI's `{"error": {"message", "type", "param", "code"}}`."""
from __future__ import annotations


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


def is_openai_path(path: str) -> bool:
    return path.startswith("/v1/") or path == "/v1"


def error_body(path: str, err: ApiError) -> dict:
    if is_openai_path(path):
        return {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}
    return {"error": err.message}
