"""The runner watchdog (engine/runner_watch.py, engine/client.py) against a real runner process whose heartbeat
is muted (runner/testhooks.py, STRATA_TEST_MUTE_HEARTBEAT), as a busy machine can keep a healthy runner's
heartbeat thread from running: silence alone does not kill it. A runner that works through a long prompt in
silence is served to the end; one that is silent and makes no progress (its step hangs,
STRATA_TEST_HANG_MARKER) is still killed as frozen. SIGSTOP with the service's default watchdog is in
tests/integration/service/test_runner_faults.py."""
from __future__ import annotations

import asyncio

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient, RunnerExited
from app.engine.runner_watch import WatchLimits
from engine_util import collect, cpu_layout, greedy, request_id, run

HANG = "strata watchdog test: this step never returns"
WATCH = WatchLimits(heartbeat_s=0.5)        # a late heartbeat is judged after half a second


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture
def muted(loop, smollm2_path, monkeypatch):
    monkeypatch.setenv("STRATA_TEST_MUTE_HEARTBEAT", "1")         # read by the runner when it is spawned
    monkeypatch.setenv("STRATA_TEST_HANG_MARKER", HANG)
    c = RunnerClient(cpu_layout(smollm2_path, num_ctx=4096, num_parallel=1, n_batch=256), n_threads=1,
                     model_name="muted", watch=WATCH)
    run(loop, c.start())
    yield c
    run(loop, c.close())


def test_a_silent_runner_that_works_through_a_long_prompt_is_not_killed(loop, muted):
    """From admission to its first token a prompt of ~1000 tokens sends nothing (its heartbeat is muted), for
    longer than the 0.5 s limit on a CPU; the kernel says its threads ran, so it is served."""
    prompt = " ".join(f"item {i}," for i in range(340))
    _, done, _ = run(loop, collect(muted, P.GenerateRequest(id=request_id("wd"), prompt=prompt, raw=True,
                                                            num_predict=2, sampling=greedy(), cache_prompt=False)))
    assert isinstance(done, P.DoneEvent) and done.prompt_tokens > 900
    assert muted.alive


def test_a_silent_runner_that_makes_no_progress_is_killed_as_frozen(loop, muted):
    with pytest.raises(RunnerExited, match="froze: no heartbeat") as e:
        run(loop, collect(muted, P.GenerateRequest(id=request_id("wd"), prompt=HANG, raw=True, num_predict=2)))
    assert e.value.kind == "frozen" and not muted.alive
