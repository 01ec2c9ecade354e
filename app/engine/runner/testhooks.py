"""Test-only failure injection for the runner, switched on by environment variables (read once at spawn).

STRATA_TEST_FAIL="admit:2,step:5,sample:3,output:4"  raise InjectedFailure the Nth time a stage is reached
                                                      (each listed stage once), so tests can check that every
                                                      path returns its slot and nothing deadlocks.
STRATA_TEST_ABORT_MARKER="..."                        a prompt equal to this string makes the runner call
                                                      os.abort() on its context thread, like a GGML_ASSERT would.
STRATA_TEST_HANG_MARKER="..."                         a prompt equal to this string makes the context thread hang
                                                      inside its decode step for ever (the heartbeat goes on), like
                                                      a driver call that never returns.
STRATA_TEST_NO_SHIFT=1                                pretend the KV cache cannot shift (tests the re-process path).
STRATA_TEST_MUTE_HEARTBEAT=1                          the heartbeat thread sends nothing (the process otherwise
                                                      serves as usual), like a runner that a busy machine keeps
                                                      from running its heartbeat: the watchdog must ask the kernel.
Nothing here is active unless a test sets these variables. They stay environment variables on purpose, the only
ones the runner reads itself: they are for tests alone (no user setting belongs here), so they skip the service's
config (app/service/config.py) and the RunnerSettings it passes down (app/engine/runner_settings.py).
"""
from __future__ import annotations

import os
import threading


ABORT_MESSAGE = "strata test hook: GGML_ASSERT-like abort (STRATA_TEST_ABORT_MARKER)"


class InjectedFailure(RuntimeError):
    pass


class Hooks:
    def __init__(self, env=None):
        env = os.environ if env is None else env
        self._at: dict[str, int] = {}
        for part in (env.get("STRATA_TEST_FAIL") or "").split(","):
            if ":" in part:
                stage, n = part.split(":", 1)
                self._at[stage.strip()] = int(n)
        self._count: dict[str, int] = {}
        self._lock = threading.Lock()
        self.abort_marker = env.get("STRATA_TEST_ABORT_MARKER") or None
        self.hang_marker = env.get("STRATA_TEST_HANG_MARKER") or None
        self.no_shift = env.get("STRATA_TEST_NO_SHIFT") == "1"
        self.mute_heartbeat = env.get("STRATA_TEST_MUTE_HEARTBEAT") == "1"

    def abort(self) -> None:
        """Print to stderr and abort, as a GGML_ASSERT does (its message is what the parent keeps of stderr)."""
        os.write(2, f"{ABORT_MESSAGE}\n".encode())
        os.abort()

    def hang_if_marked(self, prompts) -> None:
        if any(p == self.hang_marker for p in prompts):
            threading.Event().wait()        # for ever, without the GIL: only the step stops

    def hit(self, stage: str) -> None:
        if stage not in self._at:
            return
        with self._lock:
            n = self._count.get(stage, 0) + 1
            self._count[stage] = n
        if n == self._at[stage]:
            raise InjectedFailure(f"injected failure at {stage} #{n}")
