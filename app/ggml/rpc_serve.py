"""The serving child of `strata worker`: llama.cpp's own RPC server over some local devices.

    python -m app.ggml.rpc_serve --endpoint 127.0.0.1:50052 --devices CPU --threads 3 [--cache-dir DIR]

`ggml_backend_rpc_start_server` blocks for ever (ctypes releases the GIL while it runs). It runs in a child so
that a GGML_ABORT on a malformed request ends this process only: `strata worker` then starts a new one.
Exit status 3: the server could not start (the port is taken, a device cannot be opened).
Covered by tests/integration/engine/test_rpc_split.py and tests/integration/service/test_rpc_faults.py.
"""
from __future__ import annotations

import argparse
import sys

from app.ggml import ggml_lib, llama_log


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.ggml.rpc_serve")
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--devices", required=True, help="comma-separated ggml device names")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir")
    a = ap.parse_args(argv)

    llama_log.install()              # llama.cpp's log lines go to Python logging (stderr), not raw to the terminal
    try:
        handles = [ggml_lib.dev_by_name(name) for name in a.devices.split(",") if name]
        ggml_lib.rpc_lib()
    except (ValueError, OSError) as e:
        print(f"strata worker: {e}", file=sys.stderr, flush=True)
        return 3
    ggml_lib.rpc_start_server(a.endpoint, a.cache_dir, a.threads, handles)
    # start_server only returns when it could not serve (socket error): say so for the parent
    print(f"strata worker: llama.cpp's RPC server could not listen on {a.endpoint}", file=sys.stderr, flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main())
