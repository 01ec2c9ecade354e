"""serve()'s keepalive: a stream with nothing to say for KEEPALIVE_S seconds (a long prompt still being read) sends
its renderer's keepalive frames, so a client with an idle limit (Codex: 5 minutes without a Responses event)
keeps waiting; the generation itself is never interrupted by it. A stream queued for its model opens at once
(a refusal after that is the stream's error event), and a failure mid-stream ends a Responses stream with
`response.failed`, as the official openai client reads it.

A real aiohttp server on loopback runs `dialects/base.serve`; the generation is a stand-in whose first event (or
whose lease) waits until the client has seen a keepalive, so the order is fixed by the events themselves, not by
how long anything takes."""
from __future__ import annotations

import asyncio
import contextlib
import json
from types import SimpleNamespace

import aiohttp
from aiohttp import web

from app.service import appkeys as keys
from app.service.dialects import base
from app.service.dialects.responses import parse as rp
from app.service.dialects.responses.render import ResponsesRenderer
from app.service.generation.result import Finished, GenerationResult, TextDelta
from app.service.http.errors import ApiError


class StandIn:
    """What serve() uses of a pipeline Generation; its events wait for `gate`."""

    def __init__(self, gate: asyncio.Event):
        self.gate = gate
        self.result = GenerationResult(model="m")

    async def start(self):
        pass

    def headers(self):
        return {}

    async def events(self):
        await self.gate.wait()
        for ev in (TextDelta("hi"), Finished(reason="stop", prompt_tokens=3, completion_tokens=1,
                                             prompt_seconds=0.1, generation_seconds=0.1)):
            self.result.add(ev)
            yield ev


async def responses_handler(request):
    req, wire = rp.parse_responses({"model": "m", "input": "hi", "stream": True})
    return await base.serve(request, req, lambda job: ResponsesRenderer("m", wire))


@contextlib.asynccontextmanager
async def serving(monkeypatch, path, handler, generation):
    """A loopback server whose `path` runs `handler` (base.serve inside) with `generation(job)` as the pipeline's
    generate(); yields its port."""
    async def prepare(scheduler, req):
        return SimpleNamespace(request=req)

    monkeypatch.setattr(base.pipeline, "prepare", prepare)
    monkeypatch.setattr(base.pipeline, "generate", lambda scheduler, metrics, job: generation(job))
    monkeypatch.setattr(base, "KEEPALIVE_S", 0.05)
    app = web.Application()
    for key in (keys.SCHEDULER, keys.STORE, keys.METRICS):      # serve() only hands them to the stand-in
        app[key] = None
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]
    finally:
        await runner.cleanup()


async def exchange(monkeypatch, path="/v1/responses", make=None, raw=None) -> list[dict]:
    """The stream's `data:` events; `raw` (when given) collects every line as sent, comments included."""
    gate = asyncio.Event()

    @contextlib.asynccontextmanager
    async def generate(job):
        yield StandIn(gate)

    events = []
    async with serving(monkeypatch, path, make or responses_handler, generate) as port:
        async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}{path}", json={}) as r:
            assert r.status == 200
            async for line in r.content:
                if raw is not None:
                    raw.append(line)
                    if raw.count(b": keepalive\n") == 2:
                        gate.set()               # two comment keepalives seen: now the reply may come
                if line.startswith(b"data: ") and line != b"data: [DONE]\n":
                    events.append(json.loads(line[6:]))
                    if [e.get("type") for e in events].count("response.in_progress") == 3:
                        gate.set()               # two keepalives seen: now the reply may come
    return events


def test_a_quiet_stream_sends_keepalives_then_the_reply(monkeypatch):
    events = asyncio.run(exchange(monkeypatch))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.in_progress",
                         "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "hi"


def test_renderers_without_a_keepalive_send_nothing():
    assert list(base.Renderer().keepalive()) == []


def test_an_openai_chat_stream_is_kept_alive_by_sse_comments(monkeypatch):
    """OpenAI's chat stream has no event for "still reading the prompt": an SSE comment keeps OpenCode (its chunk
    timeout) and Bun's idle limit on the line, and SSE parsers (the openai client's, the AI SDK's) skip it."""
    from app.service.dialects.openai import parse as op
    from app.service.dialects.openai.render import ChatRenderer

    async def chat(request):
        req, wire = op.parse_chat({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        return await base.serve(request, req, lambda job: ChatRenderer("m", wire, logprobs=False, top=0, id="c1"))

    raw: list[bytes] = []
    events = asyncio.run(exchange(monkeypatch, "/v1/chat/completions", chat, raw))
    first_text = next(i for i, line in enumerate(raw) if b'"content":"hi"' in line)
    assert raw.count(b": keepalive\n") >= 2 and raw.index(b": keepalive\n") < first_text
    assert raw[-2:] == [b"data: [DONE]\n", b"\n"]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in events if c["choices"]) == "hi"
    assert events[-1]["choices"][0]["finish_reason"] == "stop" or any(
        c["choices"] and c["choices"][0]["finish_reason"] == "stop" for c in events)


class Refused(StandIn):
    """A generation whose prompt does not fit: start() refuses it."""

    async def start(self):
        raise ApiError(400, "prompt is too long: 9000 tokens > 1024 maximum", param="messages")


def test_a_queued_stream_opens_at_once_and_carries_a_late_refusal(monkeypatch):
    """Queued for its model (the stand-in's lease waits until the client saw a keepalive), an Anthropic stream
    answers 200 with message_start and pings; the refusal that comes once it has the model is the stream's error
    event, since the status was already sent."""
    from app.service.dialects.anthropic import parse as ap
    from app.service.dialects.anthropic.render import MessagesRenderer

    slot = asyncio.Event()

    @contextlib.asynccontextmanager
    async def generate(job):
        await slot.wait()                               # queued: no slot until the client has seen a ping
        yield Refused(asyncio.Event())

    async def messages(request):
        req, wire = ap.parse_messages_request({"model": "m", "max_tokens": 8, "stream": True,
                                               "messages": [{"role": "user", "content": "hi"}]})
        return await base.serve(request, req, lambda job: MessagesRenderer("m", wire))

    async def scenario():
        names = []
        async with serving(monkeypatch, "/v1/messages", messages, generate) as port:
            async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/v1/messages", json={}) as r:
                status = r.status
                async for line in r.content:
                    if line.startswith(b"event: "):
                        names.append(line[7:].strip().decode())
                        if names.count("ping") == 2:
                            slot.set()
                    elif line.startswith(b"data: ") and names[-1] == "error":
                        error = json.loads(line[6:])
        return status, names, error

    status, names, error = asyncio.run(scenario())
    assert status == 200
    assert names[:3] == ["message_start", "ping", "ping"] and names[-1] == "error"
    assert error["error"]["type"] == "invalid_request_error" and "prompt is too long" in error["error"]["message"]


class FailsMidStream(StandIn):
    """A generation that says "hi" and then loses its runner."""

    async def events(self):
        ev = TextDelta("hi")
        self.result.add(ev)
        yield ev
        raise ApiError(500, "model 'm': the runner ended (signal 9)", code="runner_exited")


def test_a_responses_stream_that_fails_ends_with_response_failed(monkeypatch):
    """Read by the official openai client: the text so far, then `error` and `response.failed`, whose response
    is `failed` with the error's code and message and the message item that was streamed."""
    import openai

    @contextlib.asynccontextmanager
    async def generate(job):
        yield FailsMidStream(asyncio.Event())

    def read(port):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        return list(client.responses.create(model="m", input="hi", stream=True))

    async def scenario():
        async with serving(monkeypatch, "/v1/responses", responses_handler, generate) as port:
            return await asyncio.to_thread(read, port)

    events = asyncio.run(scenario())
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and "response.output_text.delta" in kinds
    assert kinds[-2:] == ["error", "response.failed"]
    assert events[-2].code == "runner_exited" and "runner ended" in events[-2].message
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "runner_exited"
    assert "runner ended" in failed.error.message
    assert failed.output[0].content[0].text == "hi"
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_prompt_refused_at_once_is_still_the_http_answer(monkeypatch):
    """The fit is kept alive only once it outlasts KEEPALIVE_S (a context growth reloading the model): a prompt the
    runner refuses at once stays an HTTP 400, on a wire with a keepalive too."""
    from app.service.dialects.anthropic import parse as ap
    from app.service.dialects.anthropic.render import MessagesRenderer

    @contextlib.asynccontextmanager
    async def generate(job):
        yield Refused(asyncio.Event())                  # leased at once

    async def messages(request):
        req, wire = ap.parse_messages_request({"model": "m", "max_tokens": 8, "stream": True,
                                               "messages": [{"role": "user", "content": "hi"}]})
        try:
            return await base.serve(request, req, lambda job: MessagesRenderer("m", wire))
        except ApiError as e:           # raised before any byte: the service's error middleware answers it
            return web.json_response({"error": {"message": e.message}}, status=e.status)

    async def scenario():
        async with serving(monkeypatch, "/v1/messages", messages, generate) as port:
            monkeypatch.setattr(base, "KEEPALIVE_S", 10.0)
            async with aiohttp.ClientSession() as s, s.post(f"http://127.0.0.1:{port}/v1/messages", json={}) as r:
                return r.status, await r.json()

    status, body = asyncio.run(scenario())
    assert status == 400 and "prompt is too long" in body["error"]["message"]
