"""llama.cpp's RPC backend (`ggml-rpc`), the parts that need no library: endpoints, remote device ids, and the
protocol's handshake in Python. The ctypes side (start a server, add a worker's devices, ask their memory) is in
app.ggml.ggml_lib with the rest of the device API.

A worker exposes its local devices over TCP; a client adds a worker's devices with `ggml_backend_rpc_add_server`
and llama.cpp places layers on them like on local GPUs (docs/architecture.md, "Beyond one machine").

Facts about the protocol (ggml/src/ggml-rpc, protocol 7.x) that shape this module:
  - The client side ABORTS the process (GGML_ABORT) when a worker cannot be reached, the handshake fails or a
    worker dies mid-request. So every client-side ggml call here is preceded by `hello()`, a pure-Python
    handshake with a timeout that names the worker when it fails; and the calls only run in child processes
    (device probe, dry run, runner), so an abort ends one child, never the service.
  - A worker serves ONE client connection at a time (its accept loop calls the client handler inline), so a
    worker in use by one runner does not answer another until that runner lets go.
  - Endpoints are IPv4 `host:port` (the server binds with inet_addr, the client resolves with gethostbyname).
  - The client names a worker's device i `RPC<i>[host:port]`: that is also the name of its buffer type, the name
    llama.cpp's `model/KV/compute buffer size` log lines print. Strata uses it as the device id in Layouts.
"""
from __future__ import annotations

import re
import socket
import struct
import threading
from dataclasses import dataclass

PROTO_MAJOR = 7                     # RPC_PROTO_MAJOR_VERSION of the vendored ggml-rpc.h
DEFAULT_PORT = 50052                # llama.cpp's rpc-server default
CONN_CAPS_SIZE = 24                 # RPC_CONN_CAPS_SIZE
CMD_GET_DEVICE_MEMORY, CMD_HELLO, CMD_DEVICE_COUNT = 11, 14, 15

REMOTE_ID = re.compile(r"^RPC(\d+)\[([^\]\s]+:\d+)\]$")
_ENDPOINT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9.\-]*):(\d{1,5})$")


class WorkerError(RuntimeError):
    """A worker could not be used; the message names it and says why."""


def parse_endpoint(text: str) -> str:
    """"host:port" (IPv4 address or host name) normalised, or ValueError saying what is wrong with it."""
    t = (text or "").strip()
    m = _ENDPOINT.match(t)
    if not m:
        raise ValueError(f"RPC worker {text!r} is not host:port (an IPv4 address or host name, then a port; "
                         f"llama.cpp's RPC backend does not speak IPv6)")
    port = int(m.group(2))
    if not 1 <= port <= 65535:
        raise ValueError(f"RPC worker {text!r}: port {port} is out of range 1..65535")
    return f"{m.group(1)}:{port}"


def remote_id(endpoint: str, index: int) -> str:
    """The device id of a worker's device `index` (= llama.cpp's buffer-type name for it)."""
    return f"RPC{index}[{endpoint}]"


def parse_remote_id(device_id: str) -> tuple[str, int] | None:
    """(endpoint, index) of a remote device id, None for a local device id."""
    m = REMOTE_ID.match(device_id or "")
    return (m.group(2), int(m.group(1))) if m else None


def endpoints_of(device_ids) -> list[str]:
    """The workers (host:port) that a list of device ids uses, in order, each once."""
    return list(dict.fromkeys(p[0] for p in map(parse_remote_id, device_ids) if p))


# ---------------------------------------------------------------------------------------------------------------
# the handshake in Python: reachability with a timeout, before any ggml call that would abort instead


@dataclass(frozen=True)
class WorkerInfo:
    endpoint: str
    version: tuple[int, int, int]
    memory: tuple[tuple[int, int], ...]      # (free, total) bytes per device, as the worker reports them


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the worker closed the connection")
        buf += chunk
    return buf


def _call(s: socket.socket, cmd: int, payload: bytes, reply_size: int) -> bytes:
    s.sendall(bytes([cmd]) + struct.pack("<Q", len(payload)) + payload)
    size = struct.unpack("<Q", _recv_exact(s, 8))[0]
    if size != reply_size:
        raise ConnectionError(f"unexpected reply size {size} to command {cmd} (expected {reply_size})")
    return _recv_exact(s, size)


def hello(endpoint: str, timeout: float = 3.0) -> WorkerInfo:
    """Connect, handshake and read the worker's devices and memory; WorkerError naming the worker otherwise.
    The connection is closed at once, so the worker is free for the next client."""
    host, port = endpoint.rsplit(":", 1)
    try:
        addr = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4]
    except (socket.gaierror, UnicodeError, OSError) as e:
        raise WorkerError(f"RPC worker {endpoint}: cannot resolve {host!r} ({e})") from None
    try:
        s = socket.create_connection((str(addr[0]), int(addr[1])), timeout=timeout)      # AF_INET: (ip, port)
    except socket.timeout:
        raise WorkerError(f"RPC worker {endpoint} is unreachable (no answer in {timeout:g} s)") from None
    except OSError as e:
        raise WorkerError(f"RPC worker {endpoint} is unreachable ({e.strerror or e})") from None
    try:
        s.settimeout(timeout)
        rsp = _call(s, CMD_HELLO, bytes(CONN_CAPS_SIZE), 4 + CONN_CAPS_SIZE)
        version = (rsp[0], rsp[1], rsp[2])
        if version[0] != PROTO_MAJOR:
            raise WorkerError(f"RPC worker {endpoint} speaks protocol {'.'.join(map(str, version))}; this build "
                              f"needs {PROTO_MAJOR}.x (run the same Strata/llama.cpp version on both machines)")
        count = struct.unpack("<I", _call(s, CMD_DEVICE_COUNT, b"", 4))[0]
        memory = tuple(struct.unpack("<QQ", _call(s, CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16))
                       for i in range(count))
        return WorkerInfo(endpoint, version, memory)
    except socket.timeout:
        raise WorkerError(f"RPC worker {endpoint} accepted the connection but did not answer in {timeout:g} s "
                          f"(a worker serves one client at a time: is another Strata or llama.cpp using it?)") from None
    except (OSError, ConnectionError, struct.error) as e:
        raise WorkerError(f"RPC worker {endpoint} broke off the handshake ({e})") from None
    finally:
        s.close()


def unreachable(endpoints, timeout: float = 2.0) -> dict[str, str]:
    """{endpoint: why} for each of `endpoints` that does not complete a handshake now (checked in parallel)."""
    out: dict[str, str] = {}
    lock = threading.Lock()

    def check(ep):
        try:
            hello(ep, timeout)
        except WorkerError as e:
            with lock:
                out[ep] = str(e)

    threads = [threading.Thread(target=check, args=(ep,), daemon=True) for ep in dict.fromkeys(endpoints)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 3 + 1)
    return out
