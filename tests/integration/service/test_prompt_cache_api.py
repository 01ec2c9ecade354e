"""The prompt cache seen from the APIs, with the official clients against a live server (SmolLM2, CPU): the next
turn of a conversation reports its cached prompt tokens (OpenAI `usage.prompt_tokens_details.cached_tokens`)
while the prompt counts stay whole, and Anthropic `usage.cache_read_input_tokens` beside the rest (`input_tokens`); /api/generate's `context` continues from the cache; /api/ps and /metrics show
the cache as its own memory kind and count its hits."""
from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest


MODEL = "smollm2:135m"
USER = "Name three things you can find in a kitchen, and say why a cook needs each of them. Be brief."


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    return live_service(n_threads=1, num_ctx=1024, num_parallel=2, keep_alive="10m", prompt_cache_mib=32)


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_openai_chat_reports_cached_tokens_and_the_whole_prompt(ai):
    msgs = [{"role": "user", "content": USER}]
    r1 = ai.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
    msgs += [{"role": "assistant", "content": r1.choices[0].message.content},
             {"role": "user", "content": "Now name one more."}]
    stream = ai.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0, stream=True,
                                        stream_options={"include_usage": True})
    usage = [c.usage for c in stream if c.usage][-1]
    assert usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens
    assert usage.prompt_tokens > usage.prompt_tokens_details.cached_tokens    # the whole prompt is counted


def test_anthropic_reports_prompt_cache_reads(server):
    """The next turn of a conversation through the official `anthropic` client, whole and streamed: the earlier
    turn's prompt comes from the cache (`cache_read_input_tokens`), `input_tokens` is the rest, and the two add
    up to the whole prompt as count_tokens counts it (Anthropic's and llama-server's split)."""
    ac = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    msgs = [{"role": "user", "content": "Name three birds that cannot fly. Be brief."}]
    m1 = ac.messages.create(model=MODEL, max_tokens=16, messages=msgs, extra_body={"temperature": 0})
    first = m1.usage.input_tokens + m1.usage.cache_read_input_tokens
    assert first == ac.messages.count_tokens(model=MODEL, messages=msgs).input_tokens
    msgs += [{"role": "assistant", "content": m1.content[0].text}, {"role": "user", "content": "One more."}]
    whole = ac.messages.count_tokens(model=MODEL, messages=msgs).input_tokens
    m2 = ac.messages.create(model=MODEL, max_tokens=4, messages=msgs, extra_body={"temperature": 0})
    assert m2.usage.cache_read_input_tokens >= first, m2.usage            # the first turn's prompt, from the cache
    assert m2.usage.input_tokens > 0 and m2.usage.input_tokens + m2.usage.cache_read_input_tokens == whole
    assert m2.usage.cache_creation_input_tokens == 0
    with ac.messages.stream(model=MODEL, max_tokens=4, messages=msgs, extra_body={"temperature": 0}) as s:
        final = s.get_final_message()
    assert final.usage.cache_read_input_tokens >= first, final.usage
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == whole and final.usage.output_tokens > 0


def test_openai_completions_reuse_a_prefix(ai):
    prompt = "A list of fruits that are red: strawberry, cherry,"
    ai.completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
    r = ai.completions.create(model=MODEL, prompt=prompt + " and", max_tokens=4, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens > 0
    assert r.usage.prompt_tokens > r.usage.prompt_tokens_details.cached_tokens


def test_ollama_generate_context_and_chat(server):
    oc = ollama.Client(host=server.url)
    r1 = oc.generate(model=MODEL, prompt="My name is Ada.", options={"num_predict": 8, "temperature": 0})
    assert r1.context
    r2 = oc.generate(model=MODEL, prompt="What is my name?", context=r1.context,
                     options={"num_predict": 8, "temperature": 0})
    assert r2.prompt_eval_count > len(r1.context)          # context + the new prompt, all counted
    raw = oc.generate(model=MODEL, prompt="Once upon a time", raw=True, options={"num_predict": 4, "temperature": 0})
    assert raw.done
    msgs = [{"role": "user", "content": USER}]
    c1 = oc.chat(model=MODEL, messages=msgs, options={"num_predict": 8, "temperature": 0})
    c2 = oc.chat(model=MODEL, messages=msgs + [c1.message, {"role": "user", "content": "And a fourth?"}],
                 options={"num_predict": 8, "temperature": 0})
    assert c2.prompt_eval_count > c1.prompt_eval_count
    with httpx.Client(base_url=server.url, timeout=60) as c:
        bad = c.post("/api/generate", json={"model": MODEL, "prompt": "x", "context": [-5], "stream": False})
        assert bad.status_code == 400 and "context" in bad.json()["error"], bad.text
        # what the desktop chat reads (/api/chat's final object) and shows under the reply
        body = {"model": MODEL, "stream": False, "options": {"num_predict": 4, "temperature": 0},
                "messages": msgs + [c1.message.model_dump(exclude_none=True), {"role": "user", "content": "A fifth?"}]}
        final = c.post("/api/chat", json=body).json()
    assert 0 < final["prompt_cached_count"] < final["prompt_eval_count"]
    from app.gui.chat.chat_view import format_stats
    from app.gui.chat.reply import chat_stats

    line = format_stats(chat_stats(final, 50.0, 4, 1.0))
    assert f"{final['prompt_cached_count']} of {final['prompt_eval_count']} prompt tokens cached" in line


def test_ps_and_metrics_show_the_cache(server, ai):
    ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": USER}], max_tokens=2)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        m = next(m for m in c.get("/api/ps").json()["models"] if m["name"] == MODEL)
        pc = m["strata"]["prompt_cache"]
        assert pc["limit"] == 32 << 20 and 0 <= pc["bytes"] <= pc["limit"] and pc["entries"] >= 0
        text = c.get("/metrics").text
    hits = [ln for ln in text.splitlines() if ln.startswith(f'strata_prompt_cache_hit_tokens_total{{model="{MODEL}"}}')]
    assert hits and int(hits[0].split()[-1]) > 0
    assert f'strata_prompt_cache_limit_bytes{{model="{MODEL}"}} {32 << 20}' in text
    assert f'strata_prompt_cache_bytes{{model="{MODEL}"}}' in text
