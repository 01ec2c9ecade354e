"""Every dialect's parse and render, in-process: a wire body through the dialect's parser, then one recorded
generation (text, thinking, a tool call, the Finished event) through its Renderer exactly as `dialects/base.serve`
drives it (streamed: opening, one call per event, closing; not streamed: complete), and the frames compared with
golden files under tests/support/fixtures/dialect_frames/ (ids, timestamps and durations masked). The same call
given in pieces (ToolCallStart, ToolCallArguments..., ToolCallEvent) is each piece-streaming wire's own shape of
it, adding up to the same call.

A golden file is the wire format as the official clients read it (test_service_api.py, test_service_agents.py
run the same dialects through ollama/openai/anthropic on a live service). After a deliberate change of a wire
format, rewrite them with STRATA_WRITE_GOLDEN=1 and read the diff."""
from __future__ import annotations

import asyncio
import json
import os
from contextlib import aclosing

import pytest

from app.engine.protocol import TokenLogprob
from app.service.dialects.base import paced
from app.service.dialects.anthropic import parse as anthropic_parse
from app.service.dialects.anthropic.render import MessagesRenderer
from app.service.dialects.ollama import parse as ollama_parse
from app.service.dialects.ollama.render import OllamaRenderer
from app.service.dialects.openai import parse as openai_parse
from app.service.dialects.openai.render import ChatRenderer, CompletionRenderer
from app.service.dialects.responses import parse as responses_parse
from app.service.dialects.responses.render import ResponsesRenderer
from app.service.generation.request import GenerationRequest
from app.service.generation.result import (Finished, GenerationResult, TextDelta, ThinkingDelta, ToolCallArguments,
                                           ToolCallEvent, ToolCallStart)
from app.service.http.bodies import SSEEvent
from app.service.http.errors import ApiError
from repo_paths import FIXTURES

GOLDEN = FIXTURES / "dialect_frames"
MODEL = "smollm2:135m"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
# values that differ per run (ids, clocks) or per machine (durations): compared by presence, not value
MASKED = {"id", "created", "created_at", "total_duration", "load_duration", "prompt_eval_duration", "eval_duration",
          "call_id", "item_id", "tool_call_id", "system_fingerprint"}


def lp(token: str, logprob: float) -> TokenLogprob:
    return TokenLogprob(token=token, logprob=logprob, bytes=token.encode(), top=((token, logprob, token.encode()),))


# One recorded generation: thinking, two text pieces, a tool call, then the end (what the pipeline yields)
EVENTS = [
    ThinkingDelta("The user wants the weather.", n_tokens=6),
    TextDelta("Let me ", logprobs=(lp("Let", -0.25), lp(" me", -0.5)), n_tokens=2),
    TextDelta("check.", logprobs=(lp(" check", -0.125), lp(".", -0.0625)), n_tokens=2),
    ToolCallEvent(index=0, id="call_abc123", name="get_weather", arguments={"city": "Paris"}),
    Finished(reason="stop", prompt_tokens=42, completion_tokens=14, prompt_seconds=0.5, generation_seconds=1.5,
             cached_tokens=8),
]


def result_of(events) -> GenerationResult:
    res = GenerationResult(model=MODEL)
    for ev in events:
        res.add(ev)
    res.thinking_tokens = sum(ev.n_tokens for ev in events if isinstance(ev, ThinkingDelta))
    return res


def stream(renderer, events) -> list:
    """The frames `serve()` sends for these events, in order."""
    frames = list(renderer.opening())
    for ev in events:
        if isinstance(ev, TextDelta):
            frames += renderer.delta(ev)
        elif isinstance(ev, ThinkingDelta):
            frames += renderer.thinking(ev)
        elif isinstance(ev, ToolCallStart):
            frames += renderer.tool_call_start(ev)
        elif isinstance(ev, ToolCallArguments):
            frames += renderer.tool_call_arguments(ev)
        elif isinstance(ev, ToolCallEvent):
            frames += renderer.tool_call(ev)
        elif isinstance(ev, Finished):
            frames += renderer.finished(ev)
    return frames + list(renderer.closing(result_of(events)))


def plain(frame):
    """A frame as JSON data: SSE events keep their name; masked values become "<masked>"."""
    if isinstance(frame, SSEEvent):
        frame = {"event": frame.name, "data": frame.data}

    def mask(v):
        if isinstance(v, dict):
            return {k: ("<masked>" if k in MASKED and v[k] is not None else mask(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [mask(x) for x in v]
        return v
    return mask(frame)


def check_golden(name: str, got: dict) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("STRATA_WRITE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run with STRATA_WRITE_GOLDEN=1 once and review it"
    assert json.loads(text) == json.loads(path.read_text(encoding="utf-8")), f"{name} differs from {path}"


def tools_openai():
    return [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def ollama_chat():
    req = ollama_parse.parse_chat({"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}],
                                   "tools": tools_openai(), "think": True, "logprobs": True, "top_logprobs": 1})
    return req, lambda: OllamaRenderer(MODEL, req, chat=True)


def ollama_generate():
    req = ollama_parse.parse_generate({"model": MODEL, "prompt": "Weather in Paris?", "think": True})
    return req, lambda: OllamaRenderer(MODEL, req, chat=False)


def openai_chat():
    req, wire = openai_parse.parse_chat({"model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}],
                                         "tools": tools_openai(), "logprobs": True, "top_logprobs": 1,
                                         "stream_options": {"include_usage": True}})
    return req, lambda: ChatRenderer(MODEL, wire, logprobs=req.logprobs, top=req.top_logprobs, id="chatcmpl-1")


def openai_completion():
    req, wire = openai_parse.parse_completion({"model": MODEL, "prompt": "Weather in Paris?", "logprobs": 1,
                                               "echo": True})
    return req, lambda: CompletionRenderer(MODEL, wire, prompt=req.prompt, id="cmpl-1")


def anthropic_messages():
    req, wire = anthropic_parse.parse_messages_request({
        "model": MODEL, "max_tokens": 2048, "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"name": "get_weather", "input_schema": WEATHER}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}})
    return req, lambda: MessagesRenderer(MODEL, wire, show_thinking=req.think is not False)


def responses():
    req, wire = responses_parse.parse_responses({
        "model": MODEL, "input": "Weather in Paris?", "reasoning": {"effort": "low"},
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}]})
    return req, lambda: ResponsesRenderer(MODEL, wire, show_thinking=req.think is not False)


DIALECTS = {"ollama_chat": ollama_chat, "ollama_generate": ollama_generate, "openai_chat": openai_chat,
            "openai_completion": openai_completion, "anthropic_messages": anthropic_messages,
            "responses": responses}


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_streamed_and_complete_frames_match_the_golden_file(name):
    req, make = DIALECTS[name]()
    assert req.model == MODEL and req.messages or req.prompt      # the parser read the body
    got = {"streamed": [plain(f) for f in stream(make(), EVENTS)],
           "complete": plain(make().complete(result_of(EVENTS))),
           "error": [plain(f) for f in make().error(ApiError(500, "the runner ended"))]}
    check_golden(name, got)


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_streamed_text_adds_up_to_the_complete_reply(name):
    """Whatever a dialect's frames look like, the reply text a client assembles from the stream is the text of
    the non-streamed answer: nothing dropped, nothing twice."""
    req, make = DIALECTS[name]()
    text_events = [ev for ev in EVENTS if not isinstance(ev, (ThinkingDelta, ToolCallEvent))]
    streamed = json.dumps([plain(f) for f in stream(make(), text_events)])
    complete = json.dumps(plain(make().complete(result_of(text_events))))
    for piece in ("Let me ", "check."):
        assert streamed.count(json.dumps(piece)[1:-1]) >= 1, (name, piece)
    assert "Let me check." in complete, name


def test_claude_codes_billing_block_is_left_out_of_the_system_prompt():
    """Its cch= nonce changes on every request: kept, it would be the first difference between two requests of a
    session and the prompt cache could reuse nothing after it (docs/prompt-cache.md, "What agents change")."""
    def system(nonce: str) -> str:
        req, _ = anthropic_parse.parse_messages_request({
            "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
            "system": [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.37.0d9; cch={nonce};"},
                       {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]})
        return req.messages[0]["content"]
    assert system("fa690") == system("0aaa9") == "You are Claude Code."
    req, _ = anthropic_parse.parse_messages_request({"model": "m", "max_tokens": 8, "system": "plain",
                                                     "messages": [{"role": "user", "content": "hi"}]})
    assert req.messages[0] == {"role": "system", "content": "plain"}


def test_a_stream_waiting_for_its_first_token_is_kept_alive():
    """serve() sends the renderer's keepalive while the generation has nothing to say (a long prompt being read):
    Anthropic's wire has `ping` for it; the wait never cancels the generation, only the consumer stopping does.
    Ordered by events, not by the clock: the token is released only after a keepalive was seen."""
    assert list(MessagesRenderer(MODEL, anthropic_parse.WireChoices()).keepalive()) == [
        SSEEvent("ping", {"type": "ping"})]
    assert list(OllamaRenderer(MODEL, GenerationRequest(model=MODEL), chat=True).keepalive()) == []

    async def released_after_a_keepalive():
        release, got = asyncio.Event(), []

        async def events():
            await release.wait()
            yield "token"
        async with aclosing(paced(events(), 0.001)) as it:
            async for ev in it:
                got.append(ev)
                release.set()
        return got

    got = asyncio.run(released_after_a_keepalive())
    assert got[0] is None and got[-1] == "token" and set(got[:-1]) == {None}

    async def stopped_by_the_consumer():
        closed = asyncio.Event()

        async def events():
            try:
                await asyncio.Event().wait()
                yield "never"
            finally:
                closed.set()
        async with aclosing(paced(events(), 0.001)) as it:
            async for ev in it:
                assert ev is None
                break
        return closed.is_set()

    assert asyncio.run(stopped_by_the_consumer())

    async def unpaced():
        async def events():
            yield 1
            yield 2
        async with aclosing(paced(events(), None)) as it:
            return [ev async for ev in it]

    assert asyncio.run(unpaced()) == [1, 2]


# the same call as EVENTS', given in pieces as a stream that asks for them gets it
PIECES = [ToolCallStart(0, "call_abc123", "get_weather"), ToolCallArguments(0, '{"city": "'),
          ToolCallArguments(0, "Par"), ToolCallArguments(0, 'is"}'),
          ToolCallEvent(index=0, id="call_abc123", name="get_weather", arguments={"city": "Paris"})]
WITH_PIECES = EVENTS[:3] + PIECES + EVENTS[4:]


def test_a_call_in_pieces_on_each_wire_that_streams_them():
    """OpenAI: the head (id, name, arguments "") then each piece as `function.arguments`; Anthropic: the tool_use
    block starts with `input: {}`, each piece an `input_json_delta`, the block stops with the call; Responses:
    the function_call item is added in progress, each piece a `function_call_arguments.delta`, `.done` and the
    item's `done` carry the whole string. Ollama's wire keeps the whole call."""
    pieces = ['{"city": "', "Par", 'is"}']
    chat = [plain(f) for f in stream(openai_chat()[1](), WITH_PIECES)]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chat
             if isinstance(c, dict) and c.get("choices") and c["choices"][0]["delta"].get("tool_calls")]
    assert calls[0] == {"index": 0, "id": "<masked>", "type": "function",
                        "function": {"name": "get_weather", "arguments": ""}}
    assert [c["function"]["arguments"] for c in calls[1:]] == pieces and all("id" not in c for c in calls[1:])

    msgs = [plain(f) for f in stream(anthropic_messages()[1](), WITH_PIECES)]
    start = next(i for i, m in enumerate(msgs) if m["event"] == "content_block_start"
                 and m["data"]["content_block"]["type"] == "tool_use")
    tool = msgs[start]["data"]
    assert tool["content_block"] == {"type": "tool_use", "id": "<masked>", "name": "get_weather", "input": {}}
    deltas = msgs[start + 1:start + 4]
    assert [d["data"]["delta"] for d in deltas] == [{"type": "input_json_delta", "partial_json": p} for p in pieces]
    assert msgs[start + 4]["event"] == "content_block_stop" and msgs[start + 4]["data"]["index"] == tool["index"]

    resp = [plain(f) for f in stream(responses()[1](), WITH_PIECES)]
    kinds = [r["event"] for r in resp]
    added = next(i for i, r in enumerate(resp) if r["event"] == "response.output_item.added"
                 and r["data"]["item"]["type"] == "function_call")
    assert resp[added]["data"]["item"]["arguments"] == "" and resp[added]["data"]["item"]["status"] == "in_progress"
    assert kinds[added + 1:added + 6] == ["response.function_call_arguments.delta"] * 3 + [
        "response.function_call_arguments.done", "response.output_item.done"]
    assert [r["data"]["delta"] for r in resp[added + 1:added + 4]] == pieces
    assert resp[added + 4]["data"]["arguments"] == resp[added + 5]["data"]["item"]["arguments"] == '{"city": "Paris"}'
    assert [r["data"]["sequence_number"] for r in resp] == list(range(len(resp)))

    whole = [plain(f) for f in stream(ollama_chat()[1](), EVENTS)]
    assert [plain(f) for f in stream(ollama_chat()[1](), WITH_PIECES)] == whole


def test_a_custom_tools_input_streams_as_it_is_written():
    """Codex's apply_patch: a custom tool served as a function of one string `input`; the string's text goes as
    `custom_tool_call_input.delta` pieces as the arguments come (an escape once complete), `.done` whole."""
    _, wire = responses_parse.parse_responses({"model": MODEL, "input": "Patch it",
                                               "tools": [{"type": "custom", "name": "apply_patch"}]})
    patch = '*** Begin Patch\n+print("\u00e9")\n*** End Patch'
    events = [ToolCallStart(0, "call_p", "apply_patch"), ToolCallArguments(0, '{"input": "'),
              ToolCallArguments(0, "*** Begin Patch\\"), ToolCallArguments(0, 'n+print(\\"\u00e9\\")\\n'),
              ToolCallArguments(0, '*** End Patch"}'), ToolCallEvent(0, "call_p", "apply_patch", {"input": patch})]
    frames = [plain(f) for f in stream(ResponsesRenderer(MODEL, wire), events)]
    deltas = [f["data"]["delta"] for f in frames if f["event"] == "response.custom_tool_call_input.delta"]
    assert deltas == ["*** Begin Patch", '\n+print("\u00e9")\n', "*** End Patch"]
    done = next(f["data"] for f in frames if f["event"] == "response.custom_tool_call_input.done")
    item = next(f["data"]["item"] for f in frames if f["event"] == "response.output_item.done")
    assert done["input"] == item["input"] == patch and item["type"] == "custom_tool_call"
