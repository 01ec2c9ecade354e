"""The context thread's clock: the step in progress and the last steps' timings.

The heartbeat thread (heartbeat.py) reads it without a lock (plain attribute reads: nothing the context thread
could hold), and stats report its decode fraction. A "step" here is anything that runs the model for a while:
a batch decode, an image's encode + decode, an embedding job. `HostPhases` adds up where the context thread's
time goes outside llama.cpp's compute, phase by phase (bench/bench_host_step.py prints it).
Covered by tests/integration/engine/test_runner.py (stats) and tests/integration/service/test_runner_faults.py
(the heartbeat's step limit).
"""
from __future__ import annotations

import time
from collections import deque

from app.engine.runner.heartbeat import StepState, expected_step_s


# The context thread's phases of a batch step, in order. Host work: "loop" (between steps: reap, admission to
# slots, waiting sequences), "schedule" (the plan and its batch rows), "launch" (the executor's work before
# llama_decode), "shadow" (work done after llama_decode returned and before the first synchronizing call: hidden
# behind the GPU's compute on a GPU build), "sample" (the samplers, after the logits are there), "draft" (the next
# step's drafts: the proposer's lookups, a draft model's decodes), "update" (waiting for the step's preparation,
# applying the result), "handoff" (tokens to the output thread). Not host work: "decode" (inside llama_decode) and
# "sync" (llama_synchronize: the wait for the device's compute).
# "helper": host work a helper thread did beside the decode (step_prepare.py), not on the context thread.
# "host_cpu": the context thread's CPU time over the step less its CPU time inside llama_decode (the host phases'
# work without the time it waited for a CPU or for the GIL: steadier on a busy machine).
HOST_PHASES = ("loop", "schedule", "launch", "shadow", "sample", "draft", "update", "handoff")
PHASES = HOST_PHASES + ("decode", "sync", "helper", "host_cpu")


class HostPhases:
    """Seconds per phase summed over the batch steps since `reset` (context thread writes; a reader takes
    `snapshot`, a copy, and accepts a step in progress half counted)."""

    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.steps = 0
        self.rows = 0

    def add(self, phase: str, dt: float) -> None:
        self.seconds[phase] += dt

    def reset(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.steps = self.rows = 0

    def snapshot(self) -> dict:
        return {"steps": self.steps, "rows": self.rows, **dict(self.seconds)}


class StepClock:
    def __init__(self, warmup_s: float = 0.0):
        self.steps = 0                      # batch decodes that succeeded
        self.timing: deque = deque(maxlen=128)   # (seconds in llama_decode, seconds of the whole step, tokens)
        self.warmup_s = warmup_s            # the load's one-token warm-up decode: the step estimate before any step
        self.t0 = 0.0                       # when the step in progress began (0: none)
        self.tokens = 0
        self.phases = HostPhases()

    def begin(self, n_tokens: int, t0: float | None = None) -> float:
        self.tokens, self.t0 = n_tokens, t0 or time.perf_counter()
        return self.t0

    def end(self) -> None:
        self.t0 = 0.0

    def record(self, decode_s: float, step_s: float, n_tokens: int) -> None:
        self.timing.append((decode_s, step_s, n_tokens))

    def decode_fraction(self) -> float:
        t = list(self.timing)
        busy = sum(x[1] for x in t)
        return (sum(x[0] for x in t) / busy) if busy else 0.0

    def state(self) -> StepState:
        """Steps done, and the step in progress: how long it has run, its tokens, how long such a step should take."""
        t0, n = self.t0, self.tokens
        if not t0:
            return StepState(self.steps, 0.0, 0, 0.0)
        expected = expected_step_s(list(self.timing), n, self.warmup_s)
        return StepState(self.steps, time.perf_counter() - t0, n, expected)
