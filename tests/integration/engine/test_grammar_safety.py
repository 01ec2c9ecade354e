"""The runner never aborts on a grammar: a real runner process on a synthetic Qwen3-template model (the
Hermes `<tool_call>` family, SmolLM2's tokenizer), steered with logit biases into what crashed llama.cpp.

The steering: greedy sampling, a descending logit bias on a few tokens and a presence penalty far larger than
any bias, so each biased token wins exactly once, in bias order (the penalty window is the last few tokens, so
the prompt's own braces and quotes fall outside it). That writes `{` `\\n ` ` "` `name` `":` at the start of the
reply: what Qwen2.5-Coder-0.5B wrote, and what made llama.cpp's lazy grammar replay `{\\n` into a grammar that
rejected it (`Unexpected empty grammar stack after accepting piece`, the runner process gone)."""
from __future__ import annotations

import asyncio
import itertools
import json
import re

import jsonschema
import pytest

from app.engine import protocol as P
from app.engine.chat.plan import plan_chat
from app.engine.client import RunnerClient, RunnerError
from app.service.generation.toolcalls import parse_all
from engine_util import cpu_layout
from gguf_factory import write_family

_ids = itertools.count()
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
MSGS = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def runner(loop, tmp_path_factory, smollm2_path):
    path = write_family("qwen3", tmp_path_factory.mktemp("safety"))
    c = RunnerClient(cpu_layout(path, num_ctx=1024, num_parallel=2, n_batch=256, n_layer=3), n_threads=1,
                     model_name="qwen3-synthetic")
    loop.run_until_complete(c.start())
    yield c
    loop.run_until_complete(c.close())


def run(loop, coro):
    return loop.run_until_complete(asyncio.wait_for(coro, 180))


async def collect(client, req):
    events = [ev async for ev in client.generate(req)]
    return "".join(e.text for e in events if isinstance(e, P.TokenEvent)), events[-1]


def token_ids(loop, client, *pieces) -> list[int]:
    ids = []
    for p in pieces:
        toks = run(loop, client.tokenize(p, add_special=False))
        assert len(toks) == 1, (p, toks)
        ids += toks
    return ids


def steered(ids: list[int], **kw) -> P.SamplingParams:
    """Greedy; the i-th token of `ids` written as the i-th token of the reply."""
    bias = {t: 400.0 - 50.0 * i for i, t in enumerate(ids)}
    return P.SamplingParams(temperature=0.0, logit_bias=bias, presence_penalty=1000.0, repeat_penalty=1.0,
                            repeat_last_n=len(ids) + 2, **kw)


def test_bare_call_opening_with_brace_newline_does_not_crash(loop, runner):
    ids = token_ids(loop, runner, "{", "\n ", ' "', "name", '":')
    req = P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS, tools=[WEATHER], plan=plan_chat("hermes", [WEATHER], "auto"),
                            sampling=steered(ids), num_predict=60)
    text, done = run(loop, collect(runner, req))
    assert runner.alive
    # from the trigger on the grammar held (the name is the one tool's), and a finished call parses
    assert re.match(r'\{\n  "name":\s*"get_weather"', text), text
    if done.reason == "stop":
        d = parse_all("hermes", text, ["get_weather"])
        assert [c.name for c in d.calls] == ["get_weather"], text
        assert isinstance(d.calls[0].arguments.get("city"), str)


@pytest.mark.parametrize("family,key", [("hermes", "arguments"), ("llama3", "parameters")])
def test_the_runner_applies_the_plans_family_not_its_own(loop, runner, family, key):
    """The GGUF is Qwen3's (hermes); the runner reads no family from it: a plan naming llama3 gets llama3's call
    grammar (its arguments key is "parameters"), a plan naming hermes gets Hermes's."""
    ids = token_ids(loop, runner, "{", "\n ", ' "', "name", '":')
    req = P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS, tools=[WEATHER],
                            plan=plan_chat(family, [WEATHER], "auto"), sampling=steered(ids), num_predict=40)
    text, _ = run(loop, collect(runner, req))
    assert re.match(r'\{\n  "name":\s*"get_weather"\s*,\s*"' + key + '"', text), text


def test_marker_written_as_text_starts_the_grammar(loop, runner):
    ids = token_ids(loop, runner, "<", "tool", "_", "call", ">", "\n ")
    req = P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS, tools=[WEATHER], plan=plan_chat("hermes", [WEATHER], "auto"),
                            sampling=steered(ids), num_predict=60)
    text, done = run(loop, collect(runner, req))
    assert text.startswith("<tool_call>\n "), text
    # after the marker only a call may follow: the next thing written is its opening brace
    assert text[len("<tool_call>\n "):].lstrip().startswith("{"), text
    assert runner.alive


def test_end_of_turn_is_held_until_the_grammar_is_complete(loop, runner):
    """A bias that makes <|im_end|> the pick at every step: never accepted before the JSON is complete (that
    would be llama.cpp's GGML_ABORT), so the reply is whole JSON."""
    eot = token_ids(loop, runner, "<|im_end|>")[0]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS, json_schema=schema,
                            sampling=P.SamplingParams(temperature=0.0, logit_bias={eot: 50.0}), num_predict=60)
    text, done = run(loop, collect(runner, req))
    assert done.reason == "stop", (text, done)
    assert isinstance(json.loads(text)["a"], int)


def test_a_stuck_grammar_ends_only_its_sequence(loop, runner):
    """A schema whose grammar no token can satisfy (a NUL character: llama.cpp rejects every piece holding one)
    ends that request with an error naming the grammar; a request running beside it finishes normally."""
    stuck = P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS,
                              json_schema={"type": "string", "pattern": "^\\x00$"},
                              sampling=P.SamplingParams(temperature=0.0), num_predict=20)
    other = P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS, sampling=P.SamplingParams(temperature=0.0),
                              num_predict=20)

    async def both():
        return await asyncio.gather(collect(runner, stuck), collect(runner, other), return_exceptions=True)

    bad, good = run(loop, both())
    assert isinstance(bad, RunnerError) and "format JSON schema" in str(bad), bad
    assert isinstance(good, tuple) and good[1].completion_tokens == 20
    assert runner.alive


SCHEMAS = [
    {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1,
                                                                          "maximum": 14}},
     "required": ["city", "days"]},
    {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "tags": {"type": "array", "items":
                                      {"type": "string", "maxLength": 8}, "maxItems": 3}},
     "required": ["unit", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date"}, "ok": {"type": "boolean"},
                                      "score": {"type": "number"}, "note": {"type": ["string", "null"]}},
     "required": ["when", "ok", "score", "note"]},
    {"type": "object", "$defs": {"p": {"type": "object", "properties": {"x": {"type": "integer"}},
                                       "required": ["x"]}},
     "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/p"}, "minItems": 1, "maxItems": 2},
                    "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2}$"}},
     "required": ["points", "code"]},
]


def test_every_reply_under_a_schema_validates(loop, runner):
    """Random weights at temperature 1.2, a bias towards the newline token (which made 5 of 6 replies invalid
    JSON before: a raw newline inside a string): every finished reply is JSON that validates against its
    schema; the rest were cut by num_predict and say so."""
    nl = token_ids(loop, runner, "\n")[0]
    reqs = [P.GenerateRequest(id=f"s{next(_ids)}", messages=MSGS, json_schema=schema,
                              sampling=P.SamplingParams(temperature=1.2, seed=seed, logit_bias={nl: 4.0}),
                              num_predict=160)
            for seed in (1, 2) for schema in SCHEMAS]

    async def all_of_them():
        return await asyncio.gather(*(collect(runner, r) for r in reqs))

    finished = 0
    for req, (text, done) in zip(reqs, run(loop, all_of_them())):
        if done.reason == "length":
            assert done.completion_tokens == req.num_predict
            continue
        assert done.reason == "stop", (text, done)
        jsonschema.validate(json.loads(text), req.json_schema)
        finished += 1
    assert finished >= len(reqs) // 2, finished
