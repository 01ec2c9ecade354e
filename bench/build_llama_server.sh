#!/usr/bin/env bash
# Build llama.cpp's llama-server from the SAME llama.cpp that llama-cpp-python 0.3.36 vendors (its PyPI sdist),
# so the benchmark compares the engine against the identical kernels. Output: bench/_build/llama-server (git-ignored).
# Usage: bench/build_llama_server.sh   (JOBS=2 by default; takes ~6-10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")"
BUILD=_build
VERSION=0.3.36
PIP=${PIP:-../.venv/bin/pip}
JOBS=${JOBS:-2}
mkdir -p "$BUILD"
if [ -x "$BUILD/llama-server" ]; then echo "$BUILD/llama-server already built"; exit 0; fi
if ! ls "$BUILD"/llama_cpp_python-$VERSION.tar.gz >/dev/null 2>&1; then
  "$PIP" download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$BUILD"
fi
if [ ! -d "$BUILD/src" ]; then
  mkdir -p "$BUILD/src"
  tar -xzf "$BUILD"/llama_cpp_python-$VERSION.tar.gz -C "$BUILD/src" --strip-components=1
fi
LLAMA="$BUILD/src/vendor/llama.cpp"
# Same flags as our llama-cpp-python build (Makefile LLAMA_CMAKE_ARGS: GGML_NATIVE on, RPC on, AMX matmul off);
# no UI download, no curl/openssl.
cmake -S "$LLAMA" -B "$BUILD/cmake" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DGGML_RPC=ON "-DCMAKE_C_FLAGS=-U__AMX_INT8__" "-DCMAKE_CXX_FLAGS=-U__AMX_INT8__" ${CMAKE_EXTRA:-}
cmake --build "$BUILD/cmake" --target llama-server -j "$JOBS"
# llama.cpp's own RPC worker (tools/rpc: target ggml-rpc-server), for comparing with `strata worker`
cmake --build "$BUILD/cmake" --target ggml-rpc-server -j "$JOBS"
cp "$BUILD/cmake/bin/ggml-rpc-server" "$BUILD/rpc-server"
cp "$BUILD/cmake/bin/llama-server" "$BUILD/llama-server"
echo "built $BUILD/llama-server"
