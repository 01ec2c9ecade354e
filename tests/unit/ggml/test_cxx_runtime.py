"""app.ggml.cxx_runtime: the C++ runtime is made global before llama.cpp loads, even after numpy loaded it
privately (the order that crashed a static-libstdc++ CUDA build of llama.cpp; see docs/gpu-results.md).
Each case runs in a fresh interpreter: what is loaded, and how, is per process."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import repo_paths

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dlopen scopes are a Linux matter")

ROOT = str(repo_paths.ROOT)

# a libstdc++ function looked up in the GLOBAL scope (dlsym(RTLD_DEFAULT)): found only once the library is global
PROBE = """
import ctypes, sys
def global_has_cxx():
    try:
        ctypes.CDLL(None).__getattr__("_ZNSt6locale7classicEv")
        return True
    except AttributeError:
        return False
"""


def _run(body: str) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", PROBE + body], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_preload_makes_libstdcxx_global_after_numpy_loaded_it_locally():
    out = _run("""
import numpy  # loads libstdc++ as a private dependency (RTLD_LOCAL)
maps = open('/proc/self/maps').read()
print('mapped' if 'libstdc++' in maps else 'not-mapped', global_has_cxx())
from app.ggml import cxx_runtime
print(cxx_runtime.preload(), global_has_cxx(), cxx_runtime.preload())
""")
    first, second = out.splitlines()
    assert first.endswith("False"), out          # before: not in the global scope, whatever numpy did
    assert second == "True True True", out       # after: global, and a second call is a no-op


def test_preload_is_too_late_once_llama_cpp_is_loaded():
    out = _run("""
from llama_cpp import llama_cpp
from app.ggml import cxx_runtime
print(cxx_runtime.preload())
""")
    assert out == "False"


def test_engine_entry_points_preload_before_llama_cpp():
    """llama_log.install() (the first llama.cpp use of the runner, the probe and the dry run) preloads."""
    out = _run("""
from app.ggml import llama_log
llama_log.install()
import sys
print(global_has_cxx(), 'llama_cpp.llama_cpp' in sys.modules)
""")
    assert out == "True True"
