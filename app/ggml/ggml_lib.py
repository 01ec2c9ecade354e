"""The ggml backend device API, bound with ctypes on the SAME library copies libllama already loaded.

llama-cpp-python binds no `ggml_backend_*` function, and its `_ggml.py` maps a second copy of libggml
(docs/architecture.md, llama.cpp facts 0). We open the sonames libllama itself needs (`libggml.so.0`, `libggml-base.so.0`):
the dynamic loader hands back the copy already in the process, so buffer-type pointers we get here are the
very pointers llama.cpp compares against (the CPU buffer type in `tensor_buft_overrides` is compared BY POINTER).

Everything here is process-global and lazy: `api()` binds once. Enumerating devices on a CUDA build creates a
CUDA context (hundreds of MiB of VRAM), which is why discovery calls `list_devices()` in a child process.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from app.ggml import cxx_runtime, rpc

# enum ggml_backend_dev_type
DEV_TYPE_CPU, DEV_TYPE_GPU, DEV_TYPE_IGPU, DEV_TYPE_ACCEL, DEV_TYPE_META = range(5)
DEV_TYPE_NAMES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}


class _DevCaps(ctypes.Structure):
    _fields_ = [
        ("async_", ctypes.c_bool),
        ("host_buffer", ctypes.c_bool),
        ("buffer_from_host_ptr", ctypes.c_bool),
        ("events", ctypes.c_bool),
        ("mmap_support", ctypes.c_bool),
    ]


class DevProps(ctypes.Structure):
    """struct ggml_backend_dev_props (ggml-backend.h)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("description", ctypes.c_char_p),
        ("memory_free", ctypes.c_size_t),
        ("memory_total", ctypes.c_size_t),
        ("type", ctypes.c_int),
        ("device_id", ctypes.c_char_p),   # lower-case PCI bus id "0000:c1:00.0" for PCI devices, else NULL
        ("caps", _DevCaps),
    ]


class TensorBuftOverride(ctypes.Structure):
    """struct llama_model_tensor_buft_override (not defined by llama_cpp.py). An array of these ends with a zeroed entry."""
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def lib_dir() -> Path:
    """The directory libllama was loaded from (honours LLAMA_CPP_LIB_PATH like llama_cpp itself)."""
    env = os.environ.get("LLAMA_CPP_LIB_PATH")
    if env:
        return Path(env)
    import llama_cpp   # late: importing it maps libllama (child processes only; docs/architecture.md "Process model")

    return Path(llama_cpp.__file__).parent / "lib"


def _candidates(base: str) -> list[str]:
    if sys.platform == "win32":
        return [f"{base}.dll", f"lib{base}.dll"]
    if sys.platform == "darwin":
        return [f"lib{base}.0.dylib", f"lib{base}.dylib", f"lib{base}.so"]
    return [f"lib{base}.so.0", f"lib{base}.so"]


def _open(base: str) -> ctypes.CDLL:
    d = lib_dir()
    for name in _candidates(base):
        p = d / name
        if p.exists():
            return ctypes.CDLL(str(p))
    raise OSError(f"cannot find {base} library in {d} (tried {', '.join(_candidates(base))})")


@dataclass
class GgmlApi:
    ggml: ctypes.CDLL
    base: ctypes.CDLL

    def fn(self, name: str):
        """A function from whichever of the two libraries exports it (exports moved between them over versions)."""
        for lib in (self.base, self.ggml):
            try:
                return getattr(lib, name)
            except AttributeError:
                continue
        raise AttributeError(f"ggml symbol {name} not found in libggml / libggml-base")


# (name, restype, argtypes). Every pointer is c_void_p: ctypes must never truncate a 64-bit handle to int.
_PROTOTYPES = [
    ("ggml_backend_dev_count", ctypes.c_size_t, []),
    ("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t]),
    ("ggml_backend_dev_by_type", ctypes.c_void_p, [ctypes.c_int]),
    ("ggml_backend_dev_by_name", ctypes.c_void_p, [ctypes.c_char_p]),
    ("ggml_backend_dev_name", ctypes.c_char_p, [ctypes.c_void_p]),
    ("ggml_backend_dev_description", ctypes.c_char_p, [ctypes.c_void_p]),
    ("ggml_backend_dev_memory", None, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
    ("ggml_backend_dev_type", ctypes.c_int, [ctypes.c_void_p]),
    ("ggml_backend_dev_get_props", None, [ctypes.c_void_p, ctypes.POINTER(DevProps)]),
    ("ggml_backend_dev_backend_reg", ctypes.c_void_p, [ctypes.c_void_p]),
    ("ggml_backend_reg_name", ctypes.c_char_p, [ctypes.c_void_p]),
    ("ggml_backend_dev_buffer_type", ctypes.c_void_p, [ctypes.c_void_p]),
    ("ggml_backend_dev_host_buffer_type", ctypes.c_void_p, [ctypes.c_void_p]),
    ("ggml_backend_cpu_buffer_type", ctypes.c_void_p, []),
    ("ggml_backend_buft_name", ctypes.c_char_p, [ctypes.c_void_p]),
    ("ggml_backend_buft_is_host", ctypes.c_bool, [ctypes.c_void_p]),
    ("ggml_backend_buft_get_device", ctypes.c_void_p, [ctypes.c_void_p]),
]
_OPTIONAL = {"ggml_backend_dev_get_props", "ggml_backend_dev_backend_reg", "ggml_backend_reg_name",
             "ggml_backend_dev_host_buffer_type", "ggml_backend_buft_get_device", "ggml_backend_buft_is_host"}

_lock = threading.Lock()
_api: GgmlApi | None = None


def api() -> GgmlApi:
    """Bind once per process. Imports llama_cpp first so libllama (and through it libggml*) is loaded."""
    global _api
    with _lock:
        if _api is not None:
            return _api
        cxx_runtime.preload()                 # before libllama maps (docs/architecture.md, "llama.cpp facts" 15)
        from llama_cpp import llama_cpp as L  # noqa: F401  late: loads libllama and its NEEDED ggml libraries

        a = GgmlApi(ggml=_open("ggml"), base=_open("ggml-base"))
        for name, res, args in _PROTOTYPES:
            try:
                f = a.fn(name)
            except AttributeError:
                if name in _OPTIONAL:
                    continue
                raise
            f.restype = res
            f.argtypes = args
        L.llama_backend_init()
        _api = a
        return a


def _s(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b else ""


def dev_by_name(name: str) -> int:
    """Handle of the ggml device called `name` ("CPU", "CUDA0", ...); ValueError if there is none.
    A remote device id (`RPC<i>[host:port]`) connects this process to that worker (see rpc_device)."""
    if rpc.parse_remote_id(name):
        return rpc_device(name)
    h = api().fn("ggml_backend_dev_by_name")(name.encode())
    if not h:
        raise ValueError(f"no ggml device named {name!r} in this build (devices: {[d['name'] for d in list_devices()]})")
    return h


def cpu_buffer_type() -> int:
    """The CPU buffer-type handle libllama compares overrides against (same pointer as dev_buffer_type(CPU dev))."""
    return api().fn("ggml_backend_cpu_buffer_type")()


def dev_buffer_type(dev_handle: int) -> int:
    return api().fn("ggml_backend_dev_buffer_type")(dev_handle)


def buffer_type_for(device_id: str) -> int:
    """Buffer type for a Layout device id: "CPU" -> the CPU buffer type, else the named device's own buffer type."""
    if device_id.upper() == "CPU":
        return cpu_buffer_type()
    return dev_buffer_type(dev_by_name(device_id))


def list_devices() -> list[dict]:
    """All ggml backend devices, in ggml order, CPU included:
    [{'index','name','description','type','free','total','device_id','backend','handle'}].
    On a GPU build this touches the driver (creates contexts): call it in a child process from the service."""
    a = api()
    out = []
    n = a.fn("ggml_backend_dev_count")()
    for i in range(n):
        h = a.fn("ggml_backend_dev_get")(i)
        if not h:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        a.fn("ggml_backend_dev_memory")(h, ctypes.byref(free), ctypes.byref(total))
        dtype = int(a.fn("ggml_backend_dev_type")(h))
        pci = None
        try:
            props = DevProps()
            a.fn("ggml_backend_dev_get_props")(h, ctypes.byref(props))
            pci = _s(props.device_id) or None
        except AttributeError:
            pass
        backend = ""
        try:
            reg = a.fn("ggml_backend_dev_backend_reg")(h)
            if reg:
                backend = _s(a.fn("ggml_backend_reg_name")(reg))
        except AttributeError:
            pass
        out.append({
            "index": i,
            "name": _s(a.fn("ggml_backend_dev_name")(h)),
            "description": _s(a.fn("ggml_backend_dev_description")(h)),
            "type": DEV_TYPE_NAMES.get(dtype, str(dtype)),
            "free": int(free.value),
            "total": int(total.value),
            "device_id": pci,
            "backend": backend,
            "handle": int(h),
        })
    return out


def supports_gpu_offload() -> bool:
    from llama_cpp import llama_cpp as L   # late: maps libllama (child processes only)

    return bool(L.llama_supports_gpu_offload())


def max_devices() -> int:
    from llama_cpp import llama_cpp as L   # late: maps libllama (child processes only)

    return int(L.llama_max_devices())


# ---------------------------------------------------------------------------------------------------------------
# llama.cpp's RPC backend (docs/architecture.md, llama.cpp facts 14; libggml-rpc is one of libggml's NEEDED libraries, so the loader
# hands back the copy already mapped). The client calls abort the process on a worker that does not answer:
# each is preceded by rpc.hello (a handshake with a timeout), and they run in child processes only.

_rpc_lock = threading.Lock()
_rpc_lib: ctypes.CDLL | None = None
_rpc_devices: dict[tuple[str, int], int] = {}


def rpc_lib() -> ctypes.CDLL:
    """Bind libggml-rpc once per process; OSError if this llama.cpp build has no RPC backend."""
    global _rpc_lib
    a = api()                               # loads libllama -> libggml -> libggml-rpc
    with _rpc_lock:
        if _rpc_lib is not None:
            return _rpc_lib
        try:
            lib = _open("ggml-rpc")
        except OSError as e:
            raise OSError(f"this llama.cpp build has no RPC backend ({e}); rebuild it with -DGGML_RPC=on "
                          f"(make rebuild-engine)") from None
        size_p = ctypes.POINTER(ctypes.c_size_t)
        for name, res, args in (
                ("ggml_backend_rpc_start_server", None, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                         ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]),
                ("ggml_backend_rpc_add_server", ctypes.c_void_p, [ctypes.c_char_p]),
                ("ggml_backend_rpc_get_device_memory", None, [ctypes.c_char_p, ctypes.c_uint32, size_p, size_p])):
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        for reg_fn, reg_res, reg_args in (
                ("ggml_backend_reg_dev_count", ctypes.c_size_t, [ctypes.c_void_p]),
                ("ggml_backend_reg_dev_get", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t])):
            f = a.fn(reg_fn)
            f.restype, f.argtypes = reg_res, reg_args
        _rpc_lib = lib
        return lib


def rpc_add_worker(endpoint: str, timeout: float = 5.0) -> list[int]:
    """Connect this process to a worker (its handshake checked first: rpc.WorkerError names it) and return its
    device handles in order. llama.cpp keeps one connection per worker per process."""
    rpc.hello(endpoint, timeout)
    lib = rpc_lib()
    reg = lib.ggml_backend_rpc_add_server(endpoint.encode())
    if not reg:
        raise rpc.WorkerError(f"RPC worker {endpoint} serves no device")
    a = api()
    handles = [a.fn("ggml_backend_reg_dev_get")(reg, i) for i in range(a.fn("ggml_backend_reg_dev_count")(reg))]
    with _rpc_lock:
        for i, h in enumerate(handles):
            _rpc_devices[(endpoint, i)] = h
    return handles


def rpc_device(device_id: str) -> int:
    """The device handle of a remote device id (`RPC<i>[host:port]`), connecting to its worker on first use."""
    endpoint, index = rpc.parse_remote_id(device_id) or (None, 0)
    if endpoint is None:
        raise ValueError(f"{device_id!r} is not a remote device id (RPC<i>[host:port])")
    with _rpc_lock:
        h = _rpc_devices.get((endpoint, index))
    if h is None:
        handles = rpc_add_worker(endpoint)
        if index >= len(handles):
            raise rpc.WorkerError(f"RPC worker {endpoint} serves {len(handles)} device(s); {device_id} is not one")
        h = handles[index]
    return h


def rpc_device_memory(endpoint: str, index: int) -> tuple[int, int]:
    """(free, total) bytes of a worker's device through llama.cpp (`ggml_backend_rpc_get_device_memory`).
    Call rpc_add_worker first (it checks that the worker answers; this call would abort otherwise)."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    rpc_lib().ggml_backend_rpc_get_device_memory(endpoint.encode(), index, ctypes.byref(free), ctypes.byref(total))
    return int(free.value), int(total.value)


def rpc_start_server(endpoint: str, cache_dir: str | None, n_threads: int, device_handles: list[int]) -> None:
    """Serve `device_handles` on `endpoint` with llama.cpp's RPC server: blocks for ever (the GIL is released);
    returns only when it cannot serve (the socket could not be opened)."""
    devs = (ctypes.c_void_p * len(device_handles))(*device_handles)
    rpc_lib().ggml_backend_rpc_start_server(endpoint.encode(), cache_dir.encode() if cache_dir else None,
                                            max(1, int(n_threads)), len(device_handles), devs)
