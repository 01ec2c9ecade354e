"""Where Strata keeps its data. `STRATA_HOME` overrides the platform's user dirs (tests use a temp dir)."""
from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def data_dir() -> Path:
    root = os.environ.get("STRATA_HOME")
    p = Path(root) if root else Path(platformdirs.user_data_dir("strata", appauthor=False))
    p.mkdir(parents=True, exist_ok=True)
    return p


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
