"""`strata worker [--host H] [--port P]`: lend this machine's devices to a Strata on another computer.

It runs llama.cpp's own RPC server (`ggml_backend_rpc_start_server`) in a child process (app.ggml.rpc_serve),
serving all GPUs here, else the CPU, with a local tensor cache (a client sends the hash of a large tensor first
and the worker loads it from its cache instead of over the network). A crashed child is started again.
The client names workers in `STRATA_RPC=host:port,...` or the settings file (app.discovery.remote).
Covered by tests/integration/engine/test_rpc_split.py and tests/integration/service/test_rpc_faults.py.
"""
from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from app.discovery.ggml_probe import probe_ggml
from app.ggml.rpc import DEFAULT_PORT, WorkerError, hello
from app.paths import cache_dir

GiB = 1024 ** 3
MiB = 1024 ** 2
RESTARTS_PER_MINUTE = 5


def register(sub) -> None:
    p = sub.add_parser("worker", help="serve this machine's GPUs (else its CPU) to a Strata elsewhere (llama.cpp RPC)")
    p.add_argument("--host", default="127.0.0.1",
                   help="IPv4 address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 = every interface)")
    p.add_argument("--port", type=int, default=None, help="TCP port (default 50052, llama.cpp's rpc-server default)")
    p.add_argument("--device", help="comma-separated devices to serve (e.g. CUDA0,CUDA1 or CPU; default: all GPUs, "
                                    "else the CPU); see --list")
    p.add_argument("--threads", type=int, help="CPU threads when serving the CPU (default: cores - 1)")
    p.add_argument("--cache-dir", help="local tensor cache directory (default: Strata's cache dir /rpc)")
    p.add_argument("--no-cache", action="store_true", help="no tensor cache: every load sends all weights")
    p.add_argument("--list", action="store_true", help="show what this worker would serve, then exit")
    p.set_defaults(func=cmd_worker)


def _fmt(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def _listen_host(host: str) -> str:
    """The IPv4 literal llama.cpp's server can bind (it uses inet_addr: no names, no IPv6)."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"--host {host!r}: give an IPv4 address of this machine (e.g. 192.168.1.20, or 0.0.0.0 "
                         f"for every interface); llama.cpp's RPC server does not take host names") from None
    if ip.version != 4:
        raise ValueError(f"--host {host!r}: llama.cpp's RPC server listens on IPv4 only")
    return host


def _default_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 2
    return max(1, cores - 1)


def choose_devices(local: list[dict], wanted: str | None) -> list[dict]:
    """The devices to serve: `wanted` names (ValueError naming an unknown one), else every GPU, else the CPU."""
    by_name = {d["name"]: d for d in local if d.get("type") != "meta"}
    if wanted:
        out = []
        for name in (n.strip() for n in wanted.split(",")):
            if not name:
                continue
            if name not in by_name:
                raise ValueError(f"--device {name!r}: no such device here (devices: {', '.join(by_name) or 'none'})")
            out.append(by_name[name])
        if not out:
            raise ValueError("--device: name at least one device")
        return out
    gpus = [d for d in local if d.get("type") == "gpu"] or [d for d in local if d.get("type") == "igpu"]
    return gpus or [d for d in local if d.get("type") == "cpu"][:1]


def security_warning(host: str, port: int) -> str:
    return (f"WARNING: this worker listens on {host}:{port}, beyond this machine. llama.cpp's RPC protocol has NO "
            f"authentication and NO encryption: anyone who can reach this port can use this machine's devices and "
            f"see the model's data as it is computed. Expose it only on a network you trust (or firewall the port "
            f"to the client's address).\nAcross an untrusted network, keep the worker on loopback and tunnel it over "
            f"ssh instead. On the machine running Strata:\n"
            f"    ssh -N -L {port}:127.0.0.1:{port} user@this-machine      # with `strata worker` (no --host) here\n"
            f"    STRATA_RPC=127.0.0.1:{port} strata serve")


def _port_free(host: str, port: int) -> str | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as llama.cpp's server does
        s.bind((host, port))
        return None
    except OSError as e:
        return e.strerror or str(e)
    finally:
        s.close()


def _probe_local() -> list[dict]:
    """This machine's ggml devices (in a child process, as discovery does); RuntimeError if there is no RPC backend."""
    probe, why = probe_ggml()
    if probe is None:
        raise RuntimeError(why)
    if probe.get("rpc_backend"):
        raise RuntimeError(probe["rpc_backend"])
    return probe["devices"]


def cmd_worker(args) -> int:
    port = DEFAULT_PORT if args.port is None else args.port
    try:
        if not 1 <= port <= 65535:
            raise ValueError(f"--port {port}: out of range 1..65535")
        host = _listen_host(args.host)
        if args.threads is not None and args.threads < 1:
            raise ValueError(f"--threads {args.threads}: must be at least 1")
        local = _probe_local()
        devices = choose_devices(local, args.device)
    except (ValueError, RuntimeError) as e:
        print(f"strata worker: {e}", file=sys.stderr)
        return 2
    threads = args.threads or _default_threads()
    cache = None
    if not args.no_cache:
        cache = args.cache_dir or str(cache_dir() / "rpc")
    endpoint = f"{host}:{port}"
    _print_plan(endpoint, devices, local, threads, cache)
    if not ipaddress.ip_address(host).is_loopback:
        print(security_warning(host, port), file=sys.stderr, flush=True)
    if args.list:
        return 0
    if cache:
        os.makedirs(cache, exist_ok=True)
    why = _port_free(host, port)
    if why:
        print(f"strata worker: cannot listen on {endpoint}: {why} (another worker or rpc-server there? use --port)",
              file=sys.stderr)
        return 1
    return _supervise(endpoint, [d["name"] for d in devices], threads, cache)


def _print_plan(endpoint: str, devices: list[dict], local: list[dict], threads: int, cache: str | None) -> None:
    print(f"strata worker on {endpoint} serves:")
    for d in devices:
        extra = f", {threads} thread(s)" if d.get("type") == "cpu" else ""
        print(f"  {d['name']:<8} {d.get('description') or ''}: {_fmt(int(d.get('free', 0)))} free of "
              f"{_fmt(int(d.get('total', 0)))}{extra}")
    others = [d["name"] for d in local if d not in devices and d.get("type") != "meta"]
    if others:
        print(f"  (also here, not served: {', '.join(others)}; choose with --device)")
    print(f"tensor cache: {cache or 'off'}")
    host, port = endpoint.rsplit(":", 1)
    reach = f"<this machine's address>:{port}" if host == "0.0.0.0" else endpoint
    print(f"clients add it with STRATA_RPC={reach}", flush=True)


def _spawn(endpoint: str, names: list[str], threads: int, cache: str | None) -> subprocess.Popen:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "app.ggml.rpc_serve", "--endpoint", endpoint, "--devices", ",".join(names),
           "--threads", str(threads)]
    if cache:
        cmd += ["--cache-dir", cache]
    return subprocess.Popen(cmd, env=env)


def _wait_ready(proc: subprocess.Popen, endpoint: str, timeout: float = 60.0) -> bool:
    host, port = endpoint.rsplit(":", 1)
    probe = f"127.0.0.1:{port}" if host == "0.0.0.0" else endpoint
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            hello(probe, timeout=2.0)
            return True
        except WorkerError:
            time.sleep(0.2)
    return False


def _supervise(endpoint: str, names: list[str], threads: int, cache: str | None) -> int:
    """Run the serving child until SIGINT/SIGTERM; start it again when it dies (not more than
    RESTARTS_PER_MINUTE times a minute: then something is wrong that a restart does not fix)."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    starts: list[float] = []
    while not stop.is_set():
        now = time.monotonic()
        starts = [t for t in starts if now - t < 60] + [now]
        if len(starts) > RESTARTS_PER_MINUTE:
            print(f"strata worker: the RPC server died {RESTARTS_PER_MINUTE} times in a minute; giving up",
                  file=sys.stderr)
            return 1
        proc = _spawn(endpoint, names, threads, cache)
        if _wait_ready(proc, endpoint):
            print(f"strata worker: ready on {endpoint} (pid {proc.pid}); Ctrl+C to stop", flush=True)
        while not stop.is_set() and proc.poll() is None:
            stop.wait(0.5)
        if stop.is_set():
            break
        code = proc.returncode
        if code == 3:                    # could not start at all (port, device): a restart would not help
            return 1
        print(f"strata worker: the RPC server ended ({_describe(code)}); starting it again", file=sys.stderr,
              flush=True)
        time.sleep(1.0)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print("strata worker: stopped", file=sys.stderr)
    return 0


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"
