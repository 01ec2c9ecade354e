"""Context that fits the work, through the official `openai`, `anthropic` and `ollama` clients on live servers with
SmolLM2 (training context 8192): a conversation that grows past the loaded context gets each dialect's answer
(OpenAI's context_length_exceeded, Anthropic's "prompt is too long", Ollama's oldest-messages-dropped rule with
the system and last message kept, `truncate: false` refused), and a larger context when memory allows; a prompt
that fits is served whatever max_tokens asks, its reply capped by the room left.

Two servers, contexts kept small (STRATA_NUM_CTX 256, one slot): `tight` plans on a simulated machine whose RAM
holds SmolLM2 at 256 tokens but not at 512 (about 181 MiB against 238 MiB planned), so the context cannot grow;
`roomy` plans on this machine, so it can."""
from __future__ import annotations

import json
import re

import anthropic
import httpx
import ollama
import openai
import pytest

from service_util import wait_for

MODEL = "smollm2:135m"
CTX = 256
TINY = {"num_predict": 2, "temperature": 0, "seed": 1}


def _start(live_service, home, **config):
    return live_service(n_threads=1, num_ctx=CTX, num_parallel=1, keep_alive="10m", prompt_cache_mib=0,
                        gpu_margin_mib=0, **config, home=home)


@pytest.fixture(scope="module")
def tight(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("ctx-tight")
    devices = home / "devices.json"
    devices.write_text(json.dumps({"devices": [], "host_ram_total": "1 GiB", "host_ram_available": "200 MiB",
                                   "cpu_cores": 2}))
    svc = _start(live_service, home, devices_json=str(devices))
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def roomy(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("ctx-roomy")
    svc = _start(live_service, home)
    yield svc
    svc.stop()


def _turn(i: int) -> str:
    return f"Turn {i}: tell me one more fact about the river number {i} and its long winding valley."


def _ps(url: str) -> dict:
    return {m["name"]: m for m in httpx.get(url + "/api/ps", timeout=60).json()["models"]}


def _count(url: str, system: str, messages: list[dict]) -> int:
    """The prompt's tokens as the runner renders it (Anthropic's count_tokens: same template, same SYSTEM)."""
    r = httpx.post(url + "/v1/messages/count_tokens", timeout=120,
                   json={"model": MODEL, "system": system, "messages": messages})
    assert r.status_code == 200, r.text
    return r.json()["input_tokens"]


def test_default_context_is_the_bound_and_says_why(tight, roomy):
    for svc in (tight, roomy):
        show = httpx.post(svc.url + "/api/show", json={"model": MODEL}, timeout=60).json()
        ctx = show["strata"]["context"]
        assert ctx["num_ctx"] == CTX and ctx["limit"] == "setting" and "STRATA_NUM_CTX" in ctx["reason"]


def test_openai_conversation_past_the_context_is_a_400_with_counts(tight):
    ai = openai.OpenAI(base_url=tight.url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "system", "content": "You are brief."}]
    refused = None
    for i in range(40):
        messages.append({"role": "user", "content": _turn(i)})
        try:
            r = ai.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=2, temperature=0)
        except openai.BadRequestError as e:
            refused = e
            break
        messages.append({"role": "assistant", "content": r.choices[0].message.content or "ok"})
    assert refused is not None, "the conversation never outgrew the context"
    err = refused.body if isinstance(refused.body, dict) and "code" in refused.body else refused.body.get("error")
    assert err["code"] == "context_length_exceeded" and err["type"] == "invalid_request_error"
    m = re.search(r"maximum context length is (\d+) tokens. However, your messages resulted in (\d+) tokens",
                  err["message"])
    assert m, err["message"]
    limit, prompt = map(int, m.groups())
    assert limit == CTX and prompt >= limit                         # refused for the prompt alone, not max_tokens
    system = messages[0]["content"]
    assert prompt == _count(tight.url, system, messages[1:])      # the real token count of what was sent
    assert _ps(tight.url)[MODEL]["context_length"] == CTX           # no memory to grow into: not reloaded


def test_anthropic_conversation_past_the_context_is_prompt_too_long(tight):
    ac = anthropic.Anthropic(base_url=tight.url, api_key="unused", max_retries=0)
    messages = []
    refused = None
    for i in range(40):
        messages.append({"role": "user", "content": _turn(i)})
        try:
            r = ac.messages.create(model=MODEL, system="You are brief.", messages=messages, max_tokens=8)
        except anthropic.BadRequestError as e:
            refused = e
            break
        messages.append({"role": "assistant", "content": (r.content[0].text if r.content else "") or "ok"})
    assert refused is not None
    err = refused.body["error"]
    assert err["type"] == "invalid_request_error"
    m = re.fullmatch(r"prompt is too long: (\d+) tokens > (\d+) maximum", err["message"])
    assert m, err["message"]
    n, maximum = map(int, m.groups())
    assert maximum == CTX - 1 and n > maximum                      # room for one token: max_tokens claims none
    assert n == _count(tight.url, "You are brief.", messages)


def test_ollama_chat_drops_the_oldest_messages_and_says_so(tight):
    oc = ollama.Client(host=tight.url)
    system = "You are brief."
    messages = [{"role": "system", "content": system}]
    dropped_seen = False
    for i in range(30):
        messages.append({"role": "user", "content": _turn(i)})
        body = {"model": MODEL, "messages": messages, "stream": False, "options": TINY}
        r = httpx.post(tight.url + "/api/chat", json=body, timeout=120)
        assert r.status_code == 200, r.text
        dropped = int(r.headers.get("X-Strata-Dropped-Messages", "0"))
        n_prompt = r.json()["prompt_eval_count"]
        assert n_prompt < CTX
        if dropped:
            dropped_seen = True
            # exactly the system message and the newest messages after the `dropped` oldest: nothing cut inside
            assert n_prompt == _count(tight.url, system, messages[1 + dropped:])
            one_more = _count(tight.url, system, messages[dropped:])      # the newest message that was dropped
            assert one_more + TINY["num_predict"] > CTX                     # ... would not have fitted
            break
        messages.append({"role": "assistant", "content": r.json()["message"]["content"] or "ok"})
    assert dropped_seen, "the conversation never outgrew the context"
    # the official client gets the same fitted answer, streamed too
    parts = list(oc.chat(model=MODEL, messages=messages, options=TINY, stream=True))
    assert parts[-1].done and parts[-1].prompt_eval_count < CTX
    # truncate: false refuses instead of dropping
    r = httpx.post(tight.url + "/api/chat", timeout=120,
                   json={"model": MODEL, "messages": messages, "stream": False, "options": TINY, "truncate": False})
    assert r.status_code == 400 and "tokens" in r.json()["error"] and f"context of {CTX}" in r.json()["error"]


def test_ollama_num_predict_past_the_context_is_a_cap_not_a_claim(tight):
    """Ollama's num_predict caps the reply; it claims no context (a reply that reaches the end shifts it), so a
    short chat with num_predict far beyond the context is answered whole: nothing dropped, nothing refused (the
    desktop chat sends num_predict 4000 with a 2048 context)."""
    oc = ollama.Client(host=tight.url)
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": _turn(1)}]
    r = httpx.post(tight.url + "/api/chat", timeout=120, json={
        "model": MODEL, "messages": messages, "stream": False,
        "options": {"num_predict": 4 * CTX, "temperature": 0, "seed": 1, "stop": ["."]}})
    assert r.status_code == 200, r.text
    assert r.headers.get("X-Strata-Dropped-Messages", "0") == "0"
    assert r.json()["prompt_eval_count"] == _count(tight.url, "You are brief.", messages[1:])
    parts = list(oc.chat(model=MODEL, messages=messages, stream=True,
                         options={"num_predict": 4 * CTX, "temperature": 0, "seed": 1, "stop": ["."]}))
    assert parts[-1].done and parts[-1].eval_count >= 1


def _near_full(url: str) -> tuple[list[dict], int]:
    """A chat whose prompt leaves a few tokens of the context (and its token count)."""
    for i in range(40):
        messages = [{"role": "user", "content": " ".join(_turn(j) for j in range(i + 1))}]
        n = _count(url, "You are brief.", messages)
        if n > CTX - 40:
            return messages, n
    raise AssertionError("no prompt came near the context")


def test_max_tokens_past_the_room_left_is_served_and_capped(tight):
    """As llama-server (and what agents need: Claude Code sends max_tokens 32000, OpenCode 4096+): a prompt that
    fits is served whatever max_tokens says; the reply ends when the context is full, with OpenAI's "length",
    Anthropic's "max_tokens" and Ollama's "length" (truncate: false, shift: false), prompt + reply = the context,
    and the room it had in X-Strata-Reply-Room."""
    messages, n = _near_full(tight.url)
    room = CTX - n
    forever = {"ignore_eos": True, "temperature": 0, "seed": 1}
    ai = openai.OpenAI(base_url=tight.url + "/v1", api_key="unused", max_retries=0)
    raw = ai.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "system", "content": "You are brief."}] + messages, max_tokens=32000,
        extra_body={"options": forever})
    r = raw.parse()
    assert r.choices[0].finish_reason == "length" and raw.headers["X-Strata-Reply-Room"] == str(room)
    assert r.usage.prompt_tokens == n and r.usage.completion_tokens == room
    chunks = list(ai.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": "You are brief."}] + messages, max_tokens=32000,
        stream=True, stream_options={"include_usage": True}, extra_body={"options": forever}))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == room
    ac = anthropic.Anthropic(base_url=tight.url, api_key="unused", max_retries=0)
    with ac.messages.stream(model=MODEL, system="You are brief.", messages=messages, max_tokens=32000,
                            extra_body={"options": forever}) as stream:     # the SDK streams a max_tokens this big
        m = stream.get_final_message()
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == room
    r = httpx.post(tight.url + "/api/chat", timeout=120, json={
        "model": MODEL, "stream": False, "truncate": False, "shift": False, "options": {**forever, "num_predict": 4000},
        "messages": [{"role": "system", "content": "You are brief."}] + messages})
    assert r.status_code == 200, r.text
    assert r.json()["done_reason"] == "length" and r.json()["eval_count"] == room


def test_ollama_chat_last_message_alone_too_long_is_refused(tight):
    oc = ollama.Client(host=tight.url)
    huge = " ".join(_turn(i) for i in range(20))
    with pytest.raises(ollama.ResponseError) as e:
        oc.chat(model=MODEL, messages=[{"role": "system", "content": "Brief."}, {"role": "user", "content": huge}],
                options=TINY)
    assert e.value.status_code == 400 and "last message" in str(e.value)


def test_ollama_raw_generate_keeps_the_token_rule_and_reports_it(tight):
    prompt = " ".join(_turn(i) for i in range(20))
    r = httpx.post(tight.url + "/api/generate", timeout=120,
                   json={"model": MODEL, "prompt": prompt, "raw": True, "stream": False, "options": TINY})
    assert r.status_code == 200, r.text
    cut = int(r.headers["X-Strata-Truncated-Tokens"])
    assert cut > 0 and r.json()["prompt_eval_count"] < CTX
    r = httpx.post(tight.url + "/api/generate", timeout=120,
                   json={"model": MODEL, "prompt": prompt, "raw": True, "stream": False, "options": TINY,
                         "truncate": False})
    assert r.status_code == 400 and f"context of {CTX}" in r.json()["error"]


def test_conversation_grows_the_context_when_memory_allows(roomy):
    ai = openai.OpenAI(base_url=roomy.url + "/v1", api_key="unused", max_retries=0)
    long_prompt = " ".join(_turn(i) for i in range(12))          # ~300 tokens: more than 256
    events = []
    with httpx.stream("GET", roomy.url + "/api/events", timeout=120) as stream:
        r = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_prompt}],
                                       max_completion_tokens=2, temperature=0)
        assert r.usage.prompt_tokens > CTX
        for line in stream.iter_lines():
            if line.startswith("event:"):
                events.append(line.split(":", 1)[1].strip())
            if "context_grow" in events and events.count("loaded") >= 1 and events[-1] == "loaded":
                break
    assert "context_grow" in events
    m = _ps(roomy.url)[MODEL]
    assert m["context_length"] >= 512 and m["context_length"] % 256 == 0
    assert m["strata"]["context"]["limit"] == "request" and "grown from 256" in m["strata"]["context"]["reason"]


def test_a_model_loaded_small_by_one_client_grows_for_the_next_one(roomy):
    """One client loads the model with num_ctx 256; the next asks for nothing, sends a longer prompt and an agent's
    max_tokens (32000, far past the training context): served, the model grown (up to its training context), not
    refused for the small context the first client chose nor for max_tokens."""
    r = httpx.post(roomy.url + "/api/chat", timeout=120, json={
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": False,
        "options": {**TINY, "num_ctx": 256}})
    assert r.status_code == 200, r.text
    assert _ps(roomy.url)[MODEL]["context_length"] == 256
    ai = openai.OpenAI(base_url=roomy.url + "/v1", api_key="unused", max_retries=0)
    long_prompt = " ".join(_turn(i) for i in range(12))          # ~300 tokens: more than 256
    r = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": long_prompt}],
                                   max_tokens=32000, temperature=0, stop=[".", "\n"])
    assert r.usage.prompt_tokens > 256 and r.choices[0].finish_reason == "stop"
    m = _ps(roomy.url)[MODEL]
    assert m["context_length"] > r.usage.prompt_tokens and "grown from 256" in m["strata"]["context"]["reason"]


def test_v1_endpoints_take_ollama_options_and_num_ctx(roomy):
    ai = openai.OpenAI(base_url=roomy.url + "/v1", api_key="unused", max_retries=0)
    ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_completion_tokens=1,
                               extra_body={"options": {"num_ctx": 768}})
    wait_for(lambda: _ps(roomy.url)[MODEL]["context_length"] == 768, 60, "num_ctx from options")
    ai.completions.create(model=MODEL, prompt="Hi", max_tokens=1, extra_body={"num_ctx": 512})
    m = _ps(roomy.url)[MODEL]
    assert m["context_length"] == 512 and m["strata"]["context"]["limit"] == "request"
