"""The type check: mypy over the engine and the service and the layers below them, as pyproject.toml's
[tool.mypy] says, here so it runs wherever the suite runs (CI's `make test` included). A `# type: ignore[code]`
is for stubs that are wrong and says why beside it; warn_unused_ignores reports one that is no longer needed.
(An integration test by cost, not by kind: a cold run takes tens of seconds, too slow for `pytest -m unit`.)"""
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]


def test_engine_and_service_type_check(monkeypatch):
    monkeypatch.chdir(ROOT)                      # [tool.mypy] names the packages relative to the repository
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml")])
    assert status == 0 and "Success" in out, out + err
