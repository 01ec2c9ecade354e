#!/usr/bin/env bash
# On a GPU machine without network: build llama-cpp-python 0.3.36 with CUDA from a stripped copy of its sdist
# (bench/_build/gpu-engine/src.tar.gz, made from the sdist bench/build_llama_server.sh downloads) into bench/_build/gpulib,
# then run the engine's GPU test on a carried GGUF. Needs nvcc, cmake, ninja,
# scikit-build-core, numpy, jinja2 on the machine. Usage: bench/gpu_check.sh build | test
set -euo pipefail
cd "$(dirname "$0")/.."
G=bench/_build/gpu-engine
case "${1:-}" in
  build)
    rm -rf /tmp/strata-src && mkdir -p /tmp/strata-src && tar -xzf $G/src.tar.gz -C /tmp/strata-src
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DLLAVA_BUILD=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install -q --no-build-isolation --no-deps \
      --target bench/_build/gpulib /tmp/strata-src/src
    ls bench/_build/gpulib/llama_cpp/lib ;;
  test)
    # llama_cpp/__init__ imports diskcache (its disk prompt cache, unused here); a stub when it is not installed
    python3 -c "import diskcache" 2>/dev/null || printf 'class Cache:\n    pass\n' > bench/_build/gpulib/diskcache.py
    PYTHONPATH=bench/_build/gpulib:. STRATA_GPU_TEST_MODEL=$G/dense.gguf python3 -m pytest -q -s -p no:cacheprovider \
      tests/integration/engine/test_runner_gpu.py ;;
  *) echo "usage: $0 build|test"; exit 2 ;;
esac
