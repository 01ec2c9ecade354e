"""Run `python -m MODULE` in a child process and read the one JSON object it prints on stdout.

Work that may abort or hang inside llama.cpp or a GPU driver (enumerating devices, a `no_alloc` dry run, a real
load to verify the planner) runs in a child, so a crash ends the child, never the service. The child prints its
result as one JSON line; whatever llama.cpp writes around it is ignored. Here, the lowest layer, so discovery and
the planner share it (tests/unit/test_architecture.py's LAYERS).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the folder that holds `app`: the child imports this same tree
STDERR_LINES = 5                              # the stderr tail an error quotes


class ChildError(RuntimeError):
    """The child could not start, ran past its timeout, or ended without printing a JSON object; the message
    names the work (`what`), the exit code and the last lines of its stderr."""


def run_json_child(module: str, *args: str, what: str, timeout: float, stdin: str | None = None) -> dict:
    """The last JSON object line `python -m module *args` prints on stdout (fed `stdin`). A child that printed
    its result and then died at exit still counts: the result is what was asked for."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run([sys.executable, "-m", module, *args], input=stdin, capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ChildError(f"{what} did not finish in {timeout:g} s") from None
    except OSError as e:
        raise ChildError(f"{what} could not start: {e}") from None
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    tail = " | ".join((p.stderr or "").strip().splitlines()[-STDERR_LINES:])
    ended = f"exit {p.returncode}" if p.returncode else "exit 0, no result printed"
    raise ChildError(f"{what} failed ({ended})" + (f": {tail}" if tail else ""))
