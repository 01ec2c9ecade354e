"""Ollama's wire format -> the internal request (docs/api.md of ollama/ollama, and the `ollama` Python package's
_types.py). Every check is a 400 that names the field."""
from __future__ import annotations

from ...generation import images as image_input
from ...generation.request import EmbeddingRequest, GenerationRequest, field, in_range, model_name
from ...generation.tools import check_tool_results, parse_tool_calls, parse_tool_choice, parse_tools
from ...http.errors import ApiError
from ...generation.keep_alive import request_keep_alive

ROLES = ("system", "user", "assistant", "tool")


def parse_format(fmt) -> tuple[bool, dict | None]:
    """`format`: "" / None (free text), "json", or a JSON schema object -> (json_mode, json_schema)."""
    if fmt is None or fmt == "":
        return False, None
    if fmt == "json":
        return True, None
    if isinstance(fmt, dict):
        return False, fmt
    raise ApiError(400, f"'format' must be \"json\" or a JSON schema object, got {fmt!r}", param="format")


def _common(req: GenerationRequest, body: dict) -> GenerationRequest:
    """The fields /api/generate and /api/chat share."""
    req.stream = field(body, "stream", bool, True)
    req.keep_alive = request_keep_alive(body.get("keep_alive"))
    req.options = field(body, "options", dict) or {}
    req.json_mode, req.json_schema = parse_format(body.get("format"))
    logprobs = field(body, "logprobs", bool, False)
    top = field(body, "top_logprobs", int, 0)
    in_range("top_logprobs", top, 0, 20, f"'top_logprobs' must be between 0 and 20, got {top}")
    req.logprobs, req.top_logprobs = logprobs or top > 0, top
    req.think = field(body, "think", (bool, str))    # checked against the model in chat_features.check
    if isinstance(req.think, str) and req.think in ("low", "medium", "high"):
        req.think_effort = req.think                  # a level is also a thinking budget (think_budget.py)
    return req


def _images(obj: dict, where: str) -> list[bytes] | None:
    """`images`: base64-encoded images (checked: service/generation/images.py), or None when there are none."""
    raw = obj.get("images")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list):
        raise ApiError(400, f"{where}.images must be an array of base64-encoded images", param="images")
    return [image_input.from_base64(v, f"{where}.images[{j}]", "images") for j, v in enumerate(raw)]


def parse_generate(body: dict) -> GenerationRequest:
    """/api/generate. An empty prompt means "load the model" (or unload it, with keep_alive 0)."""
    req = GenerationRequest(model=model_name(body), prompt=field(body, "prompt", str, ""))
    req.return_progress = bool(field(body, "return_progress", bool, False))
    suffix = field(body, "suffix", str)
    req.system = field(body, "system", str)
    req.template = field(body, "template", str)
    req.raw = field(body, "raw", bool, False)
    _common(req, body)
    ctx = field(body, "context", list)
    if ctx is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in ctx):
        raise ApiError(400, "'context' must be a list of token ids", param="context")
    req.context = ctx or None
    req.images = _images(body, "generate")
    req.suffix = suffix or None              # insert: checked against the model's FIM tokens
    req.want_context = not req.raw and req.suffix is None
    # a prompt longer than the context: Ollama's token rule, or a 400 with truncate=false (never a silent cut)
    req.overflow = "truncate" if field(body, "truncate", bool, True) else "error"
    req.shift = field(body, "shift", bool, True)      # a reply that fills the context shifts it (Ollama's default)
    return req


def parse_messages(raw, key: str = "messages") -> list[dict]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ApiError(400, f"{key!r} must be an array of messages", param=key)
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ApiError(400, f"{key}[{i}] must be an object with 'role' and 'content'", param=key)
        role = m.get("role")
        if role not in ROLES:
            raise ApiError(400, f"{key}[{i}].role must be one of {', '.join(ROLES)}, got {role!r}", param=key)
        content = m.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ApiError(400, f"{key}[{i}].content must be a string", param=key)
        msg = {"role": role, "content": content}
        imgs = _images(m, f"{key}[{i}]")
        if imgs:
            msg["images"] = imgs
        if m.get("tool_calls") is not None:
            msg["tool_calls"] = parse_tool_calls(m["tool_calls"], f"{key}[{i}]", key)
        if m.get("tool_name") is not None:
            msg["name"] = field(m, "tool_name", str, name=f"{key}[{i}].tool_name")
        if isinstance(m.get("thinking"), str) and m["thinking"]:
            msg["reasoning_content"] = m["thinking"]      # the name Hugging Face templates read
        out.append(msg)
    check_tool_results(out, key)
    return out


def tool_choice(raw, tools: list[dict] | None) -> str | None:
    """`tool_choice` on /api/chat. Ollama's API has none and ignores the field, but clients send one to force a
    tool: the AI SDK's ollama-ai-provider-v2 ("required", "none", "auto" or {"type": "function", "name"}), and
    others OpenAI's {"type": "function", "function": {"name"}}. Those are honoured as on /v1 (a forced call
    through the grammar); anything else, or a choice the tools cannot meet, is ignored as Ollama ignores it (the
    tools then mean "auto"), never a 400."""
    try:
        return parse_tool_choice(raw, tools)
    except ApiError:
        return None


def parse_chat(body: dict) -> GenerationRequest:
    """/api/chat. No messages means "load the model" (or unload it, with keep_alive 0)."""
    req = GenerationRequest(model=model_name(body))
    req.return_progress = bool(field(body, "return_progress", bool, False))
    req.messages = parse_messages(body.get("messages"))
    _common(req, body)
    req.tools = parse_tools(body.get("tools"))
    req.tool_choice = tool_choice(body.get("tool_choice"), req.tools)
    # a chat longer than the context: Ollama drops the oldest messages (system and last kept), or 400s with
    # truncate=false
    req.overflow = "drop_messages" if field(body, "truncate", bool, True) else "error"
    req.shift = field(body, "shift", bool, True)
    return req


def parse_embed_input(body: dict, key: str = "input") -> list[str]:
    v = body.get(key)
    if v is None:
        raise ApiError(400, f"{key!r} is required: a string or a list of strings", param=key)
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return list(v)
    raise ApiError(400, f"{key!r} must be a string or a list of strings", param=key)


def parse_embed(body: dict) -> EmbeddingRequest:
    """/api/embed. No inputs means "load the model"."""
    req = EmbeddingRequest(model=model_name(body), inputs=parse_embed_input(body, "input"))
    req.truncate = field(body, "truncate", bool, True)
    req.dimensions = field(body, "dimensions", int)
    if req.dimensions is not None and req.dimensions < 1:
        raise ApiError(400, "'dimensions' must be >= 1", param="dimensions")
    req.options = field(body, "options", dict) or {}
    req.keep_alive = request_keep_alive(body.get("keep_alive"))
    return req


def parse_embeddings(body: dict) -> EmbeddingRequest:
    """The legacy /api/embeddings: one `prompt`, not normalised. An empty prompt only loads the model."""
    req = EmbeddingRequest(model=model_name(body), inputs=[], normalize=False)
    prompt = field(body, "prompt", str, "")
    req.inputs = [prompt] if prompt else []
    req.options = field(body, "options", dict) or {}
    req.keep_alive = request_keep_alive(body.get("keep_alive"))
    return req
