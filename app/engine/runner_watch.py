"""When a runner is frozen or stuck: the parent's rules, as plain functions of what the runner's heartbeat said.

Two signs, both checked only while requests wait on the runner (docs/architecture.md, "When a runner dies or
hangs"):
- **frozen**: no message at all for `heartbeat_s`, and the process made no progress meanwhile. The runner's
  heartbeat thread never waits on llama_decode (ctypes releases the GIL there), so a silent runner is stopped
  (SIGSTOP, a debugger), wedged (a deadlock, the GIL held by a call that never returns), or only starved: a busy
  machine (every CPU taken, the runner at a low priority) can leave a healthy runner's threads waiting for a CPU
  for seconds. The kernel tells them apart (`scheduled_ns`: per thread, the time it ran and the time it waited on
  a run queue): a runner whose threads ran or waited for a CPU for at least `PROGRESS_SHARE` of the silence is slow,
  not frozen, and is given up to `slow_limit_s`; a stopped one, or one whose threads all sleep, is caught within
  `heartbeat_s` + one check period. Where the kernel says nothing (not Linux), silence alone decides.
- **stuck**: the heartbeat goes on but one step has run longer than `step_limit(expected)`: `step_factor` times
  what this model's own measured steps predict for a batch of that many tokens, and never less than
  `step_floor_s`. A long prefill on a slow CPU predicts a long step, so it is never killed by mistake; a decode
  that never returns (a driver stuck in a kernel) is.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from app.engine import protocol as P

# A silent runner whose threads together ran or waited for a CPU for at least this share of the silence is making
# progress on a busy machine. A frozen one scores ~0: stopped threads are not scheduled, and a deadlocked runner's
# threads sleep (a heartbeat that cannot get the GIL waits on a futex, not on a run queue).
PROGRESS_SHARE = 0.1


@dataclass(frozen=True)
class WatchLimits:
    heartbeat_s: float = 8.0        # no heartbeat this long while requests wait: frozen (0 = no watchdog at all)
    step_floor_s: float = 120.0     # a step may always run this long ...
    step_factor: float = 20.0       # ... or this many times its measured prediction, whichever is longer
    slow_limit_s: float = 120.0     # the longest silence of a runner that the kernel says is running or runnable

    @property
    def enabled(self) -> bool:
        return self.heartbeat_s > 0

    @property
    def period_s(self) -> float:
        """How often the parent looks: a fraction of the heartbeat limit, at most a second."""
        return max(0.05, min(1.0, self.heartbeat_s / 4))

    def step_limit(self, expected_s: float) -> float:
        return max(self.step_floor_s, self.step_factor * expected_s)


def judge(limits: WatchLimits, silent_s: float, beat: P.Heartbeat | None, state: str = "",
          progress: float | None = None) -> str | None:
    """Why the runner must be killed, or None. `silent_s`: seconds since its last message (or since work began,
    if later); `beat`: its last heartbeat (None: none yet); `state`: `process_state()`; `progress`: the seconds
    its threads ran or waited for a CPU during the silence, per second of it (`scheduled_ns`; None: unknown).
    Judged once the runner has loaded (its heartbeat thread started before the load)."""
    if not limits.enabled:
        return None
    if silent_s > limits.heartbeat_s:
        slow = not state and progress is not None and progress >= PROGRESS_SHARE
        if slow and silent_s <= limits.slow_limit_s:
            return None                 # a busy machine: the runner runs or waits for a CPU
        why = f"no heartbeat for {silent_s:.0f} s"
        if slow:
            why += (f" though its threads were scheduled (a slow machine's runner may be silent for at most "
                    f"{limits.slow_limit_s:g} s)")
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


def scheduled_ns(pid: int | None) -> dict[int, int] | None:
    """Per thread of process `pid`: the nanoseconds it has run plus those it has waited on a run queue (Linux
    /proc/<pid>/task/<tid>/schedstat), so a starved thread counts like a running one; None where the kernel does
    not say (not Linux, no schedstat, the process gone)."""
    if not pid:
        return None
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: dict[int, int] = {}
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                ran, waited = f.read().split()[:2]
            out[int(tid)] = int(ran) + int(waited)
        except (OSError, ValueError):
            continue                    # a thread that ended meanwhile
    return out or None


def progress_between(before: dict[int, int] | None, after: dict[int, int] | None, seconds: float) -> float | None:
    """Seconds of run and run-queue time the threads gained from `before` to `after` (both `scheduled_ns`), per
    second of `seconds`; a thread new since counts from zero. None when either is unknown."""
    if before is None or after is None or seconds <= 0:
        return None
    gained = sum(max(0, ns - before.get(tid, 0)) for tid, ns in after.items())
    return gained / 1e9 / seconds
