"""The runner's heartbeat: a thread of its own that sends `Heartbeat` every HEARTBEAT_INTERVAL_S, from the start of
the process to its end, whatever the context thread is doing. It never waits on llama_decode (ctypes releases the
GIL during the call), so the parent can tell a frozen process (no heartbeat) from a long step (heartbeats that
say a step is running, and how long this model's measured steps say it should take): engine/runner_watch.py.
"""
from __future__ import annotations

import threading
from typing import Callable

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


class HeartbeatThread:
    """`state()` -> (steps, step_s, step_tokens, expected_s); set it once the step loop exists (zeros until then)."""

    def __init__(self, send: Callable[[object], None], interval_s: float = P.HEARTBEAT_INTERVAL_S):
        self.send = send
        self.interval_s = interval_s
        self.state: Callable[[], tuple[int, float, int, float]] = lambda: (0, 0.0, 0, 0.0)
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
                steps, step_s, tokens, expected = self.state()
            except Exception:  # noqa: BLE001 - a heartbeat without step facts still says the process lives
                steps, step_s, tokens, expected = 0, 0.0, 0, 0.0
            self.send(P.Heartbeat(steps, step_s, tokens, expected))
            if self._stop.wait(self.interval_s):
                return
