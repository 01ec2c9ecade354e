"""RPC workers for the tests: real `strata worker` processes (llama.cpp's RPC server over this machine's CPU) on
loopback ports, each in its own process group so a test can kill one whole worker (supervisor and server)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from repo_paths import ROOT


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Worker:
    """`python -m app worker --port P --threads 1` with its own STRATA_HOME (its tensor cache lives there)."""

    def __init__(self, home: Path, threads: int = 1):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / f"worker-{self.port}.log"
        env = dict(os.environ, STRATA_HOME=str(home), PYTHONPATH=str(ROOT))
        env.pop("STRATA_RPC", None)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "app", "worker", "--port", str(self.port),
                                      "--threads", str(threads)], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> "Worker":
        from app.ggml.rpc import WorkerError, hello

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited ({self.proc.returncode}): {self.output()}")
            if "ready on" in self.output():
                try:
                    hello(self.endpoint, 2.0)
                    return self
                except WorkerError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"worker {self.endpoint} not ready: {self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (the supervisor and the RPC server it started)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)       # the supervisor stops its server and exits
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


def start_workers(home: Path, n: int, threads: int = 1) -> list[Worker]:
    workers = [Worker(home / f"w{i}", threads) for i in range(n)]
    return [w.wait_ready() for w in workers]
