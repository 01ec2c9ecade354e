"""The internal result -> Ollama's wire format: NDJSON chunks while streaming, one object otherwise.
Durations are nanoseconds."""
from __future__ import annotations

from typing import Any

from app.engine.protocol import TokenLogprob

from ...generation.request import EmbeddingRequest, GenerationRequest
from ...generation.result import (EmbeddingResult, Finished, GenerationResult, PromptProgress, TextDelta,
                                 ThinkingDelta, ToolCallEvent)
from ...http.errors import ApiError, plain_body
from ..base import Renderer
from .schema import now_iso


def ns(seconds: float) -> int:
    return max(0, int(round(seconds * 1e9)))


def logprobs_json(items: list[TokenLogprob] | tuple[TokenLogprob, ...] | None, top: int) -> list[dict]:
    out = []
    for t in items or ():
        d = {"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}
        if top > 0:
            d["top_logprobs"] = [{"token": tok, "logprob": lp, "bytes": list(b)} for tok, lp, b in t.top[:top]]
        out.append(d)
    return out


def done_reason(reason: str) -> str:
    return {"stop": "stop", "length": "length", "cancelled": "stop"}.get(reason, reason)


def timing_fields(done: Finished | None, total_seconds: float, load_seconds: float) -> dict:
    d = {"total_duration": ns(total_seconds), "load_duration": ns(load_seconds)}
    if done is not None:
        d.update({
            "prompt_eval_count": done.prompt_tokens,
            "prompt_cached_count": done.cached_tokens,     # Strata: of prompt_eval_count, from the prompt cache
            "prompt_reused_count": done.reused_tokens,     # Strata: of prompt_cached_count, moved by cache reuse
            "prompt_eval_duration": ns(done.prompt_seconds),
            "eval_count": done.completion_tokens,
            "eval_duration": ns(done.generation_seconds),
        })
        d["draft_count"] = done.draft_tokens                  # Strata: speculative drafts verified ...
        d["draft_accepted_count"] = done.draft_accepted       # ... and accepted (of eval_count)
    return d


def tool_call_json(ev: ToolCallEvent) -> dict:
    """Ollama's shape (its `ollama` package: ToolCall.Function with name, arguments object, index)."""
    return {"id": ev.id, "function": {"index": ev.index, "name": ev.name, "arguments": ev.arguments}}


def error_body(err: ApiError) -> dict:
    """An error as Ollama answers it: `{"error": "..."}` (the HTTP body, and a stream's last line)."""
    return plain_body(err)


class OllamaRenderer(Renderer):
    """/api/generate (`response`) and /api/chat (`message`)."""

    def __init__(self, model: str, req: GenerationRequest, *, chat: bool):
        self.model, self.req, self.chat = model, req, chat

    def _chunk(self, text: str, lps, thinking: str = "", calls=()) -> dict:
        d: dict[str, Any] = {"model": self.model, "created_at": now_iso()}
        if self.chat:
            d["message"] = {"role": "assistant", "content": text}
            if thinking:
                d["message"]["thinking"] = thinking
            if calls:
                d["message"]["tool_calls"] = [tool_call_json(c) for c in calls]
        else:
            d["response"] = text
            if thinking:
                d["thinking"] = thinking
        d["done"] = False
        if self.req.logprobs and lps:
            d["logprobs"] = logprobs_json(lps, self.req.top_logprobs)
        return d

    def _final(self, result: GenerationResult, text: str, lps) -> dict:
        done = result.finished
        final = self._chunk(text, lps)
        final["done"] = True
        final["done_reason"] = done_reason(done.reason) if done else "stop"
        final.update(timing_fields(done, result.elapsed, result.load_wait))
        if done is not None and done.context_tokens and self.req.want_context:
            final["context"] = list(done.context_tokens)
        if result.thinking_tokens:             # Strata's addition: how many of eval_count were thinking
            final["strata"] = {"thinking_tokens": result.thinking_tokens}
        return final

    def delta(self, ev: TextDelta):
        return [self._chunk(ev.text, ev.logprobs)]

    def thinking(self, ev: ThinkingDelta):
        return [self._chunk("", None, thinking=ev.text)]

    def tool_call(self, ev: ToolCallEvent):
        """Each complete call in its own done:false chunk, as Ollama streams them."""
        return [self._chunk("", None, calls=[ev])]

    def progress(self, ev: PromptProgress):
        """A done:false chunk with no text and llama-server's `prompt_progress` (Strata's addition)."""
        d = self._chunk("", None)
        d["prompt_progress"] = ev.wire()
        return [d]

    def closing(self, result: GenerationResult):
        return [self._final(result, "", None)]

    def error(self, err: ApiError):
        return [error_body(err)]

    def complete(self, result: GenerationResult) -> dict:
        final = self._final(result, result.text, result.logprobs)
        if result.thinking:
            (final["message"] if self.chat else final)["thinking"] = result.thinking
        if result.tool_calls and self.chat:
            final["message"]["tool_calls"] = [tool_call_json(c) for c in result.tool_calls]
        if self.req.logprobs:
            final["logprobs"] = logprobs_json(result.logprobs, self.req.top_logprobs)
        return final


def load_answer(model: str, *, chat: bool, reason: str) -> dict:
    """The answer to an empty /api/generate or /api/chat: the model was loaded (or unloaded)."""
    d: dict[str, Any] = {"model": model, "created_at": now_iso()}
    if chat:
        d["message"] = {"role": "assistant", "content": ""}
    else:
        d["response"] = ""
    d.update({"done": True, "done_reason": reason})
    return d


def embed_answer(req: EmbeddingRequest, res: EmbeddingResult) -> dict:
    """/api/embed."""
    return {
        "model": req.model,
        "embeddings": res.vectors,
        "total_duration": ns(res.total_seconds) if req.inputs else 0,
        "load_duration": ns(res.load_seconds),
        "prompt_eval_count": res.prompt_tokens,
    }


def embeddings_answer(res: EmbeddingResult) -> dict:
    """The legacy /api/embeddings: one vector."""
    return {"embedding": res.vectors[0] if res.vectors else []}
