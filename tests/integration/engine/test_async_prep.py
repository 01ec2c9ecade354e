"""Async batch preparation in a real runner process (runner/step/step_prepare.py): the same greedy tokens with the next
step's host work done after the sampled tokens ("off", as before), on the context thread between the decode's
return and the first synchronizing call ("shadow") and on a helper thread beside the decode ("helper"), at 1, 4 and
16 streams on SmolLM2 (CPU, 1 thread). Speculation is off: its automatic policy drafts by measured step times,
so two runners could batch differently (and a batch's shape may move a near-tie's greedy pick). The in-process, step-by-step check of the same is
tests/unit/engine/runner/step/test_step_cycle.py::test_prepared_plans_are_the_plans_schedule_builds.
"""
from __future__ import annotations

import asyncio

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.runner_settings import RunnerSettings
from engine_util import cpu_layout

STREAMS = (1, 4, 16)
SUBJECTS = ["a river", "the moon", "a lighthouse", "bread", "a violin", "snow", "a market", "bees", "a bridge",
            "the desert", "a library", "rain", "a clock", "the sea", "a garden", "trains"]


async def _replies(path, mode: str) -> dict[int, list[str]]:
    c = RunnerClient(cpu_layout(path, num_ctx=256, num_parallel=16, n_batch=256), n_threads=1,
                     model_name=f"smollm2-{mode}", settings=RunnerSettings(async_prep=mode, speculative="off"))
    await c.start()
    try:
        async def one(streams: int, i: int) -> str:
            req = P.GenerateRequest(id=f"{mode}-{streams}-{i}", prompt=f"Write two sentences about {SUBJECTS[i]}.",
                                    num_predict=16, ignore_eos=True, cache_prompt=False,
                                    sampling=P.SamplingParams(temperature=0.0, repeat_penalty=1.0))
            return "".join([ev.text async for ev in c.generate(req) if isinstance(ev, P.TokenEvent)])

        out = {}
        for streams in STREAMS:
            out[streams] = list(await asyncio.wait_for(asyncio.gather(*(one(streams, i) for i in range(streams))),
                                                       600))
        return out
    finally:
        await c.close()


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def before(loop, smollm2_path):
    return loop.run_until_complete(_replies(smollm2_path, "off"))


@pytest.mark.parametrize("mode", ["shadow", "helper"])
def test_greedy_replies_are_the_same_with_and_without_async_prep(loop, smollm2_path, before, mode):
    after = loop.run_until_complete(_replies(smollm2_path, mode))
    assert all(len(before[s]) == s and all(before[s]) for s in STREAMS)
    assert after == before
