"""ggml backend devices, enumerated in a CHILD process.

Enumerating devices on a GPU build initialises the driver (a CUDA context takes hundreds of MiB of VRAM and a
broken driver can abort the process), so the service never does it in its own process. The child prints one JSON
object on stdout; the parent parses it, with a timeout (app.ggml.child_json).
"""
from __future__ import annotations

import json
import sys

from app.discovery.cpu_features import ggml_cpu_features
from app.discovery.remote import probe_remote
from app.ggml import ggml_lib, llama_log
from app.ggml.child_json import ChildError, run_json_child
from app.ggml.rpc import WorkerError

TIMEOUT_S = 60


def probe_here(rpc_endpoints: list[str] | None = None) -> dict:
    """Run in the child: devices as ggml sees them (CPU included), whether GPU offload is compiled in, and the
    devices of the RPC workers at `rpc_endpoints` (app.discovery.remote; local devices are listed first, so
    connecting to workers cannot change them)."""
    llama_log.install()          # keep llama.cpp's chatter off stdout/stderr
    devs = ggml_lib.list_devices()
    for d in devs:
        d.pop("handle", None)
    out = {"devices": devs, "gpu_offload": ggml_lib.supports_gpu_offload(), "cpu_features": ggml_cpu_features(),
           "rpc_backend": _has_rpc()}
    if rpc_endpoints:
        try:
            out["remote"] = probe_remote(rpc_endpoints)
        except (OSError, WorkerError) as e:       # no RPC backend in this build, or a worker went away just now
            out["remote"], out["remote_error"] = [], str(e)
    return out


def _has_rpc() -> str | None:
    """None when this llama.cpp build has the RPC backend, else why not."""
    try:
        ggml_lib.rpc_lib()
        return None
    except OSError as e:
        return str(e)


def probe_ggml(timeout: float = TIMEOUT_S, rpc_endpoints: list[str] | None = None) -> tuple[dict | None, str | None]:
    """(result, None) or (None, why) when the child failed, crashed or hung (a driver hang, say)."""
    try:
        return run_json_child("app.discovery.ggml_probe", ",".join(rpc_endpoints or ()),
                              what="ggml device enumeration", timeout=timeout), None
    except ChildError as e:
        return None, str(e)


if __name__ == "__main__":
    print(json.dumps(probe_here([e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e])),
          flush=True)
