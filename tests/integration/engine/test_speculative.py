"""Speculative decoding in a real runner (llama.cpp, CPU, 1 thread): prompt-lookup drafts verified in the batch
give exactly the reply decoding without them gives (greedy, and sampled with a fixed seed), with grammars, stop
strings, logprobs, several sequences at once and a cancel mid-draft; rejected draft cells leave KV, so a follow-up
that reuses the slot is exact too. The runner runs with STRATA_SPECULATIVE=on (every guess drafted whole),
so drafts are verified whatever this machine's step costs are; `speculate=False` is the reference."""
from __future__ import annotations

import asyncio
import json
import os

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.runner_settings import RunnerSettings
from engine_util import LOGPROB_NOISE, assert_greedy_agrees, cancel_stream, collect, cpu_layout, greedy, request_id, run

# One sequence's token decoded in a draft's verify batch and in its own one-row step: within 1e-3 in its logprob
# on SmolLM2 (and far less on the f32 random models); where sequences share batches, LOGPROB_NOISE.
VERIFY_NOISE = 1e-3

CODE = '''def add_numbers(a, b):
    """Return the sum of a and b."""
    return a + b


def multiply_numbers(a, b):
    """Return the product of a and b."""
    return a * b


def main():
    print(add_numbers(2, 3))
    print(multiply_numbers(4, 5))
'''
EDIT = [{"role": "user", "content": "Rename the function add_numbers to sum_two in this code and print the whole "
                                    "code:\n\n" + CODE}]
STORY = [{"role": "user", "content": "Write a short story about a cat who learns to swim."}]
LIST = "Count: one, two, three, four, five, six, seven, eight, nine, ten. Again: one, two, three,"


def rid():
    return request_id("sp")


def req(spec: bool, **kw) -> P.GenerateRequest:
    kw.setdefault("sampling", greedy())
    kw.setdefault("num_predict", 60)
    kw.setdefault("logprobs", True)
    kw.setdefault("top_logprobs", 5)
    return P.GenerateRequest(id=rid(), speculate=spec, cache_prompt=False, **kw)


def both(loop, client, **kw):
    """(with speculation, without): text, DoneEvent and logprobs of each; cold runs (no cached prompt) so the
    two decode their prompts in the same batch shapes."""
    return run(loop, collect(client, req(True, **kw))), run(loop, collect(client, req(False, **kw)))


def assert_same(spec, plain, noise: float = VERIFY_NOISE):
    """The reply with drafts is the one without. Drafts are verified in batches of several rows, which llama.cpp
    rounds differently from one-row steps, so a greedy reply agrees token for token (logprobs within `noise`) up
    to a near-tie (assert_greedy_agrees), and where none came, in its text and its end too."""
    (t1, d1, lp1), (t2, d2, lp2) = spec, plain
    if assert_greedy_agrees(lp2, lp1, noise) == len(lp2):
        assert t1 == t2
        assert (d1.reason, d1.completion_tokens, d1.stop_string) == (d2.reason, d2.completion_tokens, d2.stop_string)


def assert_same_sampled(spec, plain):
    """A sampled reply with a seed: each token is drawn by the sequence's own chain with the same random numbers,
    so the replies are equal (a draw would have to fall within rounding noise of a boundary to differ)."""
    (t1, d1, _), (t2, d2, _) = spec, plain
    assert t1 == t2
    assert (d1.reason, d1.completion_tokens, d1.stop_string) == (d2.reason, d2.completion_tokens, d2.stop_string)


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def start(loop, path, **layout):
    c = RunnerClient(cpu_layout(path, **layout), n_threads=1, model_name="spec",
                     settings=RunnerSettings(speculative="on"))
    run(loop, c.start())
    return c


@pytest.fixture(scope="module")
def runner(loop, smollm2_path):
    c = start(loop, smollm2_path, num_ctx=1024, num_parallel=3)
    yield c
    run(loop, c.close())


# ---- exactness --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    {"messages": EDIT, "num_predict": 90},
    {"messages": STORY},
    {"prompt": LIST, "raw": True, "num_predict": 40},
], ids=["edit", "free-text", "completion"])
def test_greedy_reply_is_the_same_with_and_without_drafts(loop, runner, kw):
    spec, plain = both(loop, runner, **kw)
    # the logprobs of each token are the model's, whether the token came from a draft's row or its own step
    assert_same(spec, plain)
    assert plain[1].draft_tokens == 0
    d = spec[1]
    assert 0 <= d.draft_accepted <= d.draft_tokens
    if kw.get("raw") or kw["messages"] is EDIT:      # repeating text: drafts were made and some accepted
        assert d.draft_accepted > 0


def test_rejected_drafts_leave_kv_and_a_follow_up_is_exact(loop, runner):
    """Drafts that were rejected (draft_tokens > draft_accepted) wrote cells past the reply; had they stayed, the
    reply's later tokens would attend to them. The follow-up continues from the slot's cells (`context`) and must
    match the same prompt decoded cold."""
    text, done, _ = run(loop, collect(runner, P.GenerateRequest(id=rid(), prompt=LIST, raw=True, sampling=greedy(),
                                                                num_predict=40)))
    assert done.draft_tokens > done.draft_accepted
    follow = {"prompt": " And backwards: ten, nine,", "raw": True, "context": done.context_tokens, "num_predict": 30,
              "logprobs": True, "top_logprobs": 5}
    warm = run(loop, collect(runner, P.GenerateRequest(id=rid(), sampling=greedy(), **follow)))
    assert warm[1].cached_tokens > 0
    cold = run(loop, collect(runner, req(False, **follow)))
    assert_same(warm, cold, LOGPROB_NOISE)          # the cached cells were computed in other shapes than cold ones


def test_sampled_reply_with_a_seed_is_the_same(loop, runner):
    """Temperature 0.8, penalties on: every token is sampled by the sequence's own chain at its own row (the same
    random draws in the same order), so the reply is the one decoding without drafts gives."""
    s = P.SamplingParams(temperature=0.8, top_k=40, top_p=0.9, repeat_penalty=1.1, seed=1234)
    spec, plain = both(loop, runner, messages=EDIT, sampling=s, num_predict=60)
    assert_same_sampled(spec, plain)


def test_grammar_reply_under_speculation(loop, runner):
    msgs = [{"role": "user", "content": "Give a JSON object with keys a, b, c, d, e whose values are 1, 2, 3, 4, 5."}]
    spec, plain = both(loop, runner, messages=msgs, json_mode=True, num_predict=60)
    assert_same(spec, plain)
    if spec[1].reason == "stop":
        json.loads(spec[0])


def test_stop_string_ends_the_reply_as_without_drafts(loop, runner):
    spec, plain = both(loop, runner, prompt=LIST, raw=True, stop=[" seven"], num_predict=40)
    assert_same(spec, plain)
    assert spec[1].stop_string == " seven" and "seven" not in spec[0]


def test_several_sequences_verify_drafts_in_one_batch(loop, runner):
    """Three sequences at once, with drafts and without. Their rows share batches whose size differs between the
    two runs, and llama.cpp's CPU kernels round differently per batch size, so a greedy pick at a near-tie may
    flip: the replies must agree token for token up to a first difference, where the two tokens were within
    float noise of each other in the run without drafts (assert_greedy_agrees)."""
    kws = [{"messages": EDIT, "num_predict": 60}, {"prompt": LIST, "raw": True, "num_predict": 40},
           {"messages": STORY, "num_predict": 40}]

    async def together(spec):
        return await asyncio.gather(*(collect(runner, req(spec, logprobs=True, top_logprobs=5, **kw))
                                      for kw in kws))

    spec, plain = run(loop, together(True)), run(loop, together(False))
    for s, p in zip(spec, plain):
        assert_same(s, p, LOGPROB_NOISE)
    assert sum(s[1].draft_accepted for s in spec) > 0
    stats = run(loop, runner.stats())
    assert stats.draft_tokens >= stats.draft_accepted > 0


def test_cancel_mid_draft_then_an_exact_reply(loop, runner):
    async def cancel_after_tokens():
        agen = runner.generate(P.GenerateRequest(id=rid(), messages=EDIT, sampling=greedy(), num_predict=200))
        n = 0
        while n < 12:
            task = asyncio.ensure_future(agen.__anext__())
            ev = await task
            n += getattr(ev, "n_tokens", 0)
            if isinstance(ev, P.DoneEvent):
                return
        await cancel_stream(agen, asyncio.ensure_future(agen.__anext__()))

    run(loop, cancel_after_tokens())
    spec, plain = both(loop, runner, messages=EDIT, num_predict=50)
    assert_same(spec, plain)


def test_synthetic_model_greedy_identity(loop, dense_gguf):
    """Random weights (the text is noise, and greedy noise loops, which drafts catch)."""
    c = start(loop, dense_gguf, num_ctx=512, num_parallel=2, n_layer=3)
    try:
        total = 0
        for prompt in ("one two three four five", "the cat sat on the mat and the dog"):
            spec, plain = both(loop, c, prompt=prompt, raw=True, num_predict=48)
            assert_same(spec, plain)
            total += spec[1].draft_tokens
        assert total > 0
    finally:
        run(loop, c.close())


# ---- the prompt's views (speculation/prompt_views.py) ------------------------------------------------------
CONFIG = {"service": {"name": "notes", "port": 8080, "workers": 4, "debug": False},
          "database": {"url": "sqlite:///notes.db", "pool": {"min": 1, "max": 8}, "timeout_s": 30},
          "features": {"search": True, "export": False}, "limits": {"upload_mb": 25, "notes_per_user": 5000}}
REFORMAT = [{"role": "user", "content": "Reformat this JSON document with 2-space indentation, keeping the keys in "
                                        "the same order. Print only the JSON:\n\n"
                                        + json.dumps(CONFIG, separators=(",", ":"))}]


def test_a_json_document_and_a_file_written_as_a_json_string_are_exact_with_their_views(loop, runner):
    """The drafter also copies the prompt's views (a document indented, the text as a JSON string): the replies
    are the model's own all the same. Their drafts run long, so their rows are verified in batches of dozens, whose
    kernels round otherwise than a one-row step's (a token's logprob 0.012 apart on SmolLM2): LOGPROB_NOISE."""
    escaped = {"prompt": "The file:\n" + CODE + '\nThe same file as a JSON string:\n{"content": "'
               + json.dumps(CODE)[1:40], "raw": True, "num_predict": 60}
    for kw in ({"messages": REFORMAT, "num_predict": 80}, escaped):
        spec, plain = both(loop, runner, **kw)
        assert_same(spec, plain, LOGPROB_NOISE)
        assert spec[1].draft_tokens > 0


def test_a_reformatted_json_document_is_drafted_from_its_indented_view(loop, qwen_coder_path):
    """Qwen2.5-Coder reformats a compact document as json.dumps(indent=2) writes it: most of its reply comes from
    drafts of that view (without it every line's whitespace differs from the prompt's), and the reply is the one
    decoding without drafts gives."""
    c = start(loop, qwen_coder_path, num_ctx=2048, num_parallel=1)
    try:
        spec, plain = both(loop, c, messages=REFORMAT, num_predict=300, logprobs=False, top_logprobs=0)
    finally:
        run(loop, c.close())
    assert spec[0] == plain[0]
    assert json.dumps(CONFIG, indent=2) in spec[0]
    d = spec[1]
    assert d.draft_accepted >= d.completion_tokens // 2, d


# ---- the counts in every dialect ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    from app.service.config import ServiceConfig

    saved = os.environ.get("STRATA_SPECULATIVE")
    os.environ["STRATA_SPECULATIVE"] = "on"          # read once by the config, which passes it to every runner
    try:
        cfg = ServiceConfig.from_env(port=0, n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m")
    finally:
        if saved is None:
            os.environ.pop("STRATA_SPECULATIVE", None)
        else:
            os.environ["STRATA_SPECULATIVE"] = saved
    assert cfg.runner.speculative == "on"
    return live_service(cfg)


def test_draft_counts_in_ollama_openai_metrics_and_the_chat_line(server):
    import httpx
    import openai

    from app.gui.chat.chat_view import format_stats
    from app.gui.chat.reply import chat_stats

    model = "smollm2:135m"
    with httpx.Client(base_url=server.url, timeout=120) as c:
        final = c.post("/api/generate", json={"model": model, "prompt": LIST, "raw": True, "stream": False,
                                              "options": {"temperature": 0, "num_predict": 30}}).json()
        assert 0 < final["draft_accepted_count"] <= final["draft_count"], final
        line = format_stats(chat_stats(final, 50.0, 30, 1.0))
        assert f"of {final['draft_count']} drafted tokens accepted" in line
        ai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        r = ai.completions.create(model=model, prompt=LIST, max_tokens=30, temperature=0)
        t = r.model_extra["timings"]                 # llama-server's shape
        assert 0 < t["draft_n_accepted"] <= t["draft_n"] and t["predicted_n"] == r.usage.completion_tokens
        chunks = list(ai.chat.completions.create(model=model, messages=EDIT, max_tokens=40, temperature=0,
                                                 stream=True))
        assert "timings" in (chunks[-1].model_extra or {})
        metrics = c.get("/metrics").text
    drafted = [ln for ln in metrics.splitlines() if ln.startswith("strata_speculative_tokens_total")]
    assert any('kind="accepted"' in ln for ln in drafted) and any('kind="drafted"' in ln for ln in drafted)


def test_a_recurrent_model_never_drafts(loop, tmp_path):
    """Its state cannot drop rejected tokens by position: speculation stays off even when asked for ("on"), and
    the model still answers (SWA models, whose cells can be dropped, do draft: the edit test's SmolLM2 path)."""
    from gguf_families import write_mamba

    path = write_mamba(tmp_path / "mamba.gguf", n_layer=2)
    c = start(loop, path, num_ctx=512, num_parallel=1, n_batch=64, n_layer=2)
    try:
        text, done, _ = run(loop, collect(c, req(True, prompt="one two three one two three one two", raw=True,
                                                 num_predict=24)))
        assert done.completion_tokens == 24 and done.draft_tokens == 0
        assert run(loop, c.stats()).draft_tokens == 0
    finally:
        run(loop, c.close())
