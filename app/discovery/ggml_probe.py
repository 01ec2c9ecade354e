"""ggml backend devices, enumerated in a CHILD process.

Enumerating devices on a GPU build initialises the driver (a CUDA context takes hundreds of MiB of VRAM and a
broken driver can abort the process), so the service never does it in its own process. The child prints one JSON
object on stdout; the parent parses it, with a timeout.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from app.discovery.cpu_features import ggml_cpu_features
from app.ggml import ggml_lib, llama_log

TIMEOUT_S = 60


def probe_here() -> dict:
    """Run in the child: devices as ggml sees them (CPU included), and whether GPU offload is compiled in."""
    llama_log.install()          # keep llama.cpp's chatter off stdout/stderr
    devs = ggml_lib.list_devices()
    for d in devs:
        d.pop("handle", None)
    return {"devices": devs, "gpu_offload": ggml_lib.supports_gpu_offload(), "cpu_features": ggml_cpu_features()}


def probe_ggml(timeout: float = TIMEOUT_S) -> tuple[dict | None, str | None]:
    """(result, None) or (None, why) when the child failed, crashed or hung."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        p = subprocess.run([sys.executable, "-m", "app.discovery.ggml_probe"], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, f"ggml device enumeration did not finish in {timeout:.0f} s (driver hang?)"
    except OSError as e:
        return None, f"ggml device enumeration could not start: {e}"
    if p.returncode != 0:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        return None, f"ggml device enumeration failed (exit {p.returncode}): {' | '.join(tail)}"
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line), None
            except json.JSONDecodeError:
                break
    return None, "ggml device enumeration printed no result"


if __name__ == "__main__":
    print(json.dumps(probe_here()), flush=True)
