"""Typed messages between the service (parent) and a runner process (child). Contract.

Plain dataclasses sent over a multiprocessing Connection. Parent -> runner: GenerateRequest, EmbedRequest,
Cancel, Shutdown, StatsRequest, TokenizeRequest. Runner -> parent: LoadProgress, Loaded, LoadFailed, Admitted, PromptProgress, TokenEvent, DoneEvent, ErrorEvent,
EmbedResult, Stats, TokenizeResult, Heartbeat, PromptCacheState.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from app.engine.chat.plan import ChatPlan

IMAGE_MAX_PIXELS = 32 * 1024 * 1024     # an image's width x height: the service refuses more, the runner checks again


@dataclass
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    typical_p: float = 1.0
    repeat_penalty: float = 1.0        # off, as Ollama's and llama.cpp's defaults: a model that wants one sets
                                       # it (a Modelfile PARAMETER, the GGUF's general.sampling.penalty_repeat)
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None            # None = random
    mirostat: int = 0                  # 0 off, 1, 2
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass
class GenerateRequest:
    id: str
    prompt: str | None = None               # completion prompt (raw text when raw=True)
    messages: list[dict] | None = None      # chat: [{"role","content"}], rendered with the GGUF chat template;
                                            # a message may carry "images": [encoded image bytes] (runner/prompt/media.py)
    images: list[bytes] | None = None       # images of a generate-style prompt (before its text)
    system: str | None = None               # system prompt for generate-style requests
    raw: bool = False                       # bypass the chat template
    sampling: SamplingParams = field(default_factory=SamplingParams)
    num_predict: int = -1                   # -1 = until stop/context
    stop: list[str] = field(default_factory=list)
    json_schema: dict | None = None         # structured output through a grammar
    json_mode: bool = False                 # format: "json"
    logprobs: bool = False
    top_logprobs: int = 0                   # 0..20
    ignore_eos: bool = False
    # tools and thinking (docs/architecture.md, "Tool calls")
    tools: list[dict] | None = None         # OpenAI function shape: the grammar's calls, and the template's tools
    render_tools: bool = True               # False: the template cannot show tools (the service described them)
    plan: ChatPlan | None = None            # the service's decisions (chat/plan.py): family, tool-call grammar;
                                            # None: the loaded model's family, no tool-call grammar
    template_kwargs: dict = field(default_factory=dict)   # enable_thinking, reasoning_effort
    think_budget: int | None = None         # at most this many tokens of thinking (Anthropic budget_tokens, the
                                            # think_budget option / PARAMETER); None: none, unless think_effort
    think_effort: str | None = None         # minimal / low / medium / high: a budget from the reply's room
                                            # (runner/sampling/think_budget.effort_budget), when think_budget is None
    bar_calls: bool = False                 # the reply opens with text: neither its end nor a tool call (the second
                                            # try of a reply that only repeated the last round's calls:
                                            # service/generation/repeat_guard.py, runner/sampling/answer_hold.py)
    suffix: str | None = None               # fill-in-the-middle: prompt is the prefix
    context: list[int] | None = None        # token ids to put before the prompt (Ollama /api/generate `context`)
    want_context: bool = True               # the DoneEvent carries context_tokens (prompt + reply): Ollama's generate
                                            # returns them; other dialects do not, and a 30k-token list costs the
                                            # reply's end ~2 ms to pickle, send and read
    cache_prompt: bool = True               # False: decode the whole prompt, reuse no cached cells (llama-server's)
    speculate: bool = True                  # False: no speculative drafts for this request (same tokens either way)
    # a prompt longer than the context (runner/prompt/context_fit.py): "error" | "drop_messages" | "truncate" (the engine's
    # token rule, logged; the service always says which, from its request's dialect: GenerationRequest.overflow)
    overflow: str = "truncate"
    reserve: int = 0                        # tokens the prompt must leave free for the reply (the service asks for
                                            # none when it refuses: max_tokens caps a reply, it claims no context)
    shift: bool = True                      # a reply that fills the context: shift it (Ollama's rule) or, False,
                                            # end it with "length" (llama-server's default, OpenAI's, Anthropic's)
    announce: bool = False                  # send Admitted once the prompt is fitted (before any token)
    priority: int = 0                       # 1: a person watches the reply (a streamed request): its prompt is read
                                            # first and its pace bounds others' prompt chunks (runner/step/step_budget.py)


def has_images(req) -> bool:
    """The request (this GenerateRequest, or the service's GenerationRequest: same two fields) carries images:
    a generate prompt's, or any message's."""
    if req.images:
        return True
    return bool(req.messages) and any(isinstance(m, dict) and m.get("images") for m in req.messages)


@dataclass
class Admitted:
    """A generation's prompt is fitted and queued (sent when the request asked to `announce` it)."""
    id: str
    prompt_tokens: int
    n_ctx: int                              # the context per sequence it was fitted to
    dropped_messages: int = 0               # oldest messages left out (overflow "drop_messages")
    truncated_tokens: int = 0               # prompt tokens cut (overflow "truncate")
    think_budget: int | None = None         # the thinking budget admission set (None: thinking is not capped)


@dataclass
class EmbedRequest:
    id: str
    inputs: list[str]
    truncate: bool = True
    normalize: bool = True                  # L2-normalise (Ollama /api/embed, OpenAI); False for /api/embeddings
    query: str | None = None                # rerank: `inputs` are documents scored against it (a reranker's
                                            # head outputs per pair; the score is the first)


@dataclass
class Cancel:
    id: str


@dataclass
class Shutdown:
    pass


@dataclass
class StatsRequest:
    id: str


@dataclass
class TokenizeRequest:
    id: str
    text: str
    add_special: bool = True
    chat: GenerateRequest | None = None     # count a chat's prompt instead: its messages/tools through the template


@dataclass
class TokenizeResult:
    id: str
    tokens: list[int]
    text: str | None = None                 # a chat's rendered prompt (when TokenizeRequest.chat was given)


@dataclass
class LoadProgress:
    progress: float                         # 0..1


@dataclass
class Loaded:
    actual: dict[str, dict[str, int]]       # device_id -> {"model","kv","compute","output","repack"} bytes, from the real load
    n_ctx: int
    n_ctx_per_seq: int
    n_vocab: int
    load_seconds: float
    op_offload_min_batch: int = 0           # GGML_OP_OFFLOAD_MIN_BATCH as llama.cpp read it at load (0: unset)
    vision_missing: str = ""                # why the layout's projector was not loaded (no libmtmd in the build)
    huge_pages: int = 0                     # bytes of the runner's memory in transparent huge pages after the load


@dataclass
class LoadFailed:
    message: str


class TopLogprob(NamedTuple):
    """One of the most likely tokens at a position."""
    token: str
    logprob: float
    bytes: list[int]


@dataclass
class TokenLogprob:
    token: str
    logprob: float
    bytes: list[int]
    top: list[TopLogprob] = field(default_factory=list)      # the most likely tokens, most likely first


@dataclass
class TokenEvent:
    id: str
    text: str                               # text safe to show (stop strings resolved, UTF-8 complete)
    n_tokens: int = 1
    logprobs: list[TokenLogprob] | None = None


@dataclass
class DoneEvent:
    id: str
    reason: str                             # "stop" | "length" | "cancelled" | "error"
    prompt_tokens: int
    completion_tokens: int
    prompt_seconds: float
    generation_seconds: float
    context_tokens: list[int] | None = None
    stop_string: str | None = None          # the stop string that ended it (reason "stop")
    cached_tokens: int = 0                  # of prompt_tokens, how many were found in the prompt cache
    reused_tokens: int = 0                  # of cached_tokens, how many cache reuse moved from other positions
    draft_tokens: int = 0                   # speculative decoding: tokens drafted for this reply (verified)
    draft_accepted: int = 0                 # ... of which accepted (part of completion_tokens)
    report: dict | None = None              # the cache-miss explainer and prompt anatomy (runner/cache/explain.py)


@dataclass
class PromptProgress:
    """A long prompt is being read: after each prefill chunk but the last (llama-server's `prompt_progress`)."""
    id: str
    total: int                              # the prompt's tokens
    cached: int                             # ... found in the cache
    processed: int                          # ... in KV cells now (the cached ones included)
    seconds: float                          # since the request got its slot


@dataclass
class ErrorEvent:
    id: str
    message: str
    kind: str = "error"                     # "invalid": the request was bad (HTTP 400); "error": it failed;
                                            # "context": the prompt does not fit (data: prompt_tokens, reserve, limit)
    data: dict | None = None


@dataclass
class EmbedResult:
    id: str
    embeddings: list[list[float]]
    prompt_tokens: int
    error: str | None = None


@dataclass
class Stats:
    slots_total: int
    slots_busy: int
    queued: int
    decode_fraction: float                  # share of wall time inside llama_decode (recent window)
    id: str = ""                            # echoes StatsRequest.id
    steps: int = 0                          # decode steps since load
    prompt_cache_bytes: int = 0             # host RAM held by the prompt cache
    prompt_cache_limit: int = 0             # its bound (0 = off)
    prompt_cache_entries: int = 0
    cache_hit_tokens: int = 0               # prompt tokens taken from the cache instead of decoded, since load
    cache_reused_tokens: int = 0            # ... of them, moved to other positions by cache reuse (approximate)
    checkpoint_bytes: int = 0               # host RAM held by the slots' context checkpoints
    checkpoints: int = 0                    # how many the slots hold
    checkpoint_hits: int = 0                # prompts continued from a checkpoint, since load
    checkpoint_misses: int = 0              # prompts that shared a cached prefix no memory could continue from
    disk_cache_bytes: int = 0               # the prompt cache on disk (runner/cache/disk_cache.py): its files' bytes,
    disk_cache_limit: int = 0               # ... its bound (0 = off),
    disk_cache_entries: int = 0             # ... its files,
    disk_cache_hits: int = 0                # ... prompts continued from it since load,
    disk_cache_hit_tokens: int = 0          # ... and the tokens they took from it
    draft_tokens: int = 0                   # speculative decoding: tokens drafted since load
    draft_accepted: int = 0                 # ... and of those, accepted (emitted without a step of their own)
    # seconds per phase of the context thread's batch steps since load, with "steps" and "rows"
    # (runner/step/step_clock.HostPhases; bench/bench_host_step.py)
    host_phases: dict = field(default_factory=dict)


@dataclass
class PromptCacheState:
    """Sent by the runner when its host-RAM prompt cache or its context checkpoints change (the service shows
    and budgets them)."""
    bytes: int
    entries: int
    limit: int
    checkpoint_bytes: int = 0
    checkpoints: int = 0
    checkpoint_hits: int = 0
    checkpoint_misses: int = 0


@dataclass
class DiskCacheState:
    """Sent by the runner when its prompt cache on disk changes (runner/cache/disk_cache.py): the files this model's runner
    can load (`bytes`, `entries`), the bound over the whole cache folder (`limit`, 0 = off), restores since load
    (`hits`, `hit_tokens`) and how long the last one took, files refused (damaged or foreign: deleted)."""
    bytes: int
    entries: int
    limit: int
    hits: int = 0
    hit_tokens: int = 0
    restore_s: float = 0.0
    writes: int = 0
    refused: int = 0


@dataclass
class Heartbeat:
    """Sent by the runner's heartbeat thread every HEARTBEAT_INTERVAL_S, whatever the context thread is doing (that
    thread never waits on llama_decode): its absence means the process is frozen; its step fields tell the
    parent's watchdog how long the step in progress has run against what this model's measured steps predict
    (engine/runner_watch.py)."""
    steps: int                              # decode steps completed since load
    step_s: float = 0.0                     # seconds the step in progress has run (0: no step in progress)
    step_tokens: int = 0                    # tokens in that step's batch
    expected_s: float = 0.0                 # how long such a step should take, from this runner's measured steps


HEARTBEAT_INTERVAL_S = 1.0
