#!/usr/bin/env bash
# Strata's checks on a lent NVIDIA GPU machine (no network): build llama.cpp (the exact copy llama-cpp-python
# 0.3.36 vendors) with CUDA for this GPU, point the engine's ctypes bindings at it, and run the stages asked for.
# bench/gpu_prepare.sh (run on the development machine) fills the carried folder first:
#   .gpu/llama-src.tgz   vendor/llama.cpp of the sdist, without models/docs/tests/other backends (6 MB)
#   .gpu/py/llama_cpp    the sdist's pure-Python package (the bindings; LLAMA_CPP_LIB_PATH points them at our build)
#   .gpu/whl/            py3 wheels the machine lacks (gguf, diskcache, platformdirs)
#   .gpu/tok.gguf        SmolLM2's tokenizer keys (tests/support/gguf_factory.py reads them via STRATA_TOKENIZER_GGUF)
#   .gpu/wt/             this checkout's app/, tests/, bench/, pyproject.toml
#   .gpu/prebuilt/       optional: the build of an earlier call (bin.tar.xz.part-*), skips the compile
# Usage (on the device, from the repository root): DEADLINE=585 bash .gpu/wt/bench/gpu_session.sh STAGE...
#   stages, run in the order given:
#     facts build pack models bisect layoutcheck test moebench opoffload verify opodense genprobe   (issue 18's)
#     bg-build / wait-build   the build in the background (stages that need it wait for it)
#     bg-models               the models of MODELS (default "host dense3b") written in the background, in order
#     hoststep  engine  opodense  longctx  restart   (issues 37, 38; each waits for its models and the build)
#     summary                 the tables of every finished stage, printed (also at the end)
# DEADLINE (seconds after the start): a stage whose estimate (EST below) does not fit before it is skipped, and a
# stage that runs is killed at DEADLINE - RESERVE, so the call ends inside its limit; the results of every finished
# stage are in $OUT/results.tgz (and its tables in $OUT/summary.md) before the next starts.
# Overrides for a dry run without a GPU: SKIP_BUILD=1 (no build), LIB (LLAMA_CPP_LIB_PATH), SERVER, BENCH (the
# binaries), PY (the interpreter), M / R (models / results folders), and *_ARGS appended to each stage's command.
set -uo pipefail
G=$(cd "$(dirname "$0")/../.." && pwd)
WT=$G/wt
B=${BUILD_DIR:-/tmp/strata-llama}   # build dir: survives between calls while the machine stays warm
SRC=/tmp/strata-src
M=${M:-/tmp/strata-models}
R=${R:-/tmp/strata-results}
OUT=${OUT:-/tmp/strata-out}
PY=${PY:-python3}
LIB=${LIB:-$B/bin}
SERVER=${SERVER:-$B/bin/llama-server}
BENCH=${BENCH:-$B/bin/llama-bench}
SITE=${SITE:-/tmp/site}
T0=${T0:-$(date +%s)}
DEADLINE=${DEADLINE:-}
RESERVE=${RESERVE:-12}              # seconds kept after a killed stage: the results are packed, the call returns
mkdir -p "$R" "$OUT" "$M"
export PYTHONUNBUFFERED=1
THREADS=${THREADS:-$(( $(nproc) - 1 ))}
BUDGET_MOE=${BUDGET_MOE:-3}
BUDGET_DENSE=${BUDGET_DENSE:-1}

el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

pyenv() {
  if [ ! -d "$SITE/gguf" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$G"/whl/*.whl || return 1
  fi
  export PYTHONPATH=$WT:$WT/tests/support:$G/py:$SITE${PYPATH_EXTRA:+:$PYPATH_EXTRA}
  export LLAMA_CPP_LIB_PATH=$LIB
  export MTMD_CPP_LIB=$LIB          # the bindings' mtmd_cpp ignores LLAMA_CPP_LIB_PATH (the runner imports it)
  export STRATA_TOKENIZER_GGUF=$G/tok.gguf
  export STRATA_HOME=/tmp/strata-home
}

# seconds a stage may run: its own cap, cut to what is left before DEADLINE - RESERVE
cap() {
  local want=$1
  if [ -n "$DEADLINE" ]; then
    local left=$(( DEADLINE - RESERVE - ($(date +%s) - T0) ))
    [ "$left" -lt "$want" ] && want=$left
  fi
  [ "$want" -lt 5 ] && want=5
  echo "$want"
}

# run a stage's command under `timeout` (its own process group, signalled whole at the cap), then end whatever of
# that group outlived it (a server or runner a failing script did not stop would hold the GPU and CPUs)
limited() {   # $1: cap in seconds, rest: the command
  local t p rc left; t=$(cap "$1"); shift
  timeout -k 5 "$t" "$@" &
  p=$!
  wait "$p"; rc=$?
  [ "$rc" -eq 124 ] && el "killed after $t s (cap or deadline)"
  left=$(ps -eo pid=,pgid=,stat=,args= | awk -v g="$p" '$2 == g && $3 !~ /^Z/ {print $1, substr($0, index($0, $4), 100)}')
  if [ -n "$left" ]; then
    el "ending what the stage left running: $(echo "$left" | tr '\n' ';')"
    kill -TERM -- "-$p" 2>/dev/null; sleep 2; kill -KILL -- "-$p" 2>/dev/null
  fi
  return "$rc"
}

BUILD_PID=
MODELS_PID=
wait_build() {
  if [ -n "$BUILD_PID" ]; then
    el "waiting for the build"
    wait "$BUILD_PID"; local rc=$?; BUILD_PID=
    tail -5 "$R/build-stage.log"
    [ "$rc" -eq 0 ] || { el "build FAILED ($rc)"; tail -40 "$R/build-stage.log"; }
  fi
  [ -e "$LIB/libllama.so" ] && [ -e "$LIB/libmtmd.so" ] || { el "no libllama.so / libmtmd.so in $LIB"; return 1; }
}

wait_model() {   # $1: a model file; done only once its group's writer has marked it (a killed writer leaves none)
  local f=$1 n=0
  while [ ! -f "$M/.$(basename "$f").done" ]; do
    if [ -z "$MODELS_PID" ] || ! kill -0 "$MODELS_PID" 2>/dev/null; then
      [ -f "$M/.$(basename "$f").done" ] && break
      el "model $f not written (add bg-models; MODELS='${MODELS:-host dense3b}')"; tail -5 "$R/models.log" 2>/dev/null
      return 1
    fi
    n=$((n + 1)); [ $((n % 20)) -eq 1 ] && el "waiting for $(basename "$f")"
    sleep 1
  done
}

write_models() {   # in the background: each group in order; a marker per file once its whole group is written
  local which f
  for which in ${MODELS:-host dense3b}; do
    [ -f "$M/.group-$which.done" ] && { el "models $which: already here"; continue; }
    el "writing models: $which"
    "$PY" "$WT/bench/gpu_models.py" "$M" "$which" || { el "models $which FAILED"; continue; }
    for f in "$M"/*.gguf; do touch "$M/.$(basename "$f").done"; done
    touch "$M/.group-$which.done"
  done
  el "models written"
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
  cmake --build "$B" -j "$(nproc)" --target llama-server llama-bench mtmd > "$R/build.log" 2>&1 || {
    tail -60 "$R/build.log"; return 1; }
  el "built: $(ls "$B/bin" | tr '\n' ' ')"
}

stage_pack() {   # bring the build back (<= 4 x 15 MiB) so a fresh machine can skip the compile
  wait_build || return 1
  limited 120 bash -c "cd '$B/bin' && tar -cf - ./*.so* llama-server llama-bench | xz -T0 -6 > /tmp/bin.tar.xz" || {
    rm -f /tmp/bin.tar.xz; el "pack: not finished"; return 1; }
  ls -la /tmp/bin.tar.xz
  if [ "$(stat -c %s /tmp/bin.tar.xz)" -le $((60 * 1024 * 1024)) ]; then
    split -b 15m /tmp/bin.tar.xz "$OUT/bin.tar.xz.part-"; ls -la "$OUT"
  else echo "pack: too large to bring back"; fi
}

stage_models() {
  pyenv
  [ -f "$M/moe-30b.gguf" ] && [ -f "$M/dense-3b.gguf" ] && [ -f "$M/moe-small.gguf" ] && { el "models: here"; return 0; }
  "$PY" "$WT/bench/gpu_models.py" "$M" all
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

stage_genprobe() {
  pyenv; el "generation probe"
  timeout 400 python3 "$WT/bench/gpu_gen_probe.py" "$M/moe-30b.gguf" --budget-gib "$BUDGET_MOE" \
    --server "$B/bin/llama-server" --threads "${PROBE_THREADS:-15,12,8}" --logs "$R/server-logs" \
    --json "$R/genprobe.json" 2>&1 | grep -v "WARNING strata.llama" | tee "$R/genprobe.txt"
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

stage_opodense() {   # op_offload on a dense model partly on the CPU, min batch 32 (default) and 64 (issue 37)
  wait_model "$M/dense-3b.gguf" || return 1
  wait_build || return 1; pyenv; el "op_offload dense-3b under $BUDGET_DENSE GiB: min batch 32 and 64"
  limited 150 "$PY" "$WT/bench/gpu_op_offload.py" --bench "$BENCH" --threads "$THREADS" \
    "$M/dense-3b.gguf:$BUDGET_DENSE" --prompts 32,48,64,128,512 --n-gen 0 --reps 3 --min-batch 64 \
    --json "$R/opodense.json" ${OPO_ARGS:-} 2>&1 | tee "$R/opodense.txt"
}

stage_hoststep() {   # async batch preparation: host time per step with all layers on the GPU (issue 37)
  wait_model "$M/smollm2-shape.gguf" && wait_model "$M/qwen05-shape.gguf" || return 1
  wait_build || return 1; pyenv; el "host time per step, async prep off/auto"
  limited 150 "$PY" "$WT/bench/bench_host_step.py" --gpu --threads "$THREADS" --reps 2 --tokens 128 \
    --streams 1,4,16 --models "$M/smollm2-shape.gguf,$M/qwen05-shape.gguf" ${HOST_ARGS:-} 2>&1 \
    | tee "$R/hoststep.txt"
}

stage_engine() {   # Strata's service over HTTP vs llama-server, all layers on the GPU: decode 1/4 streams, prompt
  wait_model "$M/smollm2-shape.gguf" && wait_model "$M/qwen05-shape.gguf" || return 1
  wait_build || return 1; pyenv
  local m
  for m in ${ENGINE_MODELS:-smollm2-shape qwen05-shape}; do
    el "bench_engine $m"
    limited 90 "$PY" "$WT/bench/bench_engine.py" --model "$M/$m.gguf" --server "$SERVER" --threads "$THREADS" \
      --reps 3 --metrics gen,streams,prompt,ttft --reps-table --json "$R/engine-$m.json" ${ENGINE_ARGS:-} 2>&1 \
      | tee "$R/engine-$m.txt"
  done
}

stage_longctx() {   # prefill and decode at 1k-30k tokens of context, Strata vs llama-server (issue 38)
  local m=${LONG_MODEL:-qwen05-shape}
  wait_model "$M/$m.gguf" || return 1
  wait_build || return 1; pyenv; el "long context $m"
  limited 170 "$PY" "$WT/bench/bench_long_context.py" --model "$M/$m.gguf" --server "$SERVER" \
    --threads "$THREADS" --ctx 32768 --sizes 1024,4096,16384,30000 --reps 2 --long-reps 2 \
    --json "$R/longctx-$m.json" ${LONG_ARGS:-} 2>&1 | tee "$R/longctx-$m.txt"
}

stage_restart() {   # a restart of the service: the 16k-token prefix from the prompt cache on disk (issue 38)
  local m=${LONG_MODEL:-qwen05-shape}
  wait_model "$M/$m.gguf" || return 1
  wait_build || return 1; pyenv; el "restart $m"
  limited 120 "$PY" "$WT/bench/bench_long_context.py" --model "$M/$m.gguf" --server "$SERVER" \
    --threads "$THREADS" --ctx 32768 --sizes "" --restart 16384 --json "$R/restart-$m.json" ${RESTART_ARGS:-} 2>&1 \
    | tee "$R/restart-$m.txt"
}

summary() {   # the tables and verdict lines of every stage's output, for output_tail and $OUT/summary.md
  {
    echo "# GPU session summary ($(date -u +%FT%TZ), $(( $(date +%s) - T0 )) s in)"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
    local f
    for f in "$R"/facts-short.txt "$R"/hoststep.txt "$R"/engine-*.txt "$R"/opodense.txt "$R"/longctx-*.txt \
             "$R"/restart-*.txt; do
      [ -f "$f" ] || continue
      echo; echo "## $(basename "$f" .txt)"
      if grep -q '^|' "$f"; then
        grep -E '^\||^#+ |^model |hidden share|identical|plan sets|planner op_offload|Traceback|Error|error:|^Strata|killed' "$f" \
          | grep -v '^# rep ' | cut -c1-400
      else tail -40 "$f" | cut -c1-300; fi     # no table yet (killed, failed): its last lines
    done
  } > "$R/summary.md"
  cp "$R/summary.md" "$OUT/summary.md"
}

pack_results() {
  summary
  tar -czf "$OUT/results.tgz" -C "$R" --exclude='*.gguf' . 2>/dev/null
}

# rough seconds per stage on an H100/H200 with 16 CPUs: with DEADLINE (seconds after start), a stage that would not
# finish in time is skipped, so the call ends inside its limit and returns what it has
declare -A EST=([build]=420 [pack]=60 [models]=60 [bisect]=100 [layoutcheck]=40 [test]=150 [moebench]=240
                [opoffload]=300 [verify]=200 [facts]=5 [opodense]=70 [genprobe]=200 [hoststep]=60 [engine]=60
                [longctx]=70 [restart]=60)
for kv in ${EST_OVERRIDE:-}; do EST[${kv%%=*}]=${kv#*=}; done     # e.g. EST_OVERRIDE="longctx=40 engine=30"
pyenv || el "python env FAILED"
el "start; DEADLINE=${DEADLINE:-none}; stages: $*"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | tee "$R/facts-short.txt"
echo "cpus $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); $("$PY" --version 2>&1); $(nvcc --version 2>/dev/null | tail -1)" \
  | tee -a "$R/facts-short.txt"
STAGES=()
for s in "$@"; do   # "unfinished": the stages an earlier call on this machine skipped or cut short
  if [ "$s" = unfinished ]; then
    [ -f "$R/unfinished.txt" ] && mapfile -t -O "${#STAGES[@]}" STAGES < <(awk '!seen[$0]++' "$R/unfinished.txt")
    rm -f "$R/unfinished.txt"
  else STAGES+=("$s"); fi
done
el "stages to run: ${STAGES[*]}"
for s in "${STAGES[@]}"; do
  if [ -n "$DEADLINE" ] && [ $(( $(date +%s) - T0 + ${EST[$s]:-0} )) -gt "$DEADLINE" ]; then
    el "skipping $s (estimate ${EST[$s]:-0} s does not fit before the deadline $DEADLINE s)"
    echo "$s" >> "$R/unfinished.txt"; continue; fi
  case "$s" in
    facts) facts 2>&1 | tee -a "$R/facts.txt" ;;
    bg-build)
      if [ -n "${SKIP_BUILD:-}" ]; then el "build skipped (SKIP_BUILD)"
      else stage_build > "$R/build-stage.log" 2>&1 & BUILD_PID=$!; el "build started in the background"; fi ;;
    wait-build) wait_build ;;
    build) [ -n "${SKIP_BUILD:-}" ] || stage_build || el "stage build FAILED" ;;
    bg-models) write_models > "$R/models.log" 2>&1 & MODELS_PID=$!; el "models started in the background" ;;
    wait-models) [ -n "$MODELS_PID" ] && wait "$MODELS_PID"; cat "$R/models.log" ;;
    pack|models|bisect|layoutcheck|test|moebench|opoffload|verify|opodense|genprobe|hoststep|engine|longctx|restart)
      el "stage $s"
      "stage_$s"; rc=$?
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "$s" >> "$R/unfinished.txt"; fi
      [ "$rc" -eq 0 ] || el "stage $s FAILED ($rc)"
      el "stage $s ended"
      pack_results ;;
    summary) summary; cat "$R/summary.md" ;;
    *) echo "unknown stage $s" ;;
  esac
done
[ -n "$BUILD_PID" ] && kill "$BUILD_PID" 2>/dev/null
[ -n "$MODELS_PID" ] && kill "$MODELS_PID" 2>/dev/null
el "done"
pack_results
cat "$R/summary.md"
ls -la "$OUT"
