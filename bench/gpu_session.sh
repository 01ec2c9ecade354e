#!/usr/bin/env bash
# Issue 18's checks on a lent NVIDIA GPU machine (no network): build llama.cpp (the exact copy llama-cpp-python
# 0.3.36 vendors) with CUDA for this GPU, point the engine's ctypes bindings at it, and run the stages asked for.
# bench/gpu_prepare.sh (run on the development machine) fills the carried folder first:
#   .gpu/llama-src.tgz   vendor/llama.cpp of the sdist, without models/docs/tests/other backends (6 MB)
#   .gpu/py/llama_cpp    the sdist's pure-Python package (the bindings; LLAMA_CPP_LIB_PATH points them at our build)
#   .gpu/whl/            py3 wheels the machine lacks (gguf, diskcache, platformdirs)
#   .gpu/tok.gguf        SmolLM2's tokenizer keys (tests/support/gguf_factory.py reads them via STRATA_TOKENIZER_GGUF)
#   .gpu/wt/             this checkout's app/, tests/, bench/, pyproject.toml
#   .gpu/prebuilt/       optional: the build of an earlier call (bin.tar.xz.part-*), skips the compile
# Usage (on the device, from the repository root): bash .gpu/wt/bench/gpu_session.sh STAGE...
#   stages: build models bisect layoutcheck test moebench opoffload verify pack hoststep
set -uo pipefail
G=$(cd "$(dirname "$0")/../.." && pwd)
WT=$G/wt
B=/tmp/strata-llama                 # build dir: survives between calls while the machine stays warm
SRC=/tmp/strata-src
M=/tmp/strata-models
R=/tmp/strata-results
OUT=${OUT:-/tmp/strata-out}
T0=$(date +%s)
mkdir -p "$R" "$OUT" "$M"
export PYTHONUNBUFFERED=1
THREADS=${THREADS:-$(( $(nproc) - 1 ))}
BUDGET_MOE=${BUDGET_MOE:-3}
BUDGET_DENSE=${BUDGET_DENSE:-1}

el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

pyenv() {
  if [ ! -d /tmp/site/gguf ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$G"/whl/*.whl || return 1
  fi
  export PYTHONPATH=$WT:$WT/tests:$G/py:/tmp/site
  export LLAMA_CPP_LIB_PATH=$B/bin
  export STRATA_TOKENIZER_GGUF=$G/tok.gguf
  export STRATA_HOME=/tmp/strata-home
}

facts() {
  el "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current \
    --format=csv 2>&1 | tail -n +1
  nvcc --version | tail -2; cmake --version | head -1; gcc --version | head -1
  echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"; free -g | head -2
  python3 --version
  echo "toolchain: libstdc++.so for g++ = $(g++ -print-file-name=libstdc++.so); LDFLAGS='${LDFLAGS:-}'"
  ls -la "$(dirname "$(g++ -print-file-name=libstdc++.a)")" 2>/dev/null | grep -i "stdc++" | head -5
  printf '#include <string>\nstd::string f(){return "x";}\n' > /tmp/t.cpp && g++ -shared -fPIC /tmp/t.cpp -o /tmp/libt.so \
    && echo "a g++ -shared test library NEEDs: $(readelf -d /tmp/libt.so | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"
  env | grep -iE "cmake|flags|^ld_|^cc=|^cxx=|cuda_?host" | sed 's/^/env: /'
  [ -e "$B/CMakeCache.txt" ] && grep -E "^CMAKE_(SHARED|EXE)_LINKER_FLAGS|^CMAKE_CXX_FLAGS:|^CMAKE_CUDA_FLAGS:|^CMAKE_CUDA_RUNTIME" "$B/CMakeCache.txt"
  [ -e "$B/bin/libllama.so" ] && echo "libllama NEEDs: $(readelf -d "$B/bin/libllama.so" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"
}

configure() {   # $@: extra cmake args
  local gen=Ninja
  command -v ninja > /dev/null || gen="Unix Makefiles"
  cmake -S "$SRC/llama.cpp" -B "$B" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF "$@" \
    > "$R/cmake.log" 2>&1
}

stage_build() {
  if [ -x "$B/bin/llama-server" ] && [ -x "$B/bin/llama-bench" ] && [ -e "$B/bin/libllama.so" ]; then
    el "build: already here"; return 0; fi
  if ls "$G"/prebuilt/bin.tar.xz.part-* >/dev/null 2>&1; then
    mkdir -p "$B/bin" && cat "$G"/prebuilt/bin.tar.xz.part-* | xz -d | tar -x -C "$B/bin" && \
      el "build: unpacked the carried prebuilt binaries" && return 0
  fi
  rm -rf "$SRC" && mkdir -p "$SRC" && tar -xzf "$G/llama-src.tgz" -C "$SRC"
  el "configure"
  if ! configure; then
    # toolkits without cuBLAS / the driver library in the usual places: hint CMake at them
    extra=()
    cub=$(python3 -c "import nvidia.cublas, os; print(list(nvidia.cublas.__path__)[0])" 2>/dev/null)
    if grep -q "CUDA_cublas_LIBRARY.*NOTFOUND\|CUDA::cublas" "$R/cmake.log" && [ -n "$cub" ]; then
      lib=$(ls "$cub"/lib/libcublas.so* | head -1); lt=$(ls "$cub"/lib/libcublasLt.so* | head -1)
      extra+=("-DCUDA_cublas_LIBRARY=$lib" "-DCUDA_cublasLt_LIBRARY=$lt" "-DCMAKE_CUDA_FLAGS=-I$cub/include"
              "-DCMAKE_CXX_FLAGS=-I$cub/include")
    fi
    drv=$(ls /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* 2>/dev/null | head -1)
    if [ -n "$drv" ]; then extra+=("-DCUDA_cuda_driver_LIBRARY=$drv"); else extra+=("-DGGML_CUDA_NO_VMM=ON"); fi
    el "configure again with ${extra[*]}"
    rm -rf "$B"
    configure "${extra[@]}" || { tail -40 "$R/cmake.log"; return 1; }
  fi
  grep -E "CUDA Toolkit|CUDA_ARCH|Including CUDA|CUDA host compiler|Adding CPU backend" "$R/cmake.log" | head
  el "compile"
  cmake --build "$B" -j "$(nproc)" --target llama-server llama-bench > "$R/build.log" 2>&1 || {
    tail -60 "$R/build.log"; return 1; }
  el "built: $(ls "$B/bin" | tr '\n' ' ')"
}

stage_pack() {   # bring the build back (<= 4 x 15 MiB) so a fresh machine can skip the compile
  (cd "$B/bin" && tar -cf - ./*.so* llama-server llama-bench) | xz -T0 -6 > /tmp/bin.tar.xz
  ls -la /tmp/bin.tar.xz
  if [ "$(stat -c %s /tmp/bin.tar.xz)" -le $((60 * 1024 * 1024)) ]; then
    split -b 15m /tmp/bin.tar.xz "$OUT/bin.tar.xz.part-"; ls -la "$OUT"
  else echo "pack: too large to bring back"; fi
}

stage_models() {
  pyenv
  [ -f "$M/moe-30b.gguf" ] && [ -f "$M/dense-3b.gguf" ] && [ -f "$M/moe-small.gguf" ] && { el "models: here"; return 0; }
  python3 "$WT/bench/gpu_models.py" "$M" all
}

stage_bisect() {
  pyenv; el "bisect"
  timeout 300 python3 "$WT/bench/gpu_override_bisect.py" "$M/moe-small.gguf" ${BISECT_ARGS:-} 2>&1 | tee "$R/bisect.txt"
}

stage_layoutcheck() {
  pyenv; el "gpu_layout_check (the script that segfaulted)"
  timeout 180 python3 "$WT/bench/gpu_layout_check.py" "$M/moe-small.gguf" --threads 8 2>&1 | grep -v "^\s*$" | tail -30
  echo "gpu_layout_check exit ${PIPESTATUS[0]}"
}

stage_test() {
  pyenv; el "pytest tests/integration/engine/test_runner_gpu.py"
  (cd "$WT" && STRATA_GPU_TEST_MODEL=$M/dense-small.gguf timeout 400 python3 -m pytest -q -s -p no:cacheprovider \
     -rs tests/integration/engine/test_runner_gpu.py 2>&1 | tee "$R/pytest-gpu.txt" | tail -40)
}

stage_moebench() {
  pyenv; el "moe bench (budget $BUDGET_MOE GiB)"
  timeout 560 python3 "$WT/bench/gpu_moe_bench.py" "$M/moe-30b.gguf" --budget-gib "$BUDGET_MOE" \
    --server "$B/bin/llama-server" --threads "$THREADS" --json "$R/moebench.json" --logs "$R/server-logs" \
    ${MOEBENCH_ARGS:-} 2>&1 | tee "$R/moebench.txt"
}

stage_opoffload() {
  pyenv; el "op_offload"
  timeout 560 python3 "$WT/bench/gpu_op_offload.py" --bench "$B/bin/llama-bench" --threads "$THREADS" \
    "$M/dense-3b.gguf:$BUDGET_DENSE" "$M/moe-30b.gguf:$BUDGET_MOE" --json "$R/opoffload.json" ${OPO_ARGS:-} \
    2>&1 | tee "$R/opoffload.txt"
}

stage_opodense() {   # dense only, with GGML_OP_OFFLOAD_MIN_BATCH=64 too (op_offload lost at 32 tokens there)
  pyenv; el "op_offload dense, min batch 64"
  timeout 300 python3 "$WT/bench/gpu_op_offload.py" --bench "$B/bin/llama-bench" --threads "$THREADS" \
    "$M/dense-3b.gguf:$BUDGET_DENSE" --min-batch 64 --json "$R/opoffload-dense64.json" 2>&1 | tee "$R/opoffload-dense64.txt"
}

stage_genprobe() {
  pyenv; el "generation probe"
  timeout 400 python3 "$WT/bench/gpu_gen_probe.py" "$M/moe-30b.gguf" --budget-gib "$BUDGET_MOE" \
    --server "$B/bin/llama-server" --threads "${PROBE_THREADS:-15,12,8}" --logs "$R/server-logs" \
    --json "$R/genprobe.json" 2>&1 | grep -v "WARNING strata.llama" | tee "$R/genprobe.txt"
}

stage_hoststep() {   # async batch preparation: host time per step with all layers on the GPU (issue 37)
  pyenv; el "host time per step, async prep off/auto"
  [ -f "$M/smollm2-shape.gguf" ] || python3 "$WT/bench/gpu_models.py" "$M" host
  timeout 500 python3 "$WT/bench/bench_host_step.py" --gpu --threads "$THREADS" --reps 3 --tokens 128 \
    --models "$M/smollm2-shape.gguf,$M/qwen05-shape.gguf" 2>&1 | tee "$R/hoststep.txt"
}

stage_verify() {
  pyenv; el "predicted vs actual"
  cat > "$R/verify-cases.json" <<EOF
[{"name": "dense-3b all on GPU", "model": "$M/dense-3b.gguf", "budget_gib": null,
  "combos": [[4096, 1, "f16"], [8192, 4, "q8_0"]]},
 {"name": "dense-3b partial", "model": "$M/dense-3b.gguf", "budget_gib": $BUDGET_DENSE,
  "combos": [[4096, 1, "f16"], [2048, 2, "q8_0"]]},
 {"name": "moe-30b experts part CPU", "model": "$M/moe-30b.gguf", "budget_gib": $BUDGET_MOE,
  "combos": [[4096, 1, "f16"], [2048, 4, "q8_0"]]},
 {"name": "moe-30b all on GPU", "model": "$M/moe-30b.gguf", "budget_gib": null, "combos": [[4096, 1, "f16"]]},
 {"name": "moe-30b 1.5 GiB", "model": "$M/moe-30b.gguf", "budget_gib": 1.5, "combos": [[4096, 1, "f16"]]},
 {"name": "moe-30b 5 GiB", "model": "$M/moe-30b.gguf", "budget_gib": 5, "combos": [[4096, 1, "f16"]]},
 {"name": "moe-small 0.06 GiB", "model": "$M/moe-small.gguf", "budget_gib": 0.06, "combos": [[2048, 1, "f16"]]}]
EOF
  timeout 560 python3 "$WT/bench/gpu_verify.py" "$R/verify-cases.json" --json "$R/verify.json" 2>&1 | tee "$R/verify.txt"
}

# rough seconds per stage: with DEADLINE (seconds after start), a stage that would not finish in time is skipped,
# so the call ends inside its limit and returns what it has
declare -A EST=([build]=420 [pack]=60 [models]=60 [bisect]=100 [layoutcheck]=40 [test]=150 [moebench]=240
                [opoffload]=300 [verify]=200 [facts]=5 [opodense]=120 [genprobe]=200 [hoststep]=400)
pyenv || el "python env FAILED"
MODELS_PID=
for s in "$@"; do
  if [ -n "${DEADLINE:-}" ] && [ $(( $(date +%s) - T0 + ${EST[$s]:-0} )) -gt "$DEADLINE" ]; then
    el "skipping $s (not enough time left before the deadline $DEADLINE s)"; continue; fi
  case "$s" in
    facts) facts 2>&1 | tee -a "$R/facts.txt" ;;
    build|pack|models|bisect|layoutcheck|test|moebench|opoffload|verify|opodense|genprobe|hoststep)
      "stage_$s" || el "stage $s FAILED"
      tar -czf "$OUT/results.tgz" -C "$R" . 2>/dev/null ;;
    bg-models) stage_models > "$R/models.log" 2>&1 & MODELS_PID=$! ;;
    wait-models) [ -n "$MODELS_PID" ] && wait "$MODELS_PID"; cat "$R/models.log" ;;
    *) echo "unknown stage $s" ;;
  esac
done
el "done"
tar -czf "$OUT/results.tgz" -C "$R" . 2>/dev/null
ls -la "$OUT"
