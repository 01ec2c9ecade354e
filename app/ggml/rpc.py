"""llama.cpp's RPC backend (`ggml-rpc`): the worker side (`start_server`) and the client side (remote devices).

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

import ctypes
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
        s = socket.create_connection(addr, timeout=timeout)
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


# ---------------------------------------------------------------------------------------------------------------
# ctypes over libggml-rpc (the same copy libggml already loaded: it is one of libggml's NEEDED libraries)

_lock = threading.Lock()
_lib = None
_devices: dict[tuple[str, int], int] = {}


def lib() -> ctypes.CDLL:
    """Bind libggml-rpc once per process; OSError if this llama.cpp build has no RPC backend."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        from app.ggml import ggml_lib

        a = ggml_lib.api()                  # loads libllama -> libggml -> libggml-rpc (when built with GGML_RPC)
        try:
            rpc = ggml_lib.open_library("ggml-rpc")
        except OSError as e:
            raise OSError(f"this llama.cpp build has no RPC backend ({e}); rebuild it with -DGGML_RPC=on "
                          f"(make rebuild-engine)") from None
        rpc.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                      ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        rpc.ggml_backend_rpc_start_server.restype = None
        rpc.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
        rpc.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
        rpc.ggml_backend_rpc_get_device_memory.argtypes = [ctypes.c_char_p, ctypes.c_uint32,
                                                           ctypes.POINTER(ctypes.c_size_t),
                                                           ctypes.POINTER(ctypes.c_size_t)]
        rpc.ggml_backend_rpc_get_device_memory.restype = None
        for name, res, args in (("ggml_backend_reg_dev_count", ctypes.c_size_t, [ctypes.c_void_p]),
                                ("ggml_backend_reg_dev_get", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t])):
            f = a.fn(name)
            f.restype, f.argtypes = res, args
        _lib = rpc
        return rpc


def available() -> bool:
    try:
        lib()
        return True
    except OSError:
        return False


def add_worker(endpoint: str, timeout: float = 5.0) -> list[int]:
    """Connect this process to a worker (handshake checked first) and return its device handles, in order."""
    hello(endpoint, timeout)
    from app.ggml import ggml_lib

    rpc = lib()
    reg = rpc.ggml_backend_rpc_add_server(endpoint.encode())
    if not reg:
        raise WorkerError(f"RPC worker {endpoint} serves no device")
    a = ggml_lib.api()
    n = a.fn("ggml_backend_reg_dev_count")(reg)
    handles = [a.fn("ggml_backend_reg_dev_get")(reg, i) for i in range(n)]
    with _lock:
        for i, h in enumerate(handles):
            _devices[(endpoint, i)] = h
    return handles


def device_handle(device_id: str) -> int:
    """The ggml device handle of a remote device id (`RPC<i>[host:port]`), connecting to its worker if needed."""
    parsed = parse_remote_id(device_id)
    if parsed is None:
        raise ValueError(f"{device_id!r} is not a remote device id (RPC<i>[host:port])")
    endpoint, index = parsed
    with _lock:
        h = _devices.get(parsed)
    if h is None:
        handles = add_worker(endpoint)
        if index >= len(handles):
            raise WorkerError(f"RPC worker {endpoint} serves {len(handles)} device(s); {device_id} is not one")
        h = handles[index]
    return h


def device_memory(endpoint: str, index: int) -> tuple[int, int]:
    """(free, total) bytes of a worker's device, asked through llama.cpp (`ggml_backend_rpc_get_device_memory`).
    Call `add_worker` first (it checks that the worker answers; this call would abort otherwise)."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib().ggml_backend_rpc_get_device_memory(endpoint.encode(), index, ctypes.byref(free), ctypes.byref(total))
    return int(free.value), int(total.value)


def start_server(endpoint: str, cache_dir: str | None, n_threads: int, device_handles: list[int]) -> None:
    """Serve `device_handles` on `endpoint` (blocks for ever; returns only if the socket cannot be opened)."""
    devs = (ctypes.c_void_p * len(device_handles))(*device_handles)
    lib().ggml_backend_rpc_start_server(endpoint.encode(), cache_dir.encode() if cache_dir else None,
                                        max(1, int(n_threads)), len(device_handles), devs)
