"""Helpers shared by the service tests that drive a real server on loopback."""
from __future__ import annotations

import os
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
        from app.service.store.model_store import ModelStore

        return ModelStore(db_path=home / "strata.db", models_dir=home / "models", discover_external=False)
    return make


def start_service_in(home, **config):
    """A started ServiceThread (ServiceConfig.from_env(host="127.0.0.1", port=0, **config)) whose data lives under
    `home` and whose "user home" (where other apps' models are looked for) is `home/user-home`, never the real
    ~/.ollama: both variables are set only while the service reads its configuration and starts."""
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread

    saved = {k: os.environ.get(k) for k in ("STRATA_HOME", "STRATA_USER_HOME")}
    os.environ["STRATA_HOME"] = str(home)
    os.environ["STRATA_USER_HOME"] = str(home / "user-home")
    try:
        svc = ServiceThread(ServiceConfig.from_env(host="127.0.0.1", port=0, **config))
        svc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return svc
