"""Helpers shared by the service tests that drive a real server on loopback."""
from __future__ import annotations

import time


def wait_for(cond, timeout=120.0, what="condition"):
    """Poll `cond` until it is true; fail the test (not time it) when `timeout` seconds pass first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached")
