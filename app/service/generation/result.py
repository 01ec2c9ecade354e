"""The ONE internal result type of every API dialect: the typed events a generation streams, and what they add
up to. Renderers (dialects/<name>/render.py) match events by type (isinstance), never by name.

New kinds of output (thinking text, tool calls) are new event types here plus a field on GenerationResult;
each renderer then decides how its wire format shows them. See docs/architecture.md, "Adding an API dialect".
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.engine.protocol import TokenLogprob


@dataclass(frozen=True)
class TextDelta:
    """Text the model produced (stop strings resolved, UTF-8 complete)."""
    text: str
    logprobs: tuple[TokenLogprob, ...] = ()
    n_tokens: int = 1                    # tokens this text came from


@dataclass(frozen=True)
class ThinkingDelta:
    """Reasoning text, apart from the answer (a thinking model's <think> block, gpt-oss's analysis channel)."""
    text: str
    n_tokens: int = 0                    # tokens that carried it (the reply's thinking token count adds these)


@dataclass(frozen=True)
class ToolCallStart:
    """A tool call begins (a stream that gives calls in pieces): its id and complete name. Its arguments follow
    as ToolCallArguments, then the ToolCallEvent with the same index ends it; nothing else comes in between."""
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    """A piece of the open call's arguments as JSON text: the pieces of a call add up to its arguments as
    `json.dumps(..., ensure_ascii=False)` writes them (the whole string a client is given), never taken back."""
    index: int
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    """One complete tool call the model made; `index` counts the calls of this reply from 0. Where the call was
    streamed in pieces, `arguments` is what its pieces add up to."""
    index: int
    id: str
    name: str
    arguments: dict


@dataclass(frozen=True)
class Finished:
    """The last event of a generation."""
    reason: str                          # "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    prompt_seconds: float
    generation_seconds: float
    context_tokens: tuple[int, ...] | None = None
    cached_tokens: int = 0               # of prompt_tokens, how many came from the prompt cache
    stop_string: str | None = None       # the request's stop string that ended it
    draft_tokens: int = 0                # speculative decoding: tokens drafted and verified for this reply
    draft_accepted: int = 0              # ... of which accepted (part of completion_tokens)
    reused_tokens: int = 0               # of cached_tokens, how many cache reuse moved from other positions
    report: dict | None = None           # the cache-miss explainer and prompt anatomy (runner/cache/explain.py)


@dataclass(frozen=True)
class PromptProgress:
    """A long prompt is being read (llama-server's `prompt_progress`): of its `total` tokens, `processed` are
    done (the `cached` ones included), `seconds` after the request got its slot. Not output: renderers show it
    only to a client that asked (`return_progress`)."""
    total: int
    cached: int
    processed: int
    seconds: float

    def wire(self) -> dict:
        """llama-server's `prompt_progress` object."""
        return {"total": self.total, "cache": self.cached, "processed": self.processed,
                "time_ms": round(self.seconds * 1000)}


Event = TextDelta | ThinkingDelta | ToolCallStart | ToolCallArguments | ToolCallEvent | Finished | PromptProgress


@dataclass
class GenerationResult:
    """Everything a generation produced so far; complete once `finished` is set. Renderers of non-streamed
    answers read it whole; streaming renderers read it at the end (usage, timings)."""
    model: str                                       # the model's name in the store (resolved)
    pieces: list[str] = field(default_factory=list)
    thinking_pieces: list[str] = field(default_factory=list)
    thinking_tokens: int = 0
    tool_calls: list[ToolCallEvent] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finished: Finished | None = None
    load_wait: float = 0.0                           # seconds spent waiting for the model to load
    num_ctx: int = 0                                 # the context per sequence the prompt was fitted to
    dropped_messages: int = 0                        # oldest messages left out to fit it (Ollama's chat rule)
    truncated_tokens: int = 0                        # prompt tokens cut to fit it (a raw prompt's token rule)
    reply_room: int | None = None                    # max_tokens was above the room the prompt left: this much
    think_budget: int | None = None                  # the thinking budget the runner set (None: no cap)
    started: float = field(default_factory=time.monotonic)
    first_output: float | None = None                # time.monotonic() of the first event a client was given
    finished_at: float | None = None                 # ... and of Finished
    output_tokens: int = 0                           # tokens of the text and thinking streamed so far
    progress: PromptProgress | None = None           # the prompt's last progress while it was read

    def add(self, ev: Event) -> None:
        if isinstance(ev, PromptProgress):
            self.progress = ev                       # not output: the first output's time stays unset
            return
        now = time.monotonic()
        if isinstance(ev, Finished):
            self.finished_at = now
        elif self.first_output is None:
            self.first_output = now
        if isinstance(ev, (TextDelta, ThinkingDelta)):
            self.output_tokens += ev.n_tokens
        if isinstance(ev, TextDelta):
            self.pieces.append(ev.text)
            self.logprobs.extend(ev.logprobs)
        elif isinstance(ev, ThinkingDelta):
            self.thinking_pieces.append(ev.text)
            self.thinking_tokens += ev.n_tokens
        elif isinstance(ev, ToolCallEvent):
            self.tool_calls.append(ev)
        elif isinstance(ev, Finished):
            self.finished = ev

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def thinking(self) -> str:
        return "".join(self.thinking_pieces)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass
class EmbeddingResult:
    model: str
    vectors: list[list[float]]
    prompt_tokens: int = 0
    load_seconds: float = 0.0
    total_seconds: float = 0.0
