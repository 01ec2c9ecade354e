"""The CPU features that decide llama.cpp's weight repacking: asked of ggml's CPU backend (in discovery's child
process), or read from /proc/cpuinfo when ggml cannot be asked. The repack rules themselves are the planner's
(`app/engine/planner/repack.py`); discovery only reports the features."""
from __future__ import annotations

import ctypes
import platform

from app.ggml import ggml_lib


class _Feature(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


def ggml_cpu_features() -> tuple[str, ...]:
    """The CPU backend's own feature list (`ggml_backend_get_features`: what THIS build uses, e.g. AVX2 only if
    compiled in), as names, with "NAME=value" for non-boolean ones (SVE_CNT=32). Loads ggml: call it in a child."""
    a = ggml_lib.api()
    cpu = a.fn("ggml_backend_dev_by_type")(0)          # GGML_BACKEND_DEVICE_TYPE_CPU
    reg = a.fn("ggml_backend_dev_backend_reg")(cpu) if cpu else None
    if not reg:
        return ()
    gpa = a.fn("ggml_backend_reg_get_proc_address")
    gpa.restype, gpa.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
    fp = gpa(reg, b"ggml_backend_get_features")
    if not fp:
        return ()
    feats = ctypes.CFUNCTYPE(ctypes.POINTER(_Feature), ctypes.c_void_p)(fp)(reg)
    out = []
    i = 0
    while feats and feats[i].name:
        name, value = feats[i].name.decode(), (feats[i].value or b"").decode()
        out.append(name if value == "1" else f"{name}={value}")
        i += 1
    return tuple(out)


_CPUINFO_FLAGS = {"avx2": "AVX2", "avx512f": "AVX512", "asimd": "NEON", "asimddp": "DOTPROD", "i8mm": "MATMUL_INT8",
                  "sve": "SVE"}


def cpuinfo_features(cpuinfo_path: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """Fallback when ggml cannot be asked: the flags repack.cpp looks at, from /proc/cpuinfo (x86 `flags`, arm64
    `Features`), assuming a default build (native, repack compiled in). Apple arm64 (no /proc): NEON + DOTPROD."""
    found: set[str] = set()
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    found.update(_CPUINFO_FLAGS[w] for w in rest.split() if w in _CPUINFO_FLAGS)
    except OSError:
        if platform.machine().lower() in ("arm64", "aarch64"):
            found.update(("NEON", "DOTPROD"))
    if not found:
        return ()
    return tuple(sorted(found)) + ("REPACK",)
