"""A real `strata serve` process for the CLI tests: started on a free loopback port with the test's settings
(environment variables), waited for until it answers, stopped with SIGINT (a user's Ctrl-C) at the end."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def strata_serve(log_path: Path, **settings: str):
    """`strata serve` with one thread, one slot, no other apps' models and `settings` (STRATA_* variables) over
    the test's environment; yields (url, env, process), env being what the server runs with (for the CLI commands
    a test runs against it). Its output goes to `log_path`, shown when it does not start."""
    port = free_port()
    env = {**os.environ, "STRATA_HOST": f"127.0.0.1:{port}", "STRATA_NUM_THREADS": "1", "STRATA_NUM_PARALLEL": "1",
           "STRATA_EXTERNAL_MODELS": "0", **settings}
    with open(log_path, "w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "app", "serve"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, text=True)
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 120
        while time.monotonic() < end and proc.poll() is None:
            try:
                if httpx.get(url + "/api/version", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            proc.kill()
            log.seek(0)
            pytest.fail("strata serve did not start: " + log.read())
        try:
            yield url, env, proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(60)
