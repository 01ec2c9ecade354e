"""The runner package's import-time set-up (app/engine/runner/__init__.py), each case in a fresh interpreter."""
import os
import subprocess
import sys
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parents[4]
LIB = str(Path(llama_cpp.__file__).parent / "lib")
PROBE = "import os, app.engine.runner.prompt.media; print(os.environ.get('MTMD_CPP_LIB'))"


def run(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("LLAMA_CPP_LIB_PATH", "MTMD_CPP_LIB")}
    env.update(env_extra, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_a_llama_cpp_build_of_ones_own_serves_the_image_library_too():
    # the runner's media module imports llama_cpp.mtmd_cpp, which reads MTMD_CPP_LIB only
    assert run({"LLAMA_CPP_LIB_PATH": LIB}) == LIB
    assert run({"LLAMA_CPP_LIB_PATH": LIB, "MTMD_CPP_LIB": LIB + "/"}) == LIB + "/"     # one set by the user stays
    assert run({}) == "None"
