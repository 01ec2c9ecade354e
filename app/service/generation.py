"""The part of a generate/chat/embed request both dialects share: take a lease on the model from the
scheduler, send the request to its runner, yield the runner's events, and always give the slot back (closing
the runner's generator cancels the request there, so a client that disconnects frees its slot)."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from app.engine import protocol

from .errors import ApiError
from .options import RequestOptions


def new_id(prefix: str = "req") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:20]}"


def with_default_system(messages: list[dict], system: str | None) -> list[dict]:
    """Put the model's Modelfile SYSTEM first unless the request brings its own system message."""
    if system and not any(m["role"] == "system" for m in messages):
        return [{"role": "system", "content": system}] + messages
    return messages


def build_request(ro: RequestOptions, *, prompt=None, messages=None, system=None, raw=False, json_mode=False,
                  json_schema=None, logprobs=False, top_logprobs=0, id: str | None = None) -> protocol.GenerateRequest:
    return protocol.GenerateRequest(
        id=id or new_id(),
        prompt=prompt,
        messages=messages,
        system=system,
        raw=raw,
        sampling=ro.sampling,
        num_predict=ro.num_predict,
        stop=list(ro.stop),
        json_schema=json_schema,
        json_mode=json_mode,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        ignore_eos=ro.ignore_eos,
    )


def runner_error(e: Exception, model: str) -> ApiError:
    """A RunnerError as an HTTP error: the engine marks client mistakes (prompt too long, bad schema) with
    `status` 400; anything else is the server's problem, said plainly."""
    from app.engine.client import RequestError

    status = getattr(e, "status", None) or (400 if isinstance(e, RequestError) else 500)
    return ApiError(int(status), f"model {model!r}: {e}", code="runner_error" if status >= 500 else None)


@dataclass
class Outcome:
    text: list[str] = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    done: protocol.DoneEvent | None = None
    load_wait: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


async def events(scheduler, metrics, name: str, ro: RequestOptions, keep_alive, req: protocol.GenerateRequest,
                 outcome: Outcome):
    """Async generator: yields the Lease first, then TokenEvents, then one DoneEvent. Close it when done."""
    from app.engine.client import RunnerError

    async with scheduler.lease(name, ro, keep_alive) as lease:
        outcome.load_wait = lease.load_wait
        yield lease
        client = lease.client
        agen = client.generate(req)
        try:
            async for ev in agen:
                if isinstance(ev, protocol.DoneEvent):
                    outcome.done = ev
                    metrics.count_tokens(lease.model.name, ev.prompt_tokens, ev.completion_tokens,
                                         ev.generation_seconds)
                elif isinstance(ev, protocol.TokenEvent):
                    outcome.text.append(ev.text)
                    if ev.logprobs:
                        outcome.logprobs.extend(ev.logprobs)
                elif isinstance(ev, protocol.ErrorEvent):
                    status = 400 if getattr(ev, "kind", "error") == "invalid" else 500
                    raise ApiError(status, f"model {name!r}: {ev.message}")
                yield ev
        except RunnerError as e:
            raise runner_error(e, name) from None
        finally:
            await agen.aclose()


async def embed(scheduler, metrics, name: str, ro: RequestOptions, keep_alive, inputs: list[str],
                truncate: bool = True, normalize: bool = True):
    """-> (EmbedResult, load_wait seconds)."""
    from app.engine.client import RunnerError

    async with scheduler.lease(name, ro, keep_alive) as lease:
        try:
            res = await lease.client.embed(protocol.EmbedRequest(id=new_id("emb"), inputs=inputs, truncate=truncate,
                                                                    normalize=normalize))
        except RunnerError as e:
            raise runner_error(e, name) from None
        if res.error:
            status = 400 if ("context" in res.error or "truncate" in res.error or "too long" in res.error) else 500
            raise ApiError(status, f"model {name!r}: {res.error}")
        metrics.count_tokens(lease.model.name, res.prompt_tokens, 0, 0.0)
        return res, lease.load_wait
