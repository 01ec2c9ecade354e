"""llama.cpp's multimodal library (libmtmd: vision projectors), which a llama.cpp build may lack.

llama-cpp-python binds it in `llama_cpp.mtmd_cpp`, whose import maps the library from MTMD_CPP_LIB (the runner
package points it at LLAMA_CPP_LIB_PATH: app/engine/runner/__init__.py) and raises when it is not there, as in a
llama.cpp built without its `mtmd` target. A runner must still load its model and serve text then: `load()` gives
the bindings or `VisionUnavailable` naming the folder and what failed; the runner loads no projector and refuses
images with that reason (runner/prompt/admission.py, runner main). Child processes only (it maps libmtmd).
Covered by tests/integration/engine/test_vision_runner.py (a runner on a llama.cpp folder without libmtmd).
"""
from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType


class VisionUnavailable(RuntimeError):
    """This llama.cpp build has no usable vision library: images cannot be read."""


_bindings: ModuleType | None = None
_missing: str | None = None


def load() -> ModuleType:
    """`llama_cpp.mtmd_cpp`, bound to the libmtmd of the runner's llama.cpp build (once); VisionUnavailable with
    the reason when the build has none or it cannot be bound."""
    global _bindings, _missing
    if _bindings is not None:
        return _bindings
    if _missing is None:
        try:
            from llama_cpp import mtmd_cpp   # late: maps libmtmd (child processes only)
        except (OSError, AttributeError) as e:   # no file (FileNotFoundError), a bad one, a symbol it lacks
            _missing = f"the vision library libmtmd is missing from the llama.cpp build in {_folder()} ({e})"
        else:
            _bindings = mtmd_cpp
            return mtmd_cpp
    raise VisionUnavailable(_missing)


def _folder() -> str:
    """Where llama_cpp.mtmd_cpp looks for libmtmd."""
    override = os.environ.get("MTMD_CPP_LIB")
    if override:
        return override
    import llama_cpp   # late: the runner process has it loaded already

    return str(Path(llama_cpp.__file__).parent / "lib")
