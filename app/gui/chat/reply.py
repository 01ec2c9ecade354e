"""A reply while it streams (plain data, no Qt): the pieces of text and logprobs that arrived from /api/chat's
NDJSON, the final object's totals, and the stats shown under the reply when it ends."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


def chat_stats(final: dict, ttft_ms: float | None, n_tokens: int, elapsed_s: float) -> dict:
    """Stats under a reply from the final NDJSON object (Ollama's eval_count/eval_duration in ns), falling back
    to the tokens the client received (one logprob entry each) when the server sent no totals (a stopped stream).
    """
    tokens = int(final.get("eval_count") or n_tokens)
    dur_ns = final.get("eval_duration")
    if dur_ns:
        tok_s = tokens / (dur_ns / 1e9)
    elif ttft_ms is not None and elapsed_s > ttft_ms / 1000:
        tok_s = max(0, tokens - 1) / (elapsed_s - ttft_ms / 1000)
    else:
        tok_s = 0.0
    out = {"tokens": tokens, "tok_s": round(tok_s, 1), "ttft_ms": None if ttft_ms is None else round(ttft_ms, 1)}
    for k in ("prompt_eval_count", "prompt_cached_count", "draft_count", "draft_accepted_count", "load_duration",
              "done_reason"):
        if k in final:
            out[k] = final[k]
    return out


@dataclass
class PendingReply:
    conversation_id: int           # the chat it belongs to (the user may switch chats while it streams)
    model: str
    widget: object                 # its MessageWidget in the transcript
    parent_id: int | None = None   # the message it answers (saved as its parent: a branch stays a branch)
    continues: int | None = None   # the id of a reply cut at its length limit that this one goes on with
    prefix: str = ""               # ...and that reply's text, which this one's text follows
    parts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)      # the model's thinking, shown in its own block
    tool_calls: list[dict] = field(default_factory=list)   # calls the model made (Ollama's shape)
    logprobs: list[dict] = field(default_factory=list)
    final: dict = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)
    ttft_ms: float | None = None
    keep_logprobs: bool = True     # shown as token alternatives; otherwise only counted
    n_tokens: int = 0              # generated tokens received so far (from the chunks' logprobs)

    def add(self, obj: dict) -> bool:
        """Take one NDJSON object; True when the text grew."""
        message = obj.get("message") or {}
        if message.get("thinking"):
            if self.ttft_ms is None:
                self.ttft_ms = (time.monotonic() - self.t0) * 1000
            self.thinking.append(message["thinking"])
        self.tool_calls.extend(message.get("tool_calls") or ())
        piece = message.get("content") or obj.get("response") or ""
        if piece:
            if self.ttft_ms is None:
                self.ttft_ms = (time.monotonic() - self.t0) * 1000
            self.parts.append(piece)
        if obj.get("logprobs"):
            self.n_tokens += len(obj["logprobs"])
            if self.keep_logprobs:
                self.logprobs.extend(obj["logprobs"])
        if obj.get("done"):
            self.final = obj
        return bool(piece)

    @property
    def text(self) -> str:
        return self.prefix + "".join(self.parts)

    def blocks(self) -> dict:
        """What is saved beside the text: thinking (with its token count, from the service when it said) and
        tool calls."""
        out: dict = {}
        if self.thinking:
            n = (self.final.get("strata") or {}).get("thinking_tokens") or len(self.thinking)
            out.update(thinking="".join(self.thinking), thinking_tokens=n)
        if self.tool_calls:
            out["tool_calls"] = list(self.tool_calls)
        return out

    def stats(self, stopped: bool) -> dict:
        stats = chat_stats(self.final, self.ttft_ms, self.n_tokens, time.monotonic() - self.t0)
        stats["model"] = self.model
        if stopped:
            stats["stopped"] = True
        return stats
