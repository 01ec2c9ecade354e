"""The runner's heartbeat: a thread of its own that sends `Heartbeat` every HEARTBEAT_INTERVAL_S, from the start of
the process to its end, whatever the context thread is doing. It never waits on llama_decode (ctypes releases the
GIL during the call), so the parent can tell a frozen process (no heartbeat) from a long step (heartbeats that
say a step is running, and how long this model's measured steps say it should take): engine/runner_watch.py.
"""
from __future__ import annotations

import threading
from typing import Callable, NamedTuple

from app.engine import protocol as P


def expected_step_s(timing, n_tokens: int, fallback_s: float) -> float:
    """How long a step of `n_tokens` tokens should take, from recent steps [(decode s, step s, tokens), ...]: the
    slowest seen, or the slowest per-token time times n_tokens, whichever is more (per-token times of small steps
    overestimate a large batch's: generous on purpose). No step yet: `fallback_s` (the load's one-token warm-up
    decode, first-graph costs included) per token."""
    n = max(1, n_tokens)
    if not timing:
        return fallback_s * n
    longest = max(t[1] for t in timing)
    per_token = max(t[1] / max(1, t[2]) for t in timing)
    return max(longest, per_token * n)


class StepState(NamedTuple):
    """What the step loop tells the heartbeat (step_clock.StepClock.state)."""
    steps: int                  # steps done
    step_s: float               # seconds the step in progress has run (0: none running)
    tokens: int                 # its tokens
    expected_s: float           # how long such a step should take


NO_STEP = StepState(0, 0.0, 0, 0.0)


class HeartbeatThread:
    """`state()` -> StepState; set it once the step loop exists (no step until then)."""

    def __init__(self, send: Callable[[object], None], interval_s: float = P.HEARTBEAT_INTERVAL_S,
                 muted: bool = False):
        self.send = send
        self.muted = muted              # testhooks' STRATA_TEST_MUTE_HEARTBEAT: the thread runs, sends nothing
        self.interval_s = interval_s
        self.state: Callable[[], StepState] = lambda: NO_STEP
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="strata-heartbeat", daemon=True)

    def start(self) -> "HeartbeatThread":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            try:
                st = self.state()
            except Exception:  # noqa: BLE001 - a heartbeat without step facts still says the process lives
                st = NO_STEP
            if not self.muted:
                self.send(P.Heartbeat(st.steps, st.step_s, st.tokens, st.expected_s))
            if self._stop.wait(self.interval_s):
                return
