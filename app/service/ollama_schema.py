"""Ollama wire types (docs/api.md of ollama/ollama, and the `ollama` Python package's _types.py): request parsing
with clear 400s, and response objects built from the engine's protocol messages. Durations are nanoseconds."""
from __future__ import annotations

from dataclasses import dataclass, field as dc_field
from datetime import datetime, timezone

from app.engine.protocol import DoneEvent, TokenLogprob

from .errors import ApiError
from .http_util import field, model_name

ROLES = ("system", "user", "assistant", "tool")


def now_iso(t: datetime | None = None) -> str:
    t = t or datetime.now(timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def ns(seconds: float) -> int:
    return max(0, int(round(seconds * 1e9)))


# ---- requests -----------------------------------------------------------------------------------------------

def parse_format(fmt) -> tuple[bool, dict | None]:
    """`format`: "" / None (free text), "json", or a JSON schema object -> (json_mode, json_schema)."""
    if fmt is None or fmt == "":
        return False, None
    if fmt == "json":
        return True, None
    if isinstance(fmt, dict):
        return False, fmt
    raise ApiError(400, f"'format' must be \"json\" or a JSON schema object, got {fmt!r}", param="format")


def parse_top_logprobs(body: dict) -> tuple[bool, int]:
    logprobs = field(body, "logprobs", bool, False)
    top = field(body, "top_logprobs", int, 0)
    if not 0 <= top <= 20:
        raise ApiError(400, f"'top_logprobs' must be between 0 and 20, got {top}", param="top_logprobs")
    return logprobs or top > 0, top


def _images(obj: dict, where: str) -> None:
    imgs = obj.get("images")
    if imgs:
        raise ApiError(400, f"{where}: images are not supported (the model has no vision encoder)", param="images")


@dataclass(kw_only=True)
class _GenerationCommon:
    """The request fields /api/generate and /api/chat share (parsed by _parse_common_fields). kw_only so the
    subclasses can put their required fields (model, prompt) first."""
    stream: bool = True
    keep_alive: object = None
    options: dict | None = None
    json_mode: bool = False
    json_schema: dict | None = None
    logprobs: bool = False
    top_logprobs: int = 0


def _parse_common_fields(p: _GenerationCommon, body: dict) -> None:
    p.stream = field(body, "stream", bool, True)
    p.keep_alive = body.get("keep_alive")
    p.options = field(body, "options", dict)
    p.json_mode, p.json_schema = parse_format(body.get("format"))
    p.logprobs, p.top_logprobs = parse_top_logprobs(body)


@dataclass
class GenerateParams(_GenerationCommon):
    model: str
    prompt: str
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    raw: bool = False
    context: list[int] | None = None


def parse_generate(body: dict) -> GenerateParams:
    p = GenerateParams(model=model_name(body), prompt=field(body, "prompt", str, ""))
    p.suffix = field(body, "suffix", str)
    p.system = field(body, "system", str)
    p.template = field(body, "template", str)
    p.raw = field(body, "raw", bool, False)
    _parse_common_fields(p, body)
    ctx = field(body, "context", list)
    if ctx is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in ctx):
        raise ApiError(400, "'context' must be a list of token ids", param="context")
    p.context = ctx
    field(body, "think", (bool, str))     # accepted, ignored: these models have no thinking mode
    _images(body, "generate")
    if p.suffix:
        raise ApiError(400, f"model {p.model!r} does not support insert (suffix / fill-in-the-middle)",
                       param="suffix")
    return p


@dataclass
class ChatParams(_GenerationCommon):
    model: str
    messages: list[dict] = dc_field(default_factory=list)


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
        _images(m, f"{key}[{i}]")
        msg = {"role": role, "content": content}
        if m.get("tool_calls"):
            msg["tool_calls"] = m["tool_calls"]
        if m.get("tool_name"):
            msg["tool_name"] = m["tool_name"]
        out.append(msg)
    return out


def parse_chat(body: dict) -> ChatParams:
    p = ChatParams(model=model_name(body))
    p.messages = parse_messages(body.get("messages"))
    _parse_common_fields(p, body)
    field(body, "think", (bool, str))     # accepted, ignored
    if field(body, "tools", list):
        raise ApiError(400, f"{p.model} does not support tools", param="tools")
    return p


def parse_embed_input(body: dict, key: str = "input") -> list[str]:
    v = body.get(key)
    if v is None:
        raise ApiError(400, f"{key!r} is required: a string or a list of strings", param=key)
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return list(v)
    raise ApiError(400, f"{key!r} must be a string or a list of strings", param=key)


# ---- responses ----------------------------------------------------------------------------------------------

def logprobs_json(items: list[TokenLogprob] | None, top: int) -> list[dict]:
    out = []
    for t in items or ():
        d = {"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}
        if top > 0:
            d["top_logprobs"] = [{"token": tok, "logprob": lp, "bytes": list(b)} for tok, lp, b in t.top[:top]]
        out.append(d)
    return out


def done_reason(reason: str) -> str:
    return {"stop": "stop", "length": "length", "cancelled": "stop"}.get(reason, reason)


def timing_fields(done: DoneEvent | None, total_seconds: float, load_seconds: float) -> dict:
    d = {"total_duration": ns(total_seconds), "load_duration": ns(load_seconds)}
    if done is not None:
        d.update({
            "prompt_eval_count": done.prompt_tokens,
            "prompt_eval_duration": ns(done.prompt_seconds),
            "eval_count": done.completion_tokens,
            "eval_duration": ns(done.generation_seconds),
        })
    return d


def parameter_size(n_params: int) -> str:
    if n_params >= 1e9:
        return f"{n_params / 1e9:.1f}B"
    if n_params >= 1e6:
        return f"{n_params / 1e6:.0f}M"
    return str(n_params)


def details(info, record=None) -> dict:
    if info is None:
        return {"parent_model": "", "format": "gguf", "family": "", "families": None, "parameter_size": "",
                "quantization_level": ""}
    return {
        "parent_model": "",
        "format": "gguf",
        "family": info.architecture,
        "families": [info.architecture],
        "parameter_size": parameter_size(info.n_params),
        "quantization_level": info.quantization,
    }


def digest_of(record) -> str:
    d = getattr(record, "sha256", None) or ""
    return d.removeprefix("sha256:")


def iso_time(value) -> str:
    if isinstance(value, datetime):
        return now_iso(value if value.tzinfo else value.replace(tzinfo=timezone.utc))
    if isinstance(value, (int, float)):
        return now_iso(datetime.fromtimestamp(value, timezone.utc))
    if isinstance(value, str) and value:
        return value
    return now_iso()


def tag_entry(record, info) -> dict:
    return {
        "name": record.name,
        "model": record.name,
        "modified_at": iso_time(record.modified_at),
        "size": int(record.size or 0),
        "digest": digest_of(record),
        "details": details(info, record),
        "strata": {"source": record.source, "read_only": bool(record.read_only), "path": str(record.path)},
    }
