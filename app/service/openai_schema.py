"""OpenAI wire types (as the `openai` package's types define them): chat.completion, chat.completion.chunk,
text_completion, embeddings, models; request parsing with OpenAI-style 400s (`param` names the field)."""
from __future__ import annotations

import base64
import struct
import time
from dataclasses import dataclass, field as dc_field

from app.engine.protocol import DoneEvent, TokenLogprob

from .errors import ApiError
from .http_util import field, model_name

FINGERPRINT = "fp_strata"
ROLE_MAP = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool",
            "function": "tool"}


def _content_text(content, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict):
                raise ApiError(400, f"messages[{i}].content parts must be objects", param="messages")
            kind = part.get("type")
            if kind in ("text", "input_text"):
                if not isinstance(part.get("text"), str):
                    raise ApiError(400, f"messages[{i}].content text part needs 'text'", param="messages")
                parts.append(part["text"])
            elif kind in ("image_url", "input_image", "input_audio", "file"):
                raise ApiError(400, f"messages[{i}]: content of type {kind!r} is not supported by this model",
                               param="messages")
            else:
                raise ApiError(400, f"messages[{i}]: unknown content part type {kind!r}", param="messages")
        return "".join(parts)
    raise ApiError(400, f"messages[{i}].content must be a string or a list of parts", param="messages")


def parse_messages(raw) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise ApiError(400, f"messages[{i}] must be an object", param="messages")
        role = m.get("role")
        role = ROLE_MAP.get(role) if isinstance(role, str) else None     # a list/object role is not a dict key
        if role is None:
            raise ApiError(400, f"messages[{i}].role must be one of system, developer, user, assistant, tool; "
                                f"got {m.get('role')!r}", param="messages")
        out.append({"role": role, "content": _content_text(m.get("content"), i)})
    return out


def parse_response_format(rf) -> tuple[bool, dict | None]:
    if rf is None:
        return False, None
    if not isinstance(rf, dict) or "type" not in rf:
        raise ApiError(400, "'response_format' must be an object with a 'type'", param="response_format")
    t = rf["type"]
    if t == "text":
        return False, None
    if t == "json_object":
        return True, None
    if t == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
            raise ApiError(400, "'response_format.json_schema' must be an object with a 'schema' object",
                           param="response_format")
        return False, js.get("schema") or {"type": "object"}
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema, got {t!r}",
                   param="response_format")


def check_n(body: dict) -> None:
    n = field(body, "n", int, 1)
    if n != 1:
        raise ApiError(400, f"'n' must be 1 (one choice per request), got {n}", param="n")


@dataclass
class ChatParams:
    model: str
    messages: list[dict] = dc_field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    json_mode: bool = False
    json_schema: dict | None = None
    logprobs: bool = False
    top_logprobs: int = 0


def _stream_opts(body: dict) -> tuple[bool, bool]:
    stream = field(body, "stream", bool, False)
    so = field(body, "stream_options", dict) or {}
    include_usage = field(so, "include_usage", bool, False)
    return stream, include_usage


def parse_chat(body: dict) -> ChatParams:
    p = ChatParams(model=model_name(body))
    p.messages = parse_messages(body.get("messages"))
    p.stream, p.include_usage = _stream_opts(body)
    check_n(body)
    p.json_mode, p.json_schema = parse_response_format(body.get("response_format"))
    if field(body, "tools", list) or field(body, "functions", list):
        raise ApiError(400, f"{p.model} does not support tools", param="tools")
    p.logprobs = field(body, "logprobs", bool, False)
    p.top_logprobs = field(body, "top_logprobs", int, 0)
    if not 0 <= p.top_logprobs <= 20:
        raise ApiError(400, "'top_logprobs' must be between 0 and 20", param="top_logprobs")
    if p.top_logprobs and not p.logprobs:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return p


@dataclass
class CompletionParams:
    model: str
    prompt: str = ""
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    logprobs: int | None = None


def parse_completion(body: dict) -> CompletionParams:
    p = CompletionParams(model=model_name(body))
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        elif all(isinstance(x, str) for x in prompt):
            raise ApiError(400, "only one prompt per request is supported", param="prompt")
        else:
            raise ApiError(400, "token-id prompts are not supported; send text", param="prompt")
    if not isinstance(prompt, str):
        raise ApiError(400, "'prompt' must be a string", param="prompt")
    p.prompt = prompt
    p.stream, p.include_usage = _stream_opts(body)
    check_n(body)
    if field(body, "best_of", int, 1) != 1:
        raise ApiError(400, "'best_of' must be 1", param="best_of")
    if body.get("suffix"):
        raise ApiError(400, "'suffix' (insert) is not supported by this model", param="suffix")
    p.echo = field(body, "echo", bool, False)
    lp = field(body, "logprobs", int)
    if lp is not None and not 0 <= lp <= 20:
        raise ApiError(400, "'logprobs' must be between 0 and 20", param="logprobs")
    p.logprobs = lp
    return p


# ---- responses --------------------------------------------------------------------------------------------

def finish_reason(done: DoneEvent | None) -> str:
    if done is None:
        return "stop"
    return "length" if done.reason == "length" else "stop"


def usage(done: DoneEvent | None) -> dict:
    p = done.prompt_tokens if done else 0
    c = done.completion_tokens if done else 0
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def chat_logprobs(items: list[TokenLogprob] | None, top: int) -> dict:
    content = []
    for t in items or ():
        content.append({
            "token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
            "top_logprobs": [{"token": tok, "logprob": lp, "bytes": list(b)} for tok, lp, b in t.top[:top]],
        })
    return {"content": content, "refusal": None}


def completion_logprobs(items: list[TokenLogprob] | None, top: int, offset: int = 0) -> dict:
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for t in items or ():
        tokens.append(t.token)
        lps.append(t.logprob)
        tops.append({tok: lp for tok, lp, _ in t.top[:top]} if top else None)
        offsets.append(pos)
        pos += len(t.token)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def chat_completion(id: str, model: str, created: int, text: str, done, logprobs) -> dict:
    return {
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": logprobs, "finish_reason": finish_reason(done)}],
        "usage": usage(done),
    }


def chat_chunk(id: str, model: str, created: int, delta: dict, finish: str | None = None, logprobs=None,
               include_usage: bool = False) -> dict:
    d = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
         "system_fingerprint": FINGERPRINT,
         "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}
    if include_usage:
        d["usage"] = None
    return d


def text_completion(id: str, model: str, created: int, text: str, done, logprobs, *, chunk=False,
                    finish: str | None = None) -> dict:
    d = {"id": id, "object": "text_completion", "created": created, "model": model,
         "system_fingerprint": FINGERPRINT,
         "choices": [{"index": 0, "text": text, "logprobs": logprobs,
                      "finish_reason": finish if chunk else finish_reason(done)}]}
    if not chunk:
        d["usage"] = usage(done)
    return d


def usage_chunk(id: str, model: str, created: int, obj: str, done) -> dict:
    return {"id": id, "object": obj, "created": created, "model": model, "system_fingerprint": FINGERPRINT,
            "choices": [], "usage": usage(done)}


def embedding_item(vec: list[float], index: int, encoding: str) -> dict:
    if encoding == "base64":
        emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
    else:
        emb = vec
    return {"object": "embedding", "embedding": emb, "index": index}


def model_entry(record) -> dict:
    created = record.modified_at
    if hasattr(created, "timestamp"):
        created = int(created.timestamp())
    elif not isinstance(created, (int, float)):
        created = int(time.time())
    return {"id": record.name, "object": "model", "created": int(created), "owned_by": record.source or "strata"}
