"""Everything the runner CHILD process runs. Never imported by the service process (docs/architecture.md).

Importing this package makes the C++ runtime global BEFORE any runner module maps libllama (they import
llama_cpp at their top): with a llama.cpp build that carries static copies of libstdc++, a runner whose process
has loaded the system libstdc++ first (spawn re-imports the parent's main module, which may import numpy) dies in
std::regex at every model load (docs/architecture.md, "llama.cpp facts" 15).
Covered by tests/unit/engine/runner/test_runner_package.py.
"""
import os

from app.ggml import cxx_runtime

cxx_runtime.preload()
# llama_cpp's bindings for libmtmd (images: runner/prompt/media.py) look for it under MTMD_CPP_LIB only:
# with a llama.cpp build named by LLAMA_CPP_LIB_PATH (a CUDA build of one's own) the runner would fail on
# import, or pair that libllama with the wheel's libmtmd
if os.environ.get("LLAMA_CPP_LIB_PATH") and not os.environ.get("MTMD_CPP_LIB"):
    os.environ["MTMD_CPP_LIB"] = os.environ["LLAMA_CPP_LIB_PATH"]
