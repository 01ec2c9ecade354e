"""Tools, fill-in-the-middle and built-in templates in a real runner process (SmolLM2 and synthetic GGUFs).

SmolLM2's template knows no tools, so `tool_choice` required is the case where only the grammar makes a call
happen: the reply must be a call whose arguments match the schema, read by the service's own parser."""
from __future__ import annotations

import asyncio
import itertools

import pytest

from app.engine import protocol as P
from app.engine.chat.plan import plan_chat
from app.engine.client import RequestError, RunnerClient
from app.engine.gguf.builtin_templates import CHATML
from app.engine.runner.prompt.chat_template import render_chat
from app.service.generation.toolcalls import parse_all
from engine_util import cpu_layout
from gguf_variants import write_llama

_ids = itertools.count()
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city", "days"]}}}


def greedy(**kw) -> P.SamplingParams:
    return P.SamplingParams(temperature=0.0, repeat_penalty=1.0, **kw)


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def start(loop, path, **kw):
    c = RunnerClient(cpu_layout(path, num_ctx=1024, num_parallel=2, n_batch=256, **kw), n_threads=1, model_name="t")
    loop.run_until_complete(c.start())
    return c


@pytest.fixture(scope="module")
def smol(loop, smollm2_path):
    c = start(loop, smollm2_path)
    yield c
    loop.run_until_complete(c.close())


async def collect(client, req):
    events = [ev async for ev in client.generate(req)]
    return "".join(e.text for e in events if isinstance(e, P.TokenEvent)), events[-1]


def run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, 180))


@pytest.mark.parametrize("seed", [1, 2])
def test_tool_choice_required_forces_a_valid_call(loop, smol, seed):
    req = P.GenerateRequest(id=f"t{next(_ids)}", messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                            tools=[WEATHER], plan=plan_chat("generic", [WEATHER], "required", False),
                            sampling=P.SamplingParams(temperature=0.7, seed=seed), num_predict=200)
    text, done = run(loop, collect(smol, req))
    d = parse_all("generic", text, ["get_weather"])
    assert len(d.calls) == 1, text
    call = d.calls[0]
    assert call.name == "get_weather" and isinstance(call.arguments["city"], str)
    assert isinstance(call.arguments["days"], int) and d.content == ""


def test_named_tool_choice_and_bad_name(loop, smol):
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    req = P.GenerateRequest(id=f"t{next(_ids)}", messages=[{"role": "user", "content": "Weather?"}],
                            tools=[WEATHER, other], plan=plan_chat("generic", [WEATHER, other], "get_time"), sampling=greedy(), num_predict=100)
    text, _ = run(loop, collect(smol, req))
    assert [c.name for c in parse_all("generic", text, ["get_weather", "get_time"]).calls] == ["get_time"]
    bad = P.GenerateRequest(id=f"t{next(_ids)}", messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
                            plan=plan_chat("generic", [WEATHER], "nope"), sampling=greedy(), num_predict=5)
    with pytest.raises(RequestError, match="not among the tools"):
        run(loop, collect(smol, bad))


def test_stop_string_is_reported(loop, smol):
    req = P.GenerateRequest(id=f"t{next(_ids)}", prompt="1, 2, 3, 4, 5,", raw=True, stop=[" 7"],
                            sampling=greedy(), num_predict=30)
    text, done = run(loop, collect(smol, req))
    assert done.reason == "stop" and done.stop_string == " 7" and " 7" not in text


def test_count_prompt_includes_the_template(loop, smol):
    msgs = [{"role": "user", "content": "Hello there"}]
    n = run(loop, smol.count_prompt(P.GenerateRequest(id="c", messages=msgs)))
    raw = run(loop, smol.tokenize("Hello there", add_special=False))
    assert n > len(raw) + 4                   # the template's system prompt and turn markers count too


def test_fill_in_the_middle(loop, tmp_path):
    c = start(loop, write_llama(tmp_path / "fim.gguf", fim=True, n_layer=2), n_layer=2)
    try:
        req = P.GenerateRequest(id="f", prompt="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n",
                                sampling=greedy(), num_predict=4)
        text, done = run(loop, collect(c, req))
        pre = run(loop, c.tokenize("def add(a, b):\n    return ", add_special=False))
        suf = run(loop, c.tokenize("\n\nprint(add(1, 2))\n", add_special=False))
        assert done.prompt_tokens == len(pre) + len(suf) + 3     # <fim_pre> prefix <fim_suf> suffix <fim_mid>
        assert done.completion_tokens == 4
    finally:
        run(loop, c.close())


def test_no_fim_tokens_is_a_clear_error(loop, smol):
    req = P.GenerateRequest(id=f"t{next(_ids)}", prompt="a", suffix="b", sampling=greedy(), num_predict=2)
    with pytest.raises(RequestError, match="fill-in-the-middle"):
        run(loop, collect(smol, req))


def test_template_less_model_uses_the_builtin_template(loop, tmp_path):
    c = start(loop, write_llama(tmp_path / "notpl.gguf", template=None, n_layer=2), n_layer=2)
    try:
        msgs = [{"role": "user", "content": "Hi"}]
        n = run(loop, c.count_prompt(P.GenerateRequest(id="c", messages=msgs)))
        want = run(loop, c.tokenize(render_chat(CHATML, msgs), add_special=True))
        assert n == len(want)
        req = P.GenerateRequest(id="g", messages=msgs, sampling=greedy(), num_predict=8)
        text, _ = run(loop, collect(c, req))
        assert "<|im_end|>" not in text and "<|im_start|>" not in text
    finally:
        run(loop, c.close())
