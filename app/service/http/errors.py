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


def is_openai_path(path: str) -> bool:
    return path.startswith("/v1/") or path == "/v1"


ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def is_anthropic_path(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def anthropic_error(err: ApiError) -> dict:
    kind = ANTHROPIC_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    message = err.anthropic_message() if isinstance(err, ContextLengthError) else err.message
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_body(path: str, err: ApiError) -> dict:
    if is_anthropic_path(path):
        return anthropic_error(err)
    if is_openai_path(path):
        message = err.openai_message() if isinstance(err, ContextLengthError) else err.message
        return {"error": {"message": message, "type": err.type, "param": err.param, "code": err.code}}
    return {"error": err.message}
