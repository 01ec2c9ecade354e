"""The runner watchdog's rules (engine/runner_watch.py), the runner's step estimate (runner/heartbeat.py), the
stderr ring (engine/stderr_tail.py) and their configuration, without a runner process. The real thing (SIGSTOP,
a step that never returns, kill -9, an abort) is in tests/integration/service/test_runner_faults.py."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from app.engine import protocol as P
from app.engine.runner.heartbeat import expected_step_s
from app.engine.runner_watch import (PROGRESS_SHARE, WatchLimits, judge, process_state, progress_between,
                                     scheduled_ns)
from app.engine.stderr_tail import StderrTail
from app.service.config import ConfigError, ServiceConfig


def test_silence_past_the_heartbeat_limit_is_a_freeze_and_says_what_the_kernel_says():
    lim = WatchLimits(heartbeat_s=10)
    assert judge(lim, 9.0, P.Heartbeat(5)) is None
    why = judge(lim, 12.0, P.Heartbeat(5), "the process is stopped (SIGSTOP or a job-control stop)")
    assert why.startswith("froze: no heartbeat for 12 s") and "SIGSTOP" in why
    assert judge(lim, 12.0, None).startswith("froze")          # loaded, but no heartbeat arrived yet
    assert judge(WatchLimits(heartbeat_s=0), 1e6, None) is None  # 0 = no watchdog


def test_a_silent_runner_that_the_kernel_says_ran_is_slow_not_frozen():
    lim = WatchLimits(heartbeat_s=8, slow_limit_s=120)
    assert judge(lim, 30.0, P.Heartbeat(5), progress=0.9) is None             # ran or waited for a CPU: a busy machine
    assert judge(lim, 30.0, P.Heartbeat(5), progress=PROGRESS_SHARE) is None
    assert judge(lim, 9.0, P.Heartbeat(5), progress=0.0).startswith("froze: no heartbeat for 9 s")   # asleep
    assert judge(lim, 9.0, P.Heartbeat(5), progress=None).startswith("froze")   # the kernel does not say
    why = judge(lim, 9.0, P.Heartbeat(5), "the process is stopped (SIGSTOP or a job-control stop)", progress=2.0)
    assert why and "SIGSTOP" in why                                          # stopped: whatever was counted
    why = judge(lim, 121.0, P.Heartbeat(5), progress=1.0)
    assert why and why.startswith("froze: no heartbeat for 121 s though its threads were scheduled") and "120" in why


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads /proc/<pid>/task/*/schedstat")
def test_the_kernel_tells_a_busy_process_from_a_sleeping_or_stopped_one():
    """A process that is always runnable gains about a second of run plus run-queue time per second (however busy
    the machine); a sleeping one and a stopped one gain nothing."""
    code = "import time\nprint('ready', flush=True)\n{}"
    busy = subprocess.Popen([sys.executable, "-c", code.format("while True: pass")], stdout=subprocess.PIPE)
    idle = subprocess.Popen([sys.executable, "-c", code.format("time.sleep(600)")], stdout=subprocess.PIPE)
    try:
        for p in (busy, idle):
            assert p.stdout.readline().strip() == b"ready"

        def gained(p, seconds=1.0):
            before, t0 = scheduled_ns(p.pid), time.monotonic()
            time.sleep(seconds)
            return progress_between(before, scheduled_ns(p.pid), time.monotonic() - t0)

        assert gained(busy) >= 0.5
        assert gained(idle) < PROGRESS_SHARE
        os.kill(busy.pid, 19)                               # SIGSTOP
        while "stopped" not in process_state(busy.pid):
            time.sleep(0.01)
        assert gained(busy) < PROGRESS_SHARE
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    assert scheduled_ns(None) is None and progress_between(None, {1: 5}, 1.0) is None


def test_a_step_is_stuck_only_past_its_measured_prediction_and_the_floor():
    lim = WatchLimits(heartbeat_s=10, step_floor_s=120, step_factor=20)
    # a long prefill on a slow CPU: 600 s predicted for this batch, running 1000 s: still fine (limit 12000 s)
    assert judge(lim, 0.5, P.Heartbeat(3, step_s=1000, step_tokens=2048, expected_s=600)) is None
    # a fast model: prediction 0.05 s, yet never less than the floor
    assert judge(lim, 0.5, P.Heartbeat(3, step_s=100, step_tokens=1, expected_s=0.05)) is None
    why = judge(lim, 0.5, P.Heartbeat(3, step_s=130, step_tokens=1, expected_s=0.05))
    assert why.startswith("is stuck: one decode step of 1 tokens has run 130.0 s") and "120" in why
    why = judge(lim, 0.5, P.Heartbeat(3, step_s=13000, step_tokens=2048, expected_s=600))
    assert why and "20x the 600.00 s" in why
    assert judge(lim, 0.5, P.Heartbeat(3, step_s=0.0)) is None   # no step in progress


def test_the_step_estimate_grows_with_the_batch_and_the_slowest_step():
    # (decode s, step s, tokens): single-token steps of 50 ms, one 64-token prefill of 0.8 s
    timing = [(0.04, 0.05, 1)] * 10 + [(0.7, 0.8, 64)]
    assert expected_step_s(timing, 1, 9.0) == pytest.approx(0.8)           # never below the slowest step seen
    assert expected_step_s(timing, 512, 9.0) == pytest.approx(512 * 0.05)  # per-token time of the small steps
    assert expected_step_s([], 4, 0.3) == pytest.approx(1.2)               # before any step: the warm-up's


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_process_state_names_a_stopped_process():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert "stopped" not in process_state(p.pid)    # running or sleeping (or, while it starts, reading disk)
        os.kill(p.pid, 19)                      # SIGSTOP (delivered when the process next runs: wait for it)
        deadline = time.monotonic() + 30
        while "stopped" not in process_state(p.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "stopped" in process_state(p.pid)
    finally:
        p.kill()
        p.wait()
    assert process_state(None) == ""


def test_stderr_tail_keeps_the_last_lines_and_passes_everything_through(tmp_path):
    seen = tmp_path / "passthrough"
    with open(seen, "wb") as out:
        tail = StderrTail(passthrough_fd=out.fileno(), lines=3)
        fd = os.dup(tail.child_end.fd())
        tail.child_started()                    # the parent's copy closed: only the "child" (fd) writes now
        os.write(fd, b"one\ntwo\n\nthree\nfour: GGML_ASSERT(x) failed\nterminate called without a newline")
        os.close(fd)                            # the child is gone: the pipe ends
        tail.wait_closed(30)
    assert tail.lines() == ["three", "four: GGML_ASSERT(x) failed", "terminate called without a newline"]
    assert tail.detail().endswith("four: GGML_ASSERT(x) failed | terminate called without a newline")
    assert seen.read_bytes().startswith(b"one\ntwo\n\nthree\n")


def test_watchdog_settings_are_read_once_into_the_service_config(monkeypatch):
    monkeypatch.setenv("STRATA_RUNNER_WATCHDOG", "2.5")
    monkeypatch.setenv("STRATA_RUNNER_STEP_FLOOR", "30")
    watch = ServiceConfig.from_env().runner_watch
    assert (watch.heartbeat_s, watch.step_floor_s) == (2.5, 30.0) and watch.enabled
    monkeypatch.setenv("STRATA_RUNNER_WATCHDOG", "0")
    assert not ServiceConfig.from_env().runner_watch.enabled
    monkeypatch.setenv("STRATA_RUNNER_WATCHDOG", "soon")
    with pytest.raises(ConfigError, match="STRATA_RUNNER_WATCHDOG"):
        ServiceConfig.from_env()
    monkeypatch.delenv("STRATA_RUNNER_WATCHDOG")
    monkeypatch.delenv("STRATA_RUNNER_STEP_FLOOR")
    assert ServiceConfig.from_env().runner_watch == ServiceConfig().runner_watch
