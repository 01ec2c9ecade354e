"""Running an internal request, whichever dialect asked for it.

    job = await prepare(host, req)                    # model found, its defaults applied, options checked
    async with generate(host, metrics, job) as gen:   # loaded, a slot taken (gen.lease)
        await gen.start()                                  # prompt fitted (or the context grown, or a 400)
        async for ev in gen.events():                      # TextDelta..., then one Finished
            ...
    # leaving the block closes the runner's stream (a request still running there is cancelled) and frees
    # the slot, so a client that disconnects frees its slot

`host` is the model scheduler as generation sees it (host.py: ModelHost, the one door to the models). Runner
events become the service's own typed events (result.py); a runner's error becomes an ApiError.
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import AsyncGenerator, AsyncIterator

from app.engine.gguf.chat_facts import ChatFacts

from app.engine import protocol
from app.engine.client import ContextOverflowError, RequestError, RunnerError, RunnerExited
from app.engine.protocol import has_images

from ..http import request_log
from ..http.errors import ApiError, ContextLengthError
from ..http.metrics import Metrics
from .keep_alive import DEFAULT, KeepAlive
from . import call_repeats, chat_features, images, repeat_guard
from .gotemplate import TemplateError, render as render_template
from .host import HostLease, ModelEntry, ModelHost
from .options import RequestOptions, parse_ollama_options
from .request import EmbeddingRequest, GenerationRequest
from .result import EmbeddingResult, Event, Finished, GenerationResult, PromptProgress, TextDelta


log = logging.getLogger("strata.generation")

# Tokens a reply is given room for when the client set no num_predict / max_tokens (at most a quarter of the
# context): a prompt that leaves less grows the context when memory allows (one that leaves at least one token
# still runs when it cannot).
REPLY_RESERVE = 512


def reply_reserve(overflow: str, num_predict: int) -> int:
    """What the prompt must leave free under the request's own rule (protocol.GenerateRequest.reserve). A rule that
    refuses claims nothing for the reply: as llama-server, a prompt that fits is served and max_tokens (OpenAI's,
    Anthropic's; agents send 4096-32000) caps the reply by the room left, which ends with "length". Ollama's rules
    count num_predict (at most half the context, runner/prompt/context_fit.reply_room) before dropping messages."""
    return 0 if overflow == "error" else max(0, num_predict)


def new_id(prefix: str = "req") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:20]}"


def with_default_system(messages: list[dict], system: str | None) -> list[dict]:
    """Put the model's Modelfile SYSTEM first unless the request brings its own system message."""
    if system and not any(m["role"] == "system" for m in messages):
        return [{"role": "system", "content": system}] + messages
    return messages


def request_options(options: dict, defaults: dict | None, logit_bias: dict[int, float] | None = None,
                    publisher=()) -> RequestOptions:
    """A request's options over the model's Modelfile PARAMETERs over the GGUF's general.sampling.* (`publisher`),
    checked (400 naming the option)."""
    ro = parse_ollama_options(options, defaults, publisher)
    if logit_bias is not None:
        ro.sampling.logit_bias = dict(logit_bias)
    return ro


@dataclass
class Job:
    """A GenerationRequest resolved against its model: what the scheduler and the runner take."""
    request: GenerationRequest
    model: str                          # the store's name for it
    options: RequestOptions
    runner_request: protocol.GenerateRequest
    facts: ChatFacts | None = None      # the model's chat facts (None: unreadable; plain text)
    parse_reply: bool = False           # read thinking and tool calls out of the reply (chat_features)
    record: ModelEntry | None = None    # the store's record `model` was resolved to (the lease needs no lookup)
    call_pieces: bool = False           # stream each tool call in pieces as it is written (the renderer asks)

    @property
    def keep_alive(self) -> KeepAlive:
        return self.request.keep_alive


async def prepare(host: ModelHost, req: GenerationRequest) -> Job:
    """Find the model (404), check the options over its defaults (400), apply its SYSTEM and TEMPLATE."""
    record = await host.resolve(req.model)
    facts = await chat_features.facts_for(record.path)
    ro = request_options(req.options, record.parameters, req.logit_bias, facts.sampling if facts else ())
    prompt, messages, system, raw = req.prompt, req.messages, req.system, req.raw
    if messages is not None:
        messages = with_default_system(messages, record.system)
    else:
        system = system or record.system
        template = req.template or record.template
        if template and not raw and req.suffix is None:
            try:   # an Ollama (Go) prompt template: render it here and send the result raw
                prompt = render_template(template, {"System": system or "", "Prompt": prompt or "", "Response": ""})
                system, raw = None, True
            except TemplateError as e:
                if req.template:
                    raise ApiError(400, f"template: {e}", param="template") from None
                # a Modelfile TEMPLATE beyond the subset: the GGUF's own chat template is used instead
    chat_features.settle_thinking(req, facts)
    chat_features.settle_budget(req, ro)
    plan = chat_features.plan(req, facts, raw)
    chat_features.check(req, facts, plan, req.model)
    if has_images(req):
        if not record.projector:
            raise ApiError(400, f"model {req.model!r} does not support images: missing capability 'vision' (it has "
                                "no vision projector)", param="images")
        images.limit(req)
    extra = chat_features.runner_fields(req, facts, plan, messages)
    runner_request = protocol.GenerateRequest(
        id=new_id(), prompt=prompt, images=req.images, system=system, raw=raw, sampling=ro.sampling,
        num_predict=ro.num_predict, stop=list(ro.stop), json_schema=req.json_schema, json_mode=req.json_mode,
        logprobs=req.logprobs, top_logprobs=req.top_logprobs, ignore_eos=ro.ignore_eos, context=req.context,
        want_context=req.want_context,
        overflow=req.overflow, reserve=reply_reserve(req.overflow, ro.num_predict),
        shift=req.shift if req.shift is not None else req.overflow != "error", announce=True,
        priority=1 if req.stream else 0, **extra)
    parse_reply = not raw and req.suffix is None
    return Job(req, record.name, ro, runner_request, facts, parse_reply, record)


def sampling_facts(ro: RequestOptions) -> str:
    """Where the sampler values that are not the engine's defaults came from: `temperature=0.6 (gguf), top_k=20
    (modelfile), top_p=0.9 (request)`: the request, a Modelfile PARAMETER, or the publisher's general.sampling.*
    in the GGUF (the X-Strata-Sampling header)."""
    return ", ".join(f"{k}={getattr(ro.sampling, k)} ({src})" for k, src in sorted(ro.sources.items()))


def job_headers(job: Job) -> dict[str, str]:
    """What the request alone tells the response, known before the model is leased: the offered tools that cannot
    run here, where the sampler values came from (a stream that opens while it waits for its model has only
    these; Generation.headers() adds the rest)."""
    h = {}
    if job.request.dropped_tools:
        h["X-Strata-Dropped-Tools"] = ", ".join(job.request.dropped_tools)
    ro = getattr(job, "options", None)          # (a test's stand-in job may carry the request alone)
    if ro is not None and ro.sources:
        h["X-Strata-Sampling"] = sampling_facts(ro)
    return h


# each fact of the fit (context_facts) and the response header that carries it
FACT_HEADERS = {"num_ctx": "X-Strata-Num-Ctx", "dropped_messages": "X-Strata-Dropped-Messages",
                "truncated_tokens": "X-Strata-Truncated-Tokens", "reply_room": "X-Strata-Reply-Room",
                "think_budget": "X-Strata-Think-Budget"}


def context_facts(result: GenerationResult) -> dict[str, int]:
    """What fitting the prompt decided, once it is fitted: the context per sequence, what was left out to fit it,
    the room the reply had when max_tokens asked for more, the thinking budget set (each only when there is
    something to say). The
    response's headers (FACT_HEADERS), or the final event of a stream whose headers went out before the fit."""
    facts = {"num_ctx": result.num_ctx, "dropped_messages": result.dropped_messages,
             "truncated_tokens": result.truncated_tokens}
    out = {k: v for k, v in facts.items() if v}
    if result.reply_room is not None:
        out["reply_room"] = result.reply_room
    if result.think_budget is not None:         # the thinking budget in tokens (think_budget.py), 0 included
        out["think_budget"] = result.think_budget
    return out


def runner_error(e: Exception, model: str) -> ApiError:
    """A RunnerError as an HTTP error: the engine marks client mistakes (prompt too long, bad schema) with
    `status` 400; anything else is the server's problem, said plainly: a runner that died or froze says so in
    its message (the model, the signal or the freeze, its last stderr lines) and in its code (runner_exited,
    runner_frozen)."""
    status = getattr(e, "status", None) or (400 if isinstance(e, RequestError) else 500)
    code = None
    if status >= 500:
        code = f"runner_{e.kind}" if isinstance(e, RunnerExited) else "runner_error"
    return ApiError(int(status), f"model {model!r}: {e}", code=code)


class Generation:
    """A running generation: the lease it holds and its typed event stream. Made by generate()."""

    def __init__(self, lease: HostLease, job: Job, metrics: Metrics, result: GenerationResult,
                 host: ModelHost | None = None):
        self.lease = lease
        self.job = job
        self.result = result
        self._metrics = metrics
        self._host = host
        self._stream: AsyncGenerator | None = None     # the runner's events for this request (start)
        # a runner event start() read that is not Admitted (fakes send none)
        self._first: protocol.PromptProgress | protocol.TokenEvent | protocol.DoneEvent | None = None
        self._started = False

    async def start(self) -> None:
        """Send the request and wait until the runner has fitted its prompt to the context. A prompt that does not
        leave room for the reply (num_predict, else REPLY_RESERVE) first grows the model's context when the request
        did not fix num_ctx, nothing else runs on the model and the larger plan fits (Scheduler.grow_context: up to
        the training context, so a model another client loaded small grows for one that asked for nothing);
        otherwise it is fitted by the request's own rule (`overflow`) or refused with a ContextLengthError: only a
        prompt that leaves no room at all is refused where the rule refuses. What was dropped is on `result` (and
        in the response headers, `headers()`). Idempotent."""
        if self._started:
            return
        self._started = True
        req = self.job.runner_request
        policy, hard = req.overflow, req.reserve
        model = self.lease.model
        host = self._host
        grow = host is not None and "num_ctx" not in self.job.options.plan and host.growth_ceiling(model) > 0
        if grow:
            room = max(self.job.options.num_predict, min(REPLY_RESERVE, model.options.num_ctx // 4))
            req.overflow, req.reserve = "error", max(hard, room)
        while True:
            self._stream = stream = self.lease.client.generate(req)
            try:
                first = await stream.__anext__()
            except ContextOverflowError as e:
                await self.close()
                n = int(e.data.get("prompt_tokens", 0))
                if grow and host is not None:
                    grow = False
                    await host.grow_context(model, n + req.reserve, n + 1)
                    req.id, req.overflow, req.reserve = new_id(), policy, hard
                    continue
                raise ContextLengthError(self.job.model, n, int(e.data.get("reserve", hard)),
                                         int(e.data.get("limit", 0)), str(e.data.get("why") or "")) from None
            except RunnerError as e:
                await self.close()
                raise runner_error(e, self.job.model) from None
            except StopAsyncIteration:
                raise ApiError(500, f"model {self.job.model!r}: the runner ended the request without an answer")
            break
        if isinstance(first, protocol.Admitted):
            self.result.num_ctx = first.n_ctx
            room = first.n_ctx - first.prompt_tokens
            if not req.shift and req.num_predict > room:
                self.result.reply_room = room          # the reply is capped by the context, not by max_tokens
            self.result.dropped_messages, self.result.truncated_tokens = first.dropped_messages, first.truncated_tokens
            self.result.think_budget = getattr(first, "think_budget", None)
            if first.dropped_messages or first.truncated_tokens:
                log.warning("%s: prompt fitted to num_ctx %d (%d tokens): %d oldest messages dropped, %d tokens cut",
                            self.job.model, first.n_ctx, first.prompt_tokens, first.dropped_messages,
                            first.truncated_tokens)
        else:
            self._first = first

    def headers(self) -> dict[str, str]:
        """What fitting the prompt left out and which offered tools cannot run here, for the response (never a
        silent cut)."""
        h = {FACT_HEADERS[k]: str(v) for k, v in context_facts(self.result).items()}
        return h | job_headers(self.job)

    async def _runner_events(self):
        if self._first is not None:
            first, self._first = self._first, None
            yield first
        if self._stream is not None:              # None once closed
            async for ev in self._stream:
                yield ev

    async def events(self) -> AsyncIterator[Event]:
        """TextDelta events, then one Finished. Raises ApiError when the runner refuses or fails. A reply that
        only repeats the last round's calls is asked for once more, as an answer (repeat_guard)."""
        name = self.job.model
        guard = repeat_guard.for_job(self.job)
        await self.start()
        try:
            async for e in self._reply(guard):
                yield e
            if guard is not None and guard.retry:
                await self.close()
                log.info("%s: the reply only repeated the last round's calls; asked again for an answer", name)
                self.job.runner_request = replace(self.job.runner_request, id=new_id(), bar_calls=True,
                                                  render_tools=False)
                self._started = False
                await self.start()
                check = guard.retried()
                async for e in self._reply(check):
                    yield e
                if check.replaced:
                    log.info("%s: the second try wrote a call as text or nothing; the first reply's calls went out",
                             name)
        except RunnerError as e:
            raise runner_error(e, name) from None
        finally:
            await self.close()

    async def _reply(self, guard: repeat_guard.RepeatGuard | repeat_guard.RetryCheck | None) -> AsyncIterator[Event]:
        """The runner's events for the request sent, through the reply's parser (and `guard`: it may end the
        reply early, with guard.retry set; a second try's check may hold it until its end)."""
        plan = self.job.runner_request.plan
        repeats = call_repeats.CallRepeats() if call_repeats.wanted(self.job) else None
        reader = (chat_features.ReplyReader(self.job.request, plan, self.job.call_pieces, watch=repeats is not None)
                  if self.job.parse_reply and plan else None)
        ended = False                        # the reply repeated a call: it ends there (and the model is stopped)
        async for ev in self._runner_events():
            out = self._translate(ev)
            if isinstance(out, PromptProgress):      # not output: past the reply's parser, to the log
                self.result.add(out)
                request_log.note_progress(out)
                yield out
                continue
            if ended:
                if isinstance(out, TextDelta):       # written before the runner heard: not part of the reply
                    continue
                if isinstance(out, Finished):        # the reply ended where it should have: a plain end
                    out = replace(out, reason="stop")
            if reader is None:
                events = [out]
            elif isinstance(out, TextDelta):
                events = reader.feed(out)
            else:                            # Finished: what the parser still holds comes first
                events = reader.finish() + [out]
            if repeats is not None:
                events = repeats.pass_on(events)
                if not ended and (repeats.stop or (reader is not None and reader.repeated)):
                    ended = True
                    self._stop_model("the reply repeated one of its calls")
            if not ended and reader is not None and reader.calls_done:
                ended = True
                self._stop_model("the reply made the one call parallel_tool_calls false allows")
            if guard is not None:
                events = guard.pass_on(events)
                if guard.retry:
                    return
            for e in events:
                self.result.add(e)
                yield e

    def _stop_model(self, why: str) -> None:
        """End the model's reply now (a call it repeated: call_repeats.py; the one call it may make): the runner
        cancels the request and its stream ends with the counts of what it did (if it has not ended there
        already)."""
        stopped = self.lease.client.cancel(self.job.runner_request.id)
        log.info("%s: %s; it ends there%s", self.job.model, why, "" if stopped else " (the model had finished)")

    def _translate(self, ev) -> Event:
        if isinstance(ev, protocol.PromptProgress):
            return PromptProgress(ev.total, ev.cached, ev.processed, ev.seconds)
        if isinstance(ev, protocol.TokenEvent):
            return TextDelta(ev.text, tuple(ev.logprobs or ()), ev.n_tokens)
        if isinstance(ev, protocol.DoneEvent):
            self._metrics.count_tokens(self.lease.model.name, ev.prompt_tokens, ev.completion_tokens,
                                       ev.generation_seconds, ev.cached_tokens, ev.reused_tokens)
            self._metrics.count_drafts(self.lease.model.name, ev.draft_tokens, ev.draft_accepted)
            return Finished(ev.reason, ev.prompt_tokens, ev.completion_tokens, ev.prompt_seconds,
                            ev.generation_seconds, tuple(ev.context_tokens) if ev.context_tokens else None,
                            ev.cached_tokens, ev.stop_string, ev.draft_tokens, ev.draft_accepted, ev.reused_tokens,
                            ev.report)
        raise ApiError(500, f"model {self.job.model!r}: unexpected runner message {ev!r}")

    async def collect(self) -> GenerationResult:
        """Run to the end (a non-streamed answer) and return the whole result."""
        async for _ in self.events():
            pass
        return self.result

    async def close(self) -> None:
        """Closing the runner's stream cancels the request there if it is still running."""
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()


@asynccontextmanager
async def leased(host: ModelHost, name: str, ro: RequestOptions, keep_alive: KeepAlive,
                 record: ModelEntry | None = None, result: GenerationResult | None = None,
                 priority: int = 0) -> AsyncIterator[HostLease]:
    """The model's lease (loaded, a slot taken), noted in the request log: the Server window's record of the
    request gets the model, its load and queue waits, and the generation's `result` (None for embeddings,
    reranking, token counts). `priority` 1: a person watches (a streamed generation): its slot comes first."""
    async with host.lease(name, ro, keep_alive, record=record, priority=priority) as lease:
        request_log.leased(lease, result)
        yield lease


@asynccontextmanager
async def generate(host: ModelHost, metrics: Metrics, job: Job) -> AsyncIterator[Generation]:
    """Lease the model (load it if needed, wait for a slot), then hand out the generation."""
    result = GenerationResult(model=job.model)
    async with leased(host, job.model, job.options, job.keep_alive, job.record, result,
                      job.runner_request.priority) as lease:
        result.load_wait = lease.load_wait
        gen = Generation(lease, job, metrics, result, host)
        try:
            yield gen
        finally:
            await gen.close()


# ---- embeddings -------------------------------------------------------------------------------------------

def fit_dimensions(vectors: list[list[float]], dims: int | None) -> list[list[float]]:
    """The first `dims` dimensions of each vector, normalised again (Matryoshka-style truncation)."""
    if not dims:
        return vectors
    out = []
    for v in vectors:
        v = v[:dims]
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        out.append([x / norm for x in v])
    return out


async def embed(host: ModelHost, metrics: Metrics, req: EmbeddingRequest) -> EmbeddingResult:
    """Embeddings of req.inputs; no inputs: only load the model (Ollama's way of preloading)."""
    t0 = time.monotonic()
    record = await host.resolve(req.model)
    ro = request_options(req.options, record.parameters)
    name = record.name
    async with leased(host, name, ro, req.keep_alive, record) as lease:
        if not req.inputs:
            return EmbeddingResult(name, [], 0, lease.load_wait, 0.0)
        try:
            res = await lease.client.embed(protocol.EmbedRequest(id=new_id("emb"), inputs=req.inputs,
                                                                 truncate=req.truncate, normalize=req.normalize))
        except RunnerError as e:
            raise runner_error(e, name) from None
        metrics.count_tokens(lease.model.name, res.prompt_tokens, 0, 0.0)
        return EmbeddingResult(name, fit_dimensions(res.embeddings, req.dimensions), res.prompt_tokens,
                               lease.load_wait, time.monotonic() - t0)


async def count_prompt(host: ModelHost, req: GenerationRequest) -> int:
    """How many tokens the request's prompt is once rendered (template, tools, SYSTEM): asked of the model's
    runner, which renders exactly as it would for a generation."""
    return len((await render_prompt(host, req)).tokens)


async def render_prompt(host: ModelHost, req: GenerationRequest) -> protocol.TokenizeResult:
    """The request's prompt as its runner renders it for a generation (protocol.TokenizeResult: text, tokens)."""
    job = await prepare(host, req)
    async with leased(host, job.model, job.options, job.keep_alive, job.record) as lease:
        try:
            return await lease.client.render_prompt(job.runner_request)
        except RunnerError as e:
            raise runner_error(e, job.model) from None


# ---- reranking ----------------------------------------------------------------------------------------------

RANK_POOLING = 4        # llama.cpp's LLAMA_POOLING_TYPE_RANK: a GGUF reranker's classification head


@dataclass
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    top_n: int | None = None
    return_documents: bool = False
    truncate: bool = True
    options: dict = field(default_factory=dict)
    keep_alive: KeepAlive = DEFAULT


@dataclass
class RerankResult:
    id: str
    model: str
    scores: list[float]                  # per document, in the request's order
    prompt_tokens: int


async def rerank(host: ModelHost, metrics: Metrics, req: RerankRequest) -> RerankResult:
    """Score each document against the query with a reranker GGUF (400 for any other model), through the runner's
    embedding batch (runner/embedding/embeddings.py: the pair layout and the truncation rule)."""
    record = await host.resolve(req.model)
    name = record.name
    info = await host.model_info(record.path)
    if getattr(info, "pooling_type", None) != RANK_POOLING:
        kind = "an embedding model" if getattr(info, "is_embedding", False) else "a generative model"
        raise ApiError(400, f"model {name!r} is not a reranker: it is {kind} (a reranker GGUF has pooling type "
                            f"'rank', e.g. the BGE or Qwen3 reranker families)", param="model")
    ro = request_options(req.options or {}, record.parameters)
    rid = new_id("rerank")
    async with leased(host, name, ro, req.keep_alive, record) as lease:
        try:
            res = await lease.client.embed(protocol.EmbedRequest(id=rid, inputs=req.documents, truncate=req.truncate,
                                                                 normalize=False, query=req.query))
        except RequestError as e:       # the runner's refusals (truncate=false, ...) name the input; a failed
            client_error = "failed" not in str(e)                                         # decode is ours
            raise ApiError(400 if client_error else 500, f"model {name!r}: {e}",
                           param="documents" if client_error else None) from None
        except RunnerError as e:
            raise runner_error(e, name) from None
    metrics.count_tokens(name, res.prompt_tokens, 0, 0.0)
    return RerankResult(rid, name, [float(v[0]) for v in res.embeddings], res.prompt_tokens)
