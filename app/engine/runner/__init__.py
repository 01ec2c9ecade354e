"""Everything the runner CHILD process runs. Never imported by the service process (docs/architecture.md).

Importing this package makes the C++ runtime global BEFORE any runner module maps libllama (they import
llama_cpp at their top): with a llama.cpp build that carries static copies of libstdc++, a runner whose process
has loaded the system libstdc++ first (spawn re-imports the parent's main module, which may import numpy) dies in
std::regex at every model load (docs/architecture.md, "llama.cpp facts" 15).
"""
from app.ggml import cxx_runtime

cxx_runtime.preload()
