"""Make the process's C++ runtime global before llama.cpp's libraries load (Linux).

Some toolchains link libstdc++ STATICALLY into every shared library they build (the GCC toolchain of
docs/gpu-results.md's machine, for one: the CUDA build of llama.cpp had no `NEEDED libstdc++.so.6` in any of
libllama/libggml*/llama-server), and those copies export their symbols. libllama then binds its C++ runtime calls
to the first copy in its lookup scope (the one inside libggml-cuda), while libstdc++'s GNU-unique symbols (the
locale facet ids) bind process-wide to whichever copy was loaded FIRST. If anything loaded the system libstdc++
before libllama (importing numpy does), the two disagree: std::regex's facet lookups in the tokenizer set-up of
EVERY model load return the wrong facet and the process dies with SIGSEGV (docs/architecture.md, "llama.cpp facts"
15; measured in docs/gpu-results.md).

Loading the system libstdc++ with RTLD_GLOBAL before libllama puts it first in every library's lookup scope, so all
copies resolve to it and agree with its unique symbols, whatever was imported before. With an ordinary build
(libllama NEEDs libstdc++.so.6) this changes nothing. Call `preload()` before the first `import llama_cpp` of a
process; it is idempotent and never raises.
Covered by tests/unit/ggml/test_cxx_runtime.py (each case in a fresh interpreter).
"""
from __future__ import annotations

import ctypes
import logging
import sys

_done = False
CXX_RUNTIME = "libstdc++.so.6"


def preload() -> bool:
    """dlopen the C++ runtime RTLD_GLOBAL (once). True if it is now global; False where there is nothing to do
    (not Linux, no libstdc++ on this system) or llama.cpp is already loaded (too late: say so in the log)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    if "llama_cpp.llama_cpp" in sys.modules:
        logging.getLogger("strata.ggml").debug("cxx_runtime.preload() after llama_cpp was imported: no effect")
        return False
    try:
        ctypes.CDLL(CXX_RUNTIME, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    _done = True
    return True
