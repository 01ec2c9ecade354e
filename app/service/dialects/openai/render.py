"""The internal result -> OpenAI's wire format (as the `openai` package's types define it): chat.completion,
chat.completion.chunk, text_completion, embeddings, models. Streams are SSE ending with `data: [DONE]`."""
from __future__ import annotations

import base64
import json
import struct
import time
from typing import Any

from ...generation.result import (EmbeddingResult, Finished, GenerationResult, PromptProgress, TextDelta,
                                 ThinkingDelta, ToolCallArguments, ToolCallEvent, ToolCallStart)
from ...http.bodies import SSEComment, SSEWriter
from ...http.errors import ApiError
from ..base import Renderer
from .parse import WireChoices

FINGERPRINT = "fp_strata"


def finish_reason(done: Finished | None, tool_calls=()) -> str:
    """`length` whenever max_tokens ended the reply, calls or not (a call cut short may lack arguments, as
    OpenAI reports it); else `tool_calls` when the reply made calls."""
    if done is not None and done.reason == "length":
        return "length"
    return "tool_calls" if tool_calls else "stop"


def tool_call_json(ev: ToolCallEvent) -> dict:
    """OpenAI's shape: arguments as a JSON string."""
    return {"id": ev.id, "type": "function",
            "function": {"name": ev.name, "arguments": json.dumps(ev.arguments, ensure_ascii=False)}}


def usage(done: Finished | None, reasoning: int = 0) -> dict:
    """`reasoning`: the completion tokens that were thinking (OpenAI's completion_tokens_details.reasoning_tokens,
    sent when there were any)."""
    p = done.prompt_tokens if done else 0
    c = done.completion_tokens if done else 0
    cached = done.cached_tokens if done else 0          # prompt tokens found in the prompt cache (like OpenAI)
    u = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
         "prompt_tokens_details": {"cached_tokens": cached}}
    if reasoning:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return u


def timings(done: Finished | None) -> dict | None:
    """llama-server's `timings` object (its clients and benchmarks read it): prompt tokens processed (the cached
    ones apart, as `cache_n`), generated tokens, their milliseconds, and the speculative draft counts when a
    draft was made (`draft_n`, `draft_n_accepted`), as llama-server adds them."""
    if done is None:
        return None
    prompt_n = max(0, done.prompt_tokens - done.cached_tokens)
    prompt_ms, gen_ms = done.prompt_seconds * 1e3, done.generation_seconds * 1e3
    t = {"cache_n": done.cached_tokens,
         "prompt_n": prompt_n, "prompt_ms": prompt_ms,
         "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
         "prompt_per_second": prompt_n / done.prompt_seconds if done.prompt_seconds > 0 else 0.0,
         "predicted_n": done.completion_tokens, "predicted_ms": gen_ms,
         "predicted_per_token_ms": gen_ms / done.completion_tokens if done.completion_tokens else 0.0,
         "predicted_per_second": done.completion_tokens / done.generation_seconds if done.generation_seconds > 0
         else 0.0}
    if done.draft_tokens > 0:
        t["draft_n"], t["draft_n_accepted"] = done.draft_tokens, done.draft_accepted
    return t


def chat_logprobs(items, top: int) -> dict:
    content = []
    for t in items or ():
        content.append({
            "token": t.token, "logprob": t.logprob, "bytes": list(t.bytes),
            "top_logprobs": [{"token": tok, "logprob": lp, "bytes": list(b)} for tok, lp, b in t.top[:top]],
        })
    return {"content": content, "refusal": None}


def completion_logprobs(items, top: int, offset: int = 0) -> dict:
    tokens, lps, tops, offsets = [], [], [], []
    pos = offset
    for t in items or ():
        tokens.append(t.token)
        lps.append(t.logprob)
        tops.append({tok: lp for tok, lp, _ in t.top[:top]} if top else None)
        offsets.append(pos)
        pos += len(t.token)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def error_body(err: ApiError) -> dict:
    """An error as OpenAI's API answers it: the HTTP body (a prompt too long in OpenAI's words)."""
    return {"error": {"message": err.openai_message(), "type": err.type, "param": err.param, "code": err.code}}


def error_json(err: ApiError) -> dict:
    """A failure after a stream began: OpenAI's error object as one `data:` event."""
    return {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}


class _OpenAIRenderer(Renderer):
    writer = SSEWriter
    object_name = ""

    def __init__(self, model: str, wire: WireChoices, *, logprobs: bool, top: int, id: str):
        self.model, self.wire, self.id = model, wire, id
        self.logprobs, self.top = logprobs, top
        self.created = int(time.time())

    def error(self, err: ApiError):
        return [error_json(err), "[DONE]"]

    def keepalive(self):
        """While a long prompt is read: an SSE comment, which the openai client and the AI SDK (OpenCode) skip, so
        a client that drops a silent stream (OpenCode's chunk timeout, Bun's 5-minute idle limit) stays on."""
        return [SSEComment("keepalive")]

    def _usage_chunk(self, done: Finished | None, reasoning: int = 0) -> dict:
        return {"id": self.id, "object": self.object_name, "created": self.created, "model": self.model,
                "system_fingerprint": FINGERPRINT, "choices": [], "usage": usage(done, reasoning)}


class ChatRenderer(_OpenAIRenderer):
    object_name = "chat.completion.chunk"
    call_pieces = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started_calls: set[int] = set()

    def _chunk(self, delta: dict, finish: str | None = None, logprobs=None) -> dict:
        d = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
             "system_fingerprint": FINGERPRINT,
             "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}
        if self.wire.include_usage:
            d["usage"] = None
        return d

    def progress(self, ev: PromptProgress):
        """llama-server's progress chunk: an empty assistant delta with `prompt_progress` beside the choices."""
        d = self._chunk({"role": "assistant", "content": None})
        d["prompt_progress"] = ev.wire()
        return [d]

    def opening(self):
        return [self._chunk({"role": "assistant", "content": ""})]

    def delta(self, ev: TextDelta):
        lp = chat_logprobs(ev.logprobs, self.top) if self.logprobs and ev.logprobs else None
        return [self._chunk({"content": ev.text}, logprobs=lp)]

    def thinking(self, ev: ThinkingDelta):
        return [self._chunk({"reasoning_content": ev.text})]         # llama-server's name for it

    def tool_call_start(self, ev: ToolCallStart):
        """As OpenAI streams a call: index, id and name first (arguments ""), then the arguments in pieces,
        which clients concatenate by index; the call's end is the next call's start or the finishing chunk."""
        self.started_calls.add(ev.index)
        head = {"index": ev.index, "id": ev.id, "type": "function", "function": {"name": ev.name, "arguments": ""}}
        return [self._chunk({"tool_calls": [head]})]

    def tool_call_arguments(self, ev: ToolCallArguments):
        return [self._chunk({"tool_calls": [{"index": ev.index, "function": {"arguments": ev.text}}]})]

    def tool_call(self, ev: ToolCallEvent):
        """The call's end: nothing more to send, unless it was not begun in pieces (then it goes whole)."""
        if ev.index in self.started_calls:
            return []
        return [*self.tool_call_start(ToolCallStart(ev.index, ev.id, ev.name)),
                *self.tool_call_arguments(ToolCallArguments(ev.index, json.dumps(ev.arguments, ensure_ascii=False)))]

    def closing(self, result: GenerationResult):
        out = [self._chunk({}, finish=finish_reason(result.finished, result.tool_calls))]
        out[0]["timings"] = timings(result.finished)          # on the last chunk, as llama-server sends it
        if self.trailer:                                      # the fit's facts the headers could not carry
            out[0]["strata"] = dict(self.trailer)
        if self.wire.include_usage:
            out.append(self._usage_chunk(result.finished, result.thinking_tokens))
        return out + ["[DONE]"]

    @staticmethod
    def _message(result: GenerationResult) -> dict:
        msg: dict[str, Any] = {"role": "assistant",
                               "content": result.text if result.text or not result.tool_calls else None,
               "refusal": None}
        if result.thinking:
            msg["reasoning_content"] = result.thinking
        if result.tool_calls:
            msg["tool_calls"] = [tool_call_json(c) for c in result.tool_calls]
        return msg

    def complete(self, result: GenerationResult) -> dict:
        lp = chat_logprobs(result.logprobs, self.top) if self.logprobs else None
        return {
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "message": self._message(result), "logprobs": lp,
                         "finish_reason": finish_reason(result.finished, result.tool_calls)}],
            "usage": usage(result.finished, result.thinking_tokens),
            "timings": timings(result.finished),
        }


class CompletionRenderer(_OpenAIRenderer):
    object_name = "text_completion"

    def __init__(self, model: str, wire: WireChoices, *, prompt: str, id: str):
        super().__init__(model, wire, logprobs=wire.logprobs is not None, top=wire.logprobs or 0, id=id)
        self.prefix = prompt if wire.echo else ""
        self.offset = len(self.prefix)          # text_offset of the next token

    def _text(self, text: str, logprobs=None, finish: str | None = None, done: Finished | None = None,
              chunk: bool = True) -> dict:
        d = {"id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
             "system_fingerprint": FINGERPRINT,
             "choices": [{"index": 0, "text": text, "logprobs": logprobs,
                          "finish_reason": finish if chunk else finish_reason(done)}]}
        if not chunk:
            d["usage"] = usage(done)
            d["timings"] = timings(done)
        return d

    def opening(self):
        return [self._text(self.prefix)] if self.prefix else []

    def delta(self, ev: TextDelta):
        lp = completion_logprobs(ev.logprobs, self.top, self.offset) if self.logprobs and ev.logprobs else None
        self.offset += len(ev.text)
        return [self._text(ev.text, lp)]

    def closing(self, result: GenerationResult):
        out = [self._text("", finish=finish_reason(result.finished))]
        out[0]["timings"] = timings(result.finished)
        if self.trailer:                                      # the fit's facts the headers could not carry
            out[0]["strata"] = dict(self.trailer)
        if self.wire.include_usage:
            out.append(self._usage_chunk(result.finished))
        return out + ["[DONE]"]

    def complete(self, result: GenerationResult) -> dict:
        lp = completion_logprobs(result.logprobs, self.top, len(self.prefix)) if self.logprobs else None
        return self._text(self.prefix + result.text, lp, done=result.finished, chunk=False)


def embedding_item(vec: list[float], index: int, encoding: str) -> dict:
    emb: str | list[float]
    if encoding == "base64":
        emb = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
    else:
        emb = vec
    return {"object": "embedding", "embedding": emb, "index": index}


def embeddings_answer(model: str, res: EmbeddingResult, encoding: str) -> dict:
    return {
        "object": "list",
        "data": [embedding_item(v, i, encoding) for i, v in enumerate(res.vectors)],
        "model": model,
        "usage": {"prompt_tokens": res.prompt_tokens, "total_tokens": res.prompt_tokens},
    }


def model_entry(record) -> dict:
    created = record.modified_at
    if hasattr(created, "timestamp"):
        created = int(created.timestamp())
    elif not isinstance(created, (int, float)):
        created = int(time.time())
    return {"id": record.name, "object": "model", "created": int(created), "owned_by": record.source or "strata"}
