#!/usr/bin/env bash
# Fill the folder a `run` on a lent GPU machine carries (see bench/gpu_session.sh): the stripped llama.cpp source of
# llama-cpp-python 0.3.36, its Python bindings, the wheels the machine lacks, SmolLM2's tokenizer keys and this
# checkout's code. Usage: bench/gpu_prepare.sh DEST (an ignored folder of the checkout the device receives)
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
DEST=$1
PY=${PY:-/work/main/.venv/bin/python}
STAGE=${STAGE:-/tmp/strata-gpu-stage}
mkdir -p "$DEST" "$STAGE"
if [ ! -f "$DEST/llama-src.tgz" ] || [ ! -d "$DEST/py/llama_cpp" ]; then
  [ -f "$STAGE"/llama_cpp_python-0.3.36.tar.gz ] || [ ! -f "$HERE"/bench/_build/llama_cpp_python-0.3.36.tar.gz ] || \
    cp "$HERE"/bench/_build/llama_cpp_python-0.3.36.tar.gz "$STAGE"/    # bench/build_llama_server.sh's download
  [ -f "$STAGE"/llama_cpp_python-0.3.36.tar.gz ] || \
    "$PY" -m pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d "$STAGE"
  rm -rf "$STAGE/src" && mkdir -p "$STAGE/src" && tar -xzf "$STAGE"/llama_cpp_python-0.3.36.tar.gz -C "$STAGE/src" --strip-components=1
  (cd "$STAGE/src/vendor/llama.cpp" && rm -rf models docs media benches tests examples/*/ conversion gguf-py pocs/vdot \
     tools/ui/src tools/ui/tests .github ggml/src/ggml-{openvino,webgpu,et,metal,hexagon,sycl,vulkan,opencl,cann,musa,zdnn,zendnn,virtgpu})
  tar -czf "$DEST/llama-src.tgz" -C "$STAGE/src/vendor" llama.cpp
  mkdir -p "$DEST/py" && rm -rf "$DEST/py/llama_cpp" && cp -r "$STAGE/src/llama_cpp" "$DEST/py/" && rm -rf "$DEST/py/llama_cpp/server"
fi
if [ ! -d "$DEST/whl" ]; then
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$DEST/whl" gguf==0.19.0 diskcache==5.6.3 platformdirs==4.14.7
fi
if [ ! -f "$DEST/tok.gguf" ]; then
  (cd "$HERE" && PYTHONPATH=$HERE:$HERE/tests/support "$PY" - "$DEST/tok.gguf" <<'PYEOF'
import sys
import numpy as np
from gguf import GGUFWriter
from gguf_factory import smollm2_tokenizer_kv
w = GGUFWriter(sys.argv[1], "llama")
w.add_name("SmolLM2 tokenizer keys")
for key, value, vtype, item in smollm2_tokenizer_kv():
    w.add_key_value(key, value, vtype, sub_type=item)
w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PYEOF
  )
fi
rm -rf "$DEST/wt" && mkdir -p "$DEST/wt"
(cd "$HERE" && tar -cf - --exclude=__pycache__ --exclude=bench/_build app tests bench pyproject.toml) | tar -xf - -C "$DEST/wt"
du -sh "$DEST"/* "$DEST"
git -C "$HERE" check-ignore -q "$DEST" || echo "WARNING: $DEST is not ignored by git: it would travel twice (add it to .git/info/exclude)"
