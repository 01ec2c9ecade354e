"""A streamed request queued behind a busy model answers at once: its headers, its dialect's opening and a
keepalive come while it waits for a slot (clients with an idle limit, Bun's fetch under Claude Code and OpenCode,
Codex's stream timeout, would otherwise give up in the queue); the reply follows once the slot is free, and its
final event carries the fit's facts (`strata`: num_ctx, ...) that its early headers could not. A stream whose fit
takes long (its context grows: the model reloads) is kept alive the same way.

A live server on loopback with SmolLM2 on one slot; the test holds the model's only slot itself (a lease taken on
the server's loop), so the requests stay queued until the test lets go: every step waits on what the clients have
received, never on the clock. The official anthropic and openai clients read the streams."""
from __future__ import annotations

import asyncio
import threading

import anthropic
import httpx
import openai
import pytest

from service_util import HeldSlots, wait_for

MODEL = "smollm2:135m"


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m")
    httpx.post(svc.url + "/api/generate", json={"model": MODEL}, timeout=120)      # loaded once for the module
    return svc


def _queued(url: str) -> int:
    models = httpx.get(url + "/api/ps", timeout=30).json()["models"]
    return next(m["strata"]["queued"] for m in models if m["name"] == MODEL)


def _anthropic(url: str, seen: dict, out: dict):
    client = anthropic.Anthropic(base_url=url, api_key="none", max_retries=0, timeout=600)
    with client.messages.stream(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}]) as s:
        for ev in s:
            seen.setdefault("anthropic", []).append(ev.type)
            if ev.type == "message_delta":
                out["anthropic_trailer"] = (ev.model_extra or {}).get("strata")
        out["anthropic"] = s.get_final_message()


def _chat(url: str, seen: dict, out: dict):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    chunks = []
    for chunk in client.chat.completions.create(model=MODEL, max_tokens=4, stream=True,
                                                messages=[{"role": "user", "content": "Hi"}]):
        seen.setdefault("chat", []).append("chunk")
        chunks.append(chunk)
    out["chat"] = chunks


def _responses(url: str, seen: dict, out: dict):
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    for ev in client.responses.create(model=MODEL, max_output_tokens=4, stream=True, input="Hi"):
        seen.setdefault("responses", []).append(ev.type)
        out["responses_trailer"] = (ev.model_extra or {}).get("strata")      # the last event's
    out["responses"] = seen["responses"]


def test_queued_streams_open_at_once_and_answer_when_the_slot_frees(server):
    slot = HeldSlots(server, MODEL)
    seen: dict[str, list] = {}
    out: dict = {}
    errors: list[BaseException] = []

    def run(fn):
        try:
            fn(server.url, seen, out)
        except BaseException as e:          # noqa: BLE001 - reported by the test below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in (_anthropic, _chat, _responses)]
    try:
        for t in threads:
            t.start()
        # each client has its stream's opening while the slot is still held: nothing could have been generated
        wait_for(lambda: errors or {"anthropic", "chat", "responses"} <= seen.keys(), what="the queued streams open")
        assert not errors, errors
        # a stream opens after one turn of the service's loop, which may come before its request joins the queue
        wait_for(lambda: _queued(server.url) == 3, what="three requests queued")
        assert seen["anthropic"][0] == "message_start"
        assert seen["responses"][:2] == ["response.created", "response.in_progress"]
        # the Responses keepalive is an event the client sees: it came while the request still waited
        wait_for(lambda: seen["responses"].count("response.in_progress") >= 2, what="a Responses keepalive")
    finally:
        slot.release()
        for t in threads:
            t.join(timeout=300)
    assert not errors, errors
    assert out["anthropic"].stop_reason in ("end_turn", "max_tokens") and out["anthropic"].content
    assert out["chat"][0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in out["chat"] if c.choices][-1] in ("stop", "length")
    assert out["responses"][-1] in ("response.completed", "response.incomplete")
    assert _queued(server.url) == 0
    # their headers went out before the prompt was fitted: the final event carries the fit's facts instead
    finish = next(c for c in out["chat"] if c.choices and c.choices[0].finish_reason)
    for trailer in (out["anthropic_trailer"], (finish.model_extra or {}).get("strata"), out["responses_trailer"]):
        assert trailer is not None and trailer["num_ctx"] == 1024, trailer


def test_a_stream_whose_context_grows_is_kept_alive_during_the_reload(server, monkeypatch):
    """A prompt that outgrows the loaded context (1024) reloads the model with a larger one before its reply: the
    Responses stream opens and sends its keepalive meanwhile (the test holds the reload back, taking the
    scheduler's load lock, until the client has seen one), and its final event says the context it got."""
    from app.service import appkeys
    from app.service.dialects import base

    monkeypatch.setattr(base, "KEEPALIVE_S", 0.2)
    scheduler = server.app[appkeys.SCHEDULER]
    held, release = threading.Event(), threading.Event()

    async def hold_the_reload():
        async with scheduler._load_lock:
            held.set()
            await asyncio.to_thread(release.wait)

    holding = asyncio.run_coroutine_threadsafe(hold_the_reload(), server.loop)
    wait_for(held.is_set, what="the load lock held")
    seen: list[str] = []
    out: dict = {}
    errors: list[BaseException] = []
    prompt = " ".join(f"river{i} valley" for i in range(250)) + ". Hi"

    def read():
        try:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)
            for ev in client.responses.create(model=MODEL, max_output_tokens=4, stream=True, input=prompt):
                seen.append(ev.type)
                out["trailer"] = (ev.model_extra or {}).get("strata")       # the last event's
        except BaseException as e:          # noqa: BLE001 - reported by the test below
            errors.append(e)

    reader = threading.Thread(target=read)
    try:
        reader.start()
        # the opening (created, in_progress), then a keepalive (in_progress again): all before the reload may begin
        wait_for(lambda: errors or seen.count("response.in_progress") >= 2, what="a keepalive during the reload")
        assert not errors, errors
        assert seen[0] == "response.created" and "response.output_text.delta" not in seen
    finally:
        release.set()
        holding.result(timeout=120)
        reader.join(timeout=300)
    assert not errors, errors
    assert seen[-1] in ("response.completed", "response.incomplete")
    assert out["trailer"]["num_ctx"] > 1024, out
    ps = httpx.get(server.url + "/api/ps", timeout=30).json()["models"]
    assert next(m for m in ps if m["name"] == MODEL)["context_length"] == out["trailer"]["num_ctx"]
