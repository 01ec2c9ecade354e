"""When a runner is frozen or stuck: the parent's rules, as plain functions of what the runner's heartbeat said.

Two signs, both checked only while requests wait on the runner (docs/architecture.md, "When a runner dies or
hangs"):
- **frozen**: no message at all for `heartbeat_s`. The runner's heartbeat thread never waits on llama_decode
  (ctypes releases the GIL there), so a silent runner is stopped (SIGSTOP, a debugger), starved, or wedged with
  the GIL held. Caught within `heartbeat_s` + one check period.
- **stuck**: the heartbeat goes on but one step has run longer than `step_limit(expected)`: `step_factor` times
  what this model's own measured steps predict for a batch of that many tokens, and never less than
  `step_floor_s`. A long prefill on a slow CPU predicts a long step, so it is never killed by mistake; a decode
  that never returns (a driver stuck in a kernel) is.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.engine import protocol as P


@dataclass(frozen=True)
class WatchLimits:
    heartbeat_s: float = 8.0        # no heartbeat this long while requests wait: frozen (0 = no watchdog at all)
    step_floor_s: float = 120.0     # a step may always run this long ...
    step_factor: float = 20.0       # ... or this many times its measured prediction, whichever is longer

    @property
    def enabled(self) -> bool:
        return self.heartbeat_s > 0

    @property
    def period_s(self) -> float:
        """How often the parent looks: a fraction of the heartbeat limit, at most a second."""
        return max(0.05, min(1.0, self.heartbeat_s / 4))

    def step_limit(self, expected_s: float) -> float:
        return max(self.step_floor_s, self.step_factor * expected_s)


def judge(limits: WatchLimits, silent_s: float, beat: P.Heartbeat | None, state: str = "") -> str | None:
    """Why the runner must be killed, or None. `silent_s`: seconds since its last message (or since work began,
    if later); `beat`: its last heartbeat (None: none yet); `state`: `process_state()`. Judged once the runner has
    loaded (its heartbeat thread started before the load)."""
    if not limits.enabled:
        return None
    if silent_s > limits.heartbeat_s:
        why = f"no heartbeat for {silent_s:.0f} s"
        return f"froze: {why}; {state}" if state else f"froze: {why}"
    if beat is not None and beat.step_s > 0:
        limit = limits.step_limit(beat.expected_s)
        if beat.step_s > limit:
            return (f"is stuck: one decode step of {beat.step_tokens} tokens has run {beat.step_s:.1f} s, over its "
                    f"limit of {limit:.1f} s ({limits.step_factor:g}x the {beat.expected_s:.2f} s this model's "
                    f"measured steps predict, at least {limits.step_floor_s:g} s)")
    return None


_STATES = {"T": "the process is stopped (SIGSTOP or a job-control stop)",
           "t": "the process is stopped by a debugger",
           "D": "the process is in an uninterruptible wait (a driver or disk call)"}


def process_state(pid: int | None) -> str:
    """What the kernel says a silent process is doing (Linux /proc), in words; "" when unknown or unremarkable."""
    if not pid:
        return ""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return ""
    return _STATES.get(state, "")
