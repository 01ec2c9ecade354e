"""Chat facts and tool calls on the family GGUFs (tests/support/gguf_factory.FAMILIES: each architecture family with its
real chat template): the family and capabilities read from the file, and, in a real runner, a forced tool
call read back by that family's parser (gpt-oss through the harmony parser, Qwen3 through Hermes)."""
from __future__ import annotations

import asyncio

import pytest

from app.engine import protocol as P
from app.engine.chat.plan import plan_chat
from app.engine.client import RunnerClient
from app.engine.gguf.chat_facts import read_chat_facts
from app.engine.gguf.model_info import read_model_info
from app.service.generation.toolcalls import parse_all
from engine_util import cpu_layout
from gguf_factory import FAMILIES, write_family

# family GGUF -> (reply family, capabilities)
EXPECTED = {
    "llama": ("llama3", ("completion", "tools")),
    "qwen3": ("hermes", ("completion", "tools", "thinking")),
    "gemma3": ("generic", ("completion",)),
    "gpt-oss": ("harmony", ("completion", "tools", "thinking")),
    "cohere2": ("command_r", ("completion", "tools", "thinking")),
    "llama4": ("llama3", ("completion", "tools")),
    "deepseek2": ("deepseek", ("completion", "tools", "thinking")),
    "granitehybrid": ("hermes", ("completion", "tools")),
    "mamba": ("generic", ("completion",)),            # no template: the built-in one its vocabulary fits
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_family_facts_from_the_file(family_dir, name):
    f = read_chat_facts(write_family(name, family_dir))
    assert (f.family, f.capabilities) == EXPECTED[name]
    if FAMILIES[name].template is None:
        assert f.template_source == "builtin:chatml"
    else:
        assert f.template_source == "gguf"


@pytest.mark.parametrize("name,family", [("qwen3", "hermes"), ("gpt-oss", "harmony")])
def test_forced_call_through_the_family_parser(family_dir, name, family):
    path = family_dir / f"{name}.gguf"
    if not path.exists():
        write_family(name, family_dir)
    n_layer = read_model_info(path).n_layer

    async def go():
        c = RunnerClient(cpu_layout(path, num_ctx=512, num_parallel=1, n_batch=256, n_layer=n_layer), n_threads=1)
        await c.start()
        try:
            msgs = [{"role": "user", "content": "Weather in Paris?"}]
            plain = await c.count_prompt(P.GenerateRequest(id="a", messages=msgs))
            with_tools = await c.count_prompt(P.GenerateRequest(id="b", messages=msgs, tools=[WEATHER]))
            req = P.GenerateRequest(id="c", messages=msgs, tools=[WEATHER],
                                    plan=plan_chat(family, [WEATHER], "required", False), sampling=P.SamplingParams(temperature=0),
                                    num_predict=160)
            text = "".join([e.text async for e in c.generate(req) if isinstance(e, P.TokenEvent)])
            return plain, with_tools, text
        finally:
            await c.close()

    plain, with_tools, text = asyncio.run(asyncio.wait_for(go(), 300))
    assert with_tools > plain                                  # the template rendered the tool list
    d = parse_all(family, text, ["get_weather"])
    assert [c.name for c in d.calls] == ["get_weather"] and d.content == "", text
