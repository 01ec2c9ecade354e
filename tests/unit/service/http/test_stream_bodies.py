"""The streaming writers' bytes (app/service/http/bodies.py) on a real aiohttp server on loopback: whatever a
renderer gives is sent as UTF-8 that a client's JSON decoder reads back."""
from __future__ import annotations

import asyncio
import json

import httpx
from aiohttp import web

from app.engine.chat.plan import plan_chat
from app.service.dialects.anthropic import parse as anthropic_parse
from app.service.dialects.anthropic.render import MessagesRenderer
from app.service.dialects.openai import parse as openai_parse
from app.service.dialects.openai.render import ChatRenderer
from app.service.generation.chat_features import ReplyReader
from app.service.generation.result import TextDelta
from app.service.http.bodies import dumps

TOOL = {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}
# a model's JSON escape of half an emoji (its other half missing, then cut off): valid JSON, a lone surrogate once
# read, which has no UTF-8 form
REPLY = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "smile \\ud83d!\\udc00"}}\n' \
        '</tool_call>'
WANT = {"path": "a.txt", "content": "smile \ud83d!\udc00"}
REQ, WIRE = openai_parse.parse_chat({"model": "m", "messages": [{"role": "user", "content": "write"}], "tools": [TOOL],
                                     "stream": True})


def stream(make_renderer, tokens: list[str]) -> bytes:
    """The frames of a streamed reply (the model's text fed token by token, calls in pieces) through the renderer's
    own writer on a loopback server, as the client receives them."""
    async def handler(request: web.Request) -> web.StreamResponse:
        renderer = make_renderer()
        reader = ReplyReader(REQ, plan_chat("hermes", REQ.tools, None, True), pieces=True)
        w = renderer.writer(request)
        for f in renderer.opening():
            await w.send(f)
        events = [e for t in tokens for e in reader.feed(TextDelta(t))] + reader.finish()
        for ev in events:
            name = {"ToolCallStart": "tool_call_start", "ToolCallArguments": "tool_call_arguments",
                    "ToolCallEvent": "tool_call", "TextDelta": "delta"}[type(ev).__name__]
            for f in getattr(renderer, name)(ev):
                await w.send(f)
        return await w.finish()

    async def run() -> bytes:
        app = web.Application()
        app.router.add_post("/", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with httpx.AsyncClient() as c:
                r = await c.post(f"http://127.0.0.1:{port}/", timeout=30)
                assert r.status_code == 200
                return r.content
        finally:
            await runner.cleanup()
    return asyncio.run(run())


def data_of(body: bytes) -> list:
    text = body.decode("utf-8")                                   # strict: every byte is UTF-8
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def test_a_lone_surrogate_in_a_streamed_call_reaches_the_client_as_its_escape():
    tokens = [REPLY[i:i + 3] for i in range(0, len(REPLY), 3)]
    chunks = data_of(stream(lambda: ChatRenderer("m", WIRE, logprobs=False, top=0, id="c"), tokens))
    args = "".join(tc["function"]["arguments"] for ch in chunks for tc in ch["choices"][0]["delta"].get("tool_calls", ()))
    assert json.loads(args) == WANT

    events = data_of(stream(lambda: MessagesRenderer("m", anthropic_parse.WireChoices()), tokens))
    partial = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
    assert json.loads(partial) == WANT


def test_dumps_writes_utf8_text_that_reads_back_the_same():
    for s in ("\ud83d", "a\udc00b", "é 😀 plain", "ascii"):
        text = dumps({"s": s, "k": [s]})
        text.encode("utf-8")
        assert json.loads(text) == {"s": s, "k": [s]}
    assert json.loads(dumps({"s": "\ud83d\ude00"}))["s"] == "😀"       # two halves read back as the pair they are
