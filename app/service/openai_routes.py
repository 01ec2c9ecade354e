"""OpenAI-compatible routes (/v1). Thin: parse (openai_schema), lease (scheduler), stream (generation)."""
from __future__ import annotations

import time

from aiohttp import web

from . import appkeys as keys

from . import generation
from .errors import ApiError
from .http_util import SSEWriter, field, model_name, read_json
from .openai_schema import (chat_chunk, chat_completion, chat_logprobs, completion_logprobs, embedding_item,
                            finish_reason, model_entry, parse_chat, parse_completion, text_completion, usage,
                            usage_chunk)
from .options import parse_openai_sampling


def _ctx(request):
    app = request.app
    return app[keys.SCHEDULER], app[keys.STORE], app[keys.METRICS]


def _start(scheduler, metrics, name, ro, req):
    """A generation's event stream and the Outcome it fills in (text, logprobs, done) as it runs."""
    outcome = generation.Outcome()
    return outcome, generation.events(scheduler, metrics, name, ro, None, req, outcome)


async def _drain(gen) -> None:
    """Run a generation to its end for a non-streaming reply: the Outcome gathers what the reply needs."""
    try:
        async for _ in gen:
            pass
    finally:
        await gen.aclose()


async def _stream(request, gen, on_token, on_end) -> web.StreamResponse:
    """Drive a generation as SSE. Errors before the first byte are HTTP errors; after it, an error event."""
    w = SSEWriter(request)
    try:
        await gen.__anext__()
        await on_token(w, None)             # opening chunk (role), sent once the model is ready
        async for ev in gen:
            if type(ev).__name__ == "TokenEvent":
                await on_token(w, ev)
    except ApiError as e:
        if not w.resp.prepared:
            raise
        await w.data({"error": {"message": e.message, "type": e.type, "param": e.param, "code": e.code}})
        await w.data("[DONE]")
        return await w.finish()
    finally:
        await gen.aclose()
    await on_end(w)
    await w.data("[DONE]")
    return await w.finish()


async def chat_completions(request):
    scheduler, _, metrics = _ctx(request)
    body = await read_json(request)
    p = parse_chat(body)
    record = await scheduler.resolve(p.model)
    ro = parse_openai_sampling(body, record.parameters)
    messages = generation.with_default_system(p.messages, record.system)
    req = generation.build_request(ro, messages=messages, json_mode=p.json_mode, json_schema=p.json_schema,
                                   logprobs=p.logprobs, top_logprobs=p.top_logprobs)
    outcome, gen = _start(scheduler, metrics, record.name, ro, req)
    cid, created = generation.new_id("chatcmpl"), int(time.time())

    if not p.stream:
        await _drain(gen)
        lp = chat_logprobs(outcome.logprobs, p.top_logprobs) if p.logprobs else None
        return web.json_response(chat_completion(cid, p.model, created, "".join(outcome.text), outcome.done, lp))

    async def on_token(w, ev):
        if ev is None:
            await w.data(chat_chunk(cid, p.model, created, {"role": "assistant", "content": ""},
                                    include_usage=p.include_usage))
            return
        lp = chat_logprobs(ev.logprobs, p.top_logprobs) if p.logprobs and ev.logprobs else None
        await w.data(chat_chunk(cid, p.model, created, {"content": ev.text}, logprobs=lp,
                                include_usage=p.include_usage))

    async def on_end(w):
        await w.data(chat_chunk(cid, p.model, created, {}, finish=finish_reason(outcome.done),
                                include_usage=p.include_usage))
        if p.include_usage:
            await w.data(usage_chunk(cid, p.model, created, "chat.completion.chunk", outcome.done))

    return await _stream(request, gen, on_token, on_end)


async def completions(request):
    scheduler, _, metrics = _ctx(request)
    body = await read_json(request)
    p = parse_completion(body)
    record = await scheduler.resolve(p.model)
    ro = parse_openai_sampling(body, record.parameters)
    if body.get("max_tokens") is None:
        ro.num_predict = 16                 # OpenAI's default for /v1/completions
    top = p.logprobs or 0
    req = generation.build_request(ro, prompt=p.prompt, raw=True, logprobs=p.logprobs is not None,
                                   top_logprobs=top)
    outcome, gen = _start(scheduler, metrics, record.name, ro, req)
    cid, created = generation.new_id("cmpl"), int(time.time())
    prefix = p.prompt if p.echo else ""

    if not p.stream:
        await _drain(gen)
        lp = completion_logprobs(outcome.logprobs, top, len(prefix)) if p.logprobs is not None else None
        return web.json_response(text_completion(cid, p.model, created, prefix + "".join(outcome.text),
                                                 outcome.done, lp))

    offset = [len(prefix)]

    async def on_token(w, ev):
        if ev is None:
            if prefix:
                await w.data(text_completion(cid, p.model, created, prefix, None, None, chunk=True))
            return
        lp = None
        if p.logprobs is not None and ev.logprobs:
            lp = completion_logprobs(ev.logprobs, top, offset[0])
        offset[0] += len(ev.text)
        await w.data(text_completion(cid, p.model, created, ev.text, None, lp, chunk=True))

    async def on_end(w):
        await w.data(text_completion(cid, p.model, created, "", None, None, chunk=True,
                                     finish=finish_reason(outcome.done)))
        if p.include_usage:
            await w.data(usage_chunk(cid, p.model, created, "text_completion", outcome.done))

    return await _stream(request, gen, on_token, on_end)


async def embeddings(request):
    scheduler, _, metrics = _ctx(request)
    body = await read_json(request)
    name = model_name(body)
    raw = body.get("input")
    if isinstance(raw, str):
        inputs = [raw]
    elif isinstance(raw, list) and raw and all(isinstance(s, str) for s in raw):
        inputs = list(raw)
    elif isinstance(raw, list) and raw and all(isinstance(s, (int, list)) for s in raw):
        raise ApiError(400, "token-id inputs are not supported; send text", param="input")
    else:
        raise ApiError(400, "'input' must be a non-empty string or array of strings", param="input")
    if any(s == "" for s in inputs):
        raise ApiError(400, "'input' must not contain empty strings", param="input")
    encoding = field(body, "encoding_format", str, "float")
    if encoding not in ("float", "base64"):
        raise ApiError(400, "'encoding_format' must be float or base64", param="encoding_format")
    dims = field(body, "dimensions", int)
    if dims is not None and dims < 1:
        raise ApiError(400, "'dimensions' must be >= 1", param="dimensions")
    record = await scheduler.resolve(name)
    ro = parse_openai_sampling({}, record.parameters)
    res, _ = await generation.embed(scheduler, metrics, record.name, ro, None, inputs, True)
    vectors = res.embeddings
    if dims:
        from .ollama_routes import _fit_dimensions
        vectors = _fit_dimensions(vectors, dims)
    return web.json_response({
        "object": "list",
        "data": [embedding_item(v, i, encoding) for i, v in enumerate(vectors)],
        "model": name,
        "usage": {"prompt_tokens": res.prompt_tokens, "total_tokens": res.prompt_tokens},
    })


async def list_models(request):
    _, store, _ = _ctx(request)
    records = await store.call("list")
    return web.json_response({"object": "list", "data": [model_entry(r) for r in records]})


async def get_model(request):
    scheduler, _, _ = _ctx(request)
    name = request.match_info["model"]
    try:
        record = await scheduler.resolve(name)
    except ApiError as e:
        if e.status == 404:
            raise ApiError(404, f"The model {name!r} does not exist", param="model", code="model_not_found") from None
        raise
    return web.json_response(model_entry(record))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_post("/v1/completions", completions)
    r.add_post("/v1/embeddings", embeddings)
    r.add_get("/v1/models", list_models)
    r.add_get("/v1/models/{model:.+}", get_model)


__all__ = ["add_routes", "usage"]
