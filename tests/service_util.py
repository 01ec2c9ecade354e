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


def store_factory(home):
    """A ModelStore maker for ServiceThread: the store lives under `home` and never scans the user's home for
    other apps' models, so each test module's server starts from a known store."""
    def make():
        from app.service.store import ModelStore

        return ModelStore(db_path=home / "strata.db", models_dir=home / "models", discover_external=False)
    return make
