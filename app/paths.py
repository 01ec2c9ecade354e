"""Where Strata keeps its data. `STRATA_HOME` overrides the platform's user dirs (tests use a temp dir);
`STRATA_USER_HOME` replaces the home directory where other apps keep their models (a sandbox: tests, screenshots).
Read here, not in the service's config: the settings file the config reads lives under STRATA_HOME."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def data_dir() -> Path:
    root = os.environ.get("STRATA_HOME")
    p = Path(root) if root else Path(platformdirs.user_data_dir("strata", appauthor=False))
    p.mkdir(parents=True, exist_ok=True)
    return p


def sandboxed_home() -> Path | None:
    """STRATA_USER_HOME when set: the home other apps' folders are looked for in (their own environment
    variables, OLLAMA_MODELS and the like, then do not apply: a sandbox never sees the real machine)."""
    h = os.environ.get("STRATA_USER_HOME")
    return Path(h) if h else None


def models_dir() -> Path:
    p = data_dir() / "models"
    p.mkdir(parents=True, exist_ok=True)
    return p


def db_path() -> Path:
    return data_dir() / "strata.db"


def cache_dir() -> Path:
    p = data_dir() / "cache"
    p.mkdir(parents=True, exist_ok=True)
    return p
