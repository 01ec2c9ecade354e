"""Progress while a long prompt is read, for the clients that ask (`return_progress`, llama-server's key): a
~10k-token prompt is read in several chunks (no chunk is longer than the batch), and after each but the last the
stream carries llama-server's `prompt_progress` ({total, cache, processed, time_ms}) in each dialect's own frame:
an OpenAI chat chunk with an empty assistant delta, an Ollama done:false line with no text, an Anthropic `ping`.
The official clients read those streams to the end as usual; a client that did not ask gets no such frame; the
request log shows a running request's progress (the Server window's ETA). Checked by what the streams carry (at
least one progress frame before the first output, counts that grow, the prompt's total), never by timing, on
the Qwen2.5-Coder fixture's random-weight twin (its tokenizer, a thousandth of the compute)."""
from __future__ import annotations

import json
import uuid

import anthropic
import httpx
import ollama
import openai
import pytest

from agent_replay import serve_model, sse_blocks, write_tokenizer_twin

pytestmark = pytest.mark.timeout(900)

TWIN = "coder-twin:random"
WORDS = ("ledger", "harbor", "violet", "copper", "meadow", "signal", "quartz", "lantern", "orbit", "thistle")


def long_text(n_words: int = 3300) -> str:
    """About 10k tokens that start with a nonce (no request reuses another's cache)."""
    return f"[{uuid.uuid4().hex}] " + " ".join(f"{WORDS[i % 10]}{i % 97}" for i in range(n_words))


@pytest.fixture(scope="module")
def svc(live_service, qwen_coder_path, tmp_path_factory):
    gguf = write_tokenizer_twin(qwen_coder_path, tmp_path_factory.mktemp("twin") / "coder-twin.gguf", n_ctx=16384)
    return serve_model(live_service, gguf, TWIN, num_ctx=16384, num_parallel=1, keep_alive="10m")


def check_progress(frames: list[dict], total: int) -> None:
    """Progress frames as a client reads them: at least one, each with the prompt's total, counts that grow and
    stay short of the total (the last chunk's end is the reply's first token, not a progress frame)."""
    assert frames, "no prompt_progress frame"
    processed = [f["processed"] for f in frames]
    assert processed == sorted(processed) and len(set(processed)) == len(processed), frames
    assert all(f["total"] == total and 0 <= f["cache"] < f["processed"] < total and f["time_ms"] >= 0
               for f in frames), frames


def test_openai_chat_stream_carries_progress_for_a_client_that_asked(svc):
    client = openai.OpenAI(base_url=svc.url + "/v1", api_key="unused", max_retries=0)
    frames, first_output, usage = [], None, None
    stream = client.chat.completions.create(
        model=TWIN, messages=[{"role": "user", "content": long_text()}], max_tokens=2, stream=True,
        stream_options={"include_usage": True}, extra_body={"return_progress": True})
    for i, chunk in enumerate(stream):
        extra = chunk.model_extra or {}
        if extra.get("prompt_progress"):
            assert first_output is None, "progress after the reply began"
            assert chunk.choices[0].delta.role == "assistant" and not chunk.choices[0].delta.content
            frames.append(extra["prompt_progress"])
        elif chunk.choices and (chunk.choices[0].delta.content or chunk.choices[0].finish_reason):
            first_output = i if first_output is None else first_output
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None and usage.prompt_tokens > 8000
    check_progress(frames, usage.prompt_tokens)
    # not asked: not sent
    plain = client.chat.completions.create(model=TWIN, messages=[{"role": "user", "content": long_text()}],
                                           max_tokens=2, stream=True)
    assert not any((c.model_extra or {}).get("prompt_progress") for c in plain)


def test_ollama_stream_carries_progress_and_the_official_client_reads_it(svc):
    body = {"model": TWIN, "messages": [{"role": "user", "content": long_text()}], "stream": True,
            "return_progress": True, "options": {"num_predict": 2}}
    with httpx.stream("POST", svc.url + "/api/chat", json=body, timeout=None) as r:
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert r.status_code == 200
    frames = [ln["prompt_progress"] for ln in lines if "prompt_progress" in ln]
    first_progress = next(i for i, ln in enumerate(lines) if "prompt_progress" in ln)
    assert all(ln["message"]["content"] == "" and not ln["done"] for ln in lines if "prompt_progress" in ln)
    assert all("prompt_progress" not in ln for ln in lines[:first_progress]) and lines[-1]["done"]
    check_progress(frames, lines[-1]["prompt_eval_count"])
    for ln in lines:                                    # the ollama package's own type takes every line
        ollama.ChatResponse.model_validate(ln)


def test_anthropic_pings_carry_progress_and_the_official_client_reads_the_message(svc):
    """Anthropic's wire has no progress event: the progress rides on `ping` events, which the official client
    skips (so it reads the stream exactly as before) and a client that asked can read."""
    body = {"model": TWIN, "max_tokens": 2, "stream": True, "return_progress": True,
            "messages": [{"role": "user", "content": long_text()}]}
    with httpx.stream("POST", svc.url + "/v1/messages", json=body, timeout=None) as r:
        events = [(dict(b)["event"], json.loads(dict(b)["data"])) for b in sse_blocks(r.read().decode(), False)]
    assert r.status_code == 200 and events[0][0] == "message_start" and events[-1][0] == "message_stop"
    frames = [d["prompt_progress"] for name, d in events if name == "ping" and "prompt_progress" in d]
    first_block = next(i for i, (name, _) in enumerate(events) if name == "content_block_start")
    assert all(i < first_block for i, (name, d) in enumerate(events) if "prompt_progress" in d)
    usage = next(d for name, d in events if name == "message_delta")["usage"]
    check_progress(frames, usage["input_tokens"] + usage.get("cache_read_input_tokens", 0))
    client = anthropic.Anthropic(base_url=svc.url, api_key="unused", max_retries=0)
    with client.messages.stream(model=TWIN, max_tokens=2, messages=[{"role": "user", "content": long_text()}],
                                extra_body={"return_progress": True}) as s:
        message = s.get_final_message()
    assert message.usage.input_tokens > 8000 and message.stop_reason in ("max_tokens", "end_turn")


def test_the_request_log_shows_a_running_prompts_progress(svc):
    """While the prompt is read, the log's record of the request has its progress and an estimate of the time
    left (what the Server window shows); once the reply began it has none."""
    seen = []
    with httpx.Client(base_url=svc.url, timeout=None) as c, httpx.stream(
            "POST", svc.url + "/api/chat", timeout=None, json={
                "model": TWIN, "messages": [{"role": "user", "content": long_text()}], "stream": True,
                "return_progress": True, "options": {"num_predict": 2}}) as r:
        for line in r.iter_lines():
            if line and "prompt_progress" in json.loads(line):
                rec = next(d for d in c.get("/api/requests").json()["requests"] if d["path"] == "/api/chat")
                if rec["state"] == "running" and "progress" in rec:
                    seen.append(rec["progress"])
    assert seen, "the log never showed the progress"
    p = seen[-1]
    assert 0 < p["processed"] < p["total"] and p["rate"] is None or p["rate"] > 0
    assert p["eta"] is None or p["eta"] >= 0
