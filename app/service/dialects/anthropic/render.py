"""The internal result -> Anthropic's Messages wire format: a `message` object, or the event stream
message_start, content_block_start / _delta / _stop per block (thinking, text, tool_use), message_delta,
message_stop. Errors are {"type": "error", "error": {"type", "message"}}."""
from __future__ import annotations

import json
import uuid
from typing import Any

from ...generation.result import (Finished, GenerationResult, PromptProgress, TextDelta, ThinkingDelta,
                                 ToolCallArguments, ToolCallEvent, ToolCallStart)
from ...http.bodies import SSEEvent, SSEWriter
from ...http.errors import ApiError
from ..base import Renderer
from .parse import WireChoices

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def error_body(err: ApiError) -> dict:
    """An error as Anthropic's API answers it (the HTTP body, and a stream's `error` event)."""
    kind = ERROR_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": err.anthropic_message()}}

def new_message_id() -> str:
    return "msg_" + uuid.uuid4().hex[:24]


def tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def stop_reason(result: GenerationResult) -> tuple[str, str | None]:
    done = result.finished
    if done is not None and done.reason == "length":       # first: a tool_use cut short may lack its input
        return "max_tokens", None
    if result.tool_calls:
        return "tool_use", None
    if done is not None and done.stop_string:
        return "stop_sequence", done.stop_string
    return "end_turn", None


def usage(done: Finished | None) -> dict:
    """Anthropic's split of the prompt: `cache_read_input_tokens` were found in the prompt cache (a shared prefix:
    the earlier turns of a conversation), `input_tokens` are the rest, processed now; their sum is the whole
    prompt, as with Anthropic's prompt caching and llama-server. The cache fills itself, so nothing is counted
    as written to it apart (`cache_creation_input_tokens` 0)."""
    prompt = done.prompt_tokens if done else 0
    cached = min(prompt, done.cached_tokens) if done else 0
    return {"input_tokens": prompt - cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached,
            "output_tokens": done.completion_tokens if done else 0}


class MessagesRenderer(Renderer):
    writer = SSEWriter
    call_pieces = True

    def __init__(self, model: str, wire: WireChoices, *, show_thinking: bool = True):
        self.model, self.wire, self.id = model, wire, new_message_id()
        self.show_thinking = show_thinking
        self.index = -1              # the open content block's index
        self.open_kind: str | None = None        # "thinking" | "text" | "tool_use" | None
        self.open_call: int | None = None        # the index of the call whose tool_use block is open

    # ---- streamed -------------------------------------------------------------------------------------------
    def _ev(self, name: str, data: dict) -> SSEEvent:
        return SSEEvent(name, {"type": name, **data})

    def opening(self):
        msg = {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
               "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        return [self._ev("message_start", {"message": msg}), self._ev("ping", {})]

    def _switch(self, kind: str | None, block: dict | None = None) -> list:
        out = []
        if self.open_kind is not None and (kind != self.open_kind or block is not None):
            out.append(self._ev("content_block_stop", {"index": self.index}))
            self.open_kind = None
        if kind is not None and self.open_kind is None:
            self.index += 1
            self.open_kind = kind
            out.append(self._ev("content_block_start", {"index": self.index, "content_block": block}))
        return out

    def delta(self, ev: TextDelta):
        if not ev.text:
            return []
        out = [] if self.open_kind == "text" else self._switch("text", {"type": "text", "text": ""})
        out.append(self._ev("content_block_delta", {"index": self.index,
                                                    "delta": {"type": "text_delta", "text": ev.text}}))
        return out

    def thinking(self, ev: ThinkingDelta):
        if not ev.text or not self.show_thinking:
            return []
        out = [] if self.open_kind == "thinking" else self._switch(
            "thinking", {"type": "thinking", "thinking": "", "signature": ""})
        out.append(self._ev("content_block_delta", {"index": self.index,
                                                    "delta": {"type": "thinking_delta", "thinking": ev.text}}))
        return out

    def tool_call_start(self, ev: ToolCallStart):
        """A tool_use block opens with its id, name and `input: {}`; its input comes as `input_json_delta`
        pieces (`partial_json`, which the SDK concatenates and parses), and the block stops with the call."""
        self.open_call = ev.index
        return self._switch("tool_use", {"type": "tool_use", "id": tool_use_id(ev.id), "name": ev.name, "input": {}})

    def tool_call_arguments(self, ev: ToolCallArguments):
        return [self._ev("content_block_delta", {"index": self.index, "delta": {
            "type": "input_json_delta", "partial_json": ev.text}})]

    def tool_call(self, ev: ToolCallEvent):
        """The call's block stops (a call not begun in pieces is given whole first)."""
        out = []
        if self.open_call != ev.index:
            out += self.tool_call_start(ToolCallStart(ev.index, ev.id, ev.name))
            out += self.tool_call_arguments(ToolCallArguments(ev.index, json.dumps(ev.arguments, ensure_ascii=False)))
        self.open_call = None
        return out + self._switch(None)

    def closing(self, result: GenerationResult):
        out = self._switch(None)
        reason, seq = stop_reason(result)
        # the whole usage, as Anthropic's message_delta carries it (message_start went out before the prompt was
        # counted); the SDK's stream takes input and cache counts from here when present
        delta = {"delta": {"stop_reason": reason, "stop_sequence": seq}, "usage": usage(result.finished)}
        if self.trailer:                        # the fit's facts the headers could not carry
            delta["strata"] = dict(self.trailer)
        out.append(self._ev("message_delta", delta))
        out.append(self._ev("message_stop", {}))
        return out

    def error(self, err: ApiError):
        return [SSEEvent("error", error_body(err))]

    def keepalive(self):
        return [self._ev("ping", {})]

    def progress(self, ev: PromptProgress):
        """A `ping` (which every client skips) carrying llama-server's `prompt_progress`."""
        return [self._ev("ping", {"prompt_progress": ev.wire()})]

    # ---- whole ----------------------------------------------------------------------------------------------
    def complete(self, result: GenerationResult) -> dict:
        content: list[dict[str, Any]] = []
        if result.thinking and self.show_thinking:
            content.append({"type": "thinking", "thinking": result.thinking, "signature": ""})
        if result.text or not result.tool_calls:
            content.append({"type": "text", "text": result.text})
        for c in result.tool_calls:
            content.append({"type": "tool_use", "id": tool_use_id(c.id), "name": c.name, "input": c.arguments})
        reason, seq = stop_reason(result)
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": reason, "stop_sequence": seq, "usage": usage(result.finished)}
