"""The model store's SQLite database: its schema, the migrations a store opened from an older version gets (columns
added, pulled models renamed to their reference, `PRAGMA user_version`), and a row read back as a ModelRecord.
Covered by tests/unit/service/store/test_store.py and tests/integration/service/test_names.py."""
from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

from app.service.store.names import InvalidName
from app.service.store.records import ModelRecord
from app.service.store.registry.reference import parse_reference

SCHEMA_VERSION = 1          # PRAGMA user_version: 1 = pulled models are named by their reference

SCHEMA = """
CREATE TABLE IF NOT EXISTS models (
    name        TEXT PRIMARY KEY,           -- normalized name:tag
    path        TEXT NOT NULL,              -- absolute path of the GGUF
    size        INTEGER NOT NULL,
    sha256      TEXT,
    modified_at REAL NOT NULL,              -- unix time
    parameters  TEXT NOT NULL DEFAULT '{}', -- JSON object (Modelfile PARAMETER lines)
    template    TEXT,
    system      TEXT,
    origin      TEXT,                       -- where it was imported from
    license     TEXT,                       -- LICENSE text (pulled models, /api/create)
    adapters    TEXT NOT NULL DEFAULT '[]', -- JSON list of LoRA adapter GGUFs (in the store's folder)
    manifest    TEXT,                       -- a registry pull's manifest, as the registry sent it
    projector   TEXT                        -- the vision projector GGUF (mmproj), in the store's folder
);
CREATE TABLE IF NOT EXISTS model_settings (  -- what a user set per model (any model: built-in and external too)
    name       TEXT PRIMARY KEY,            -- the model's name as the store lists it
    pinned     INTEGER NOT NULL DEFAULT 0,  -- never unloaded for another model, never expires
    keep_alive TEXT                         -- its default keep_alive (a duration); NULL: the server's
);
CREATE TABLE IF NOT EXISTS file_hashes (   -- sha256 of files we do not own (built-in, external), by version
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL
);
"""


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30)
    db.row_factory = sqlite3.Row
    return db


def prepare(db: sqlite3.Connection) -> None:
    """The tables made, or brought up to this version's columns and names (in the caller's transaction)."""
    db.executescript(SCHEMA)
    columns = {row[1] for row in db.execute("PRAGMA table_info(models)")}
    if "license" not in columns:                       # a store made before pulls existed
        db.execute("ALTER TABLE models ADD COLUMN license TEXT")
    if "adapters" not in columns:
        db.execute("ALTER TABLE models ADD COLUMN adapters TEXT NOT NULL DEFAULT '[]'")
    if "manifest" not in columns:
        db.execute("ALTER TABLE models ADD COLUMN manifest TEXT")
    if "projector" not in columns:
        db.execute("ALTER TABLE models ADD COLUMN projector TEXT")
    if db.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
        migrate_pulled_names(db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def row_record(r) -> ModelRecord:
    return ModelRecord(name=r["name"], path=r["path"], size=r["size"], sha256=r["sha256"],
                       modified_at=r["modified_at"], source="store", read_only=False,
                       parameters=json.loads(r["parameters"] or "{}"), template=r["template"],
                       system=r["system"], origin=r["origin"], license=r["license"],
                       adapters=tuple(json.loads(r["adapters"] or "[]")), manifest=r["manifest"],
                       projector=r["projector"])


def _pulled_reference(name: str, origin: str | None):
    """The Reference a store row was pulled by (its `origin`), with the tag its name was given; None for a row
    that was not pulled (an import's path, an upload, a create)."""
    try:
        ref = parse_reference((origin or "").split(" (revision ", 1)[0])
    except InvalidName:
        return None
    if ref.kind == "hf":                  # the origin has the quant chosen, the name the tag that was asked for
        ref = replace(ref, tag=name.rpartition(":")[2])
    return ref


def migrate_pulled_names(db) -> None:
    """Pulls stored by the old code were named `namespace-model:tag` (`127.0.0.1:5000/me/m:v1` ->
    `me-m:v1`, `hf.co/u/Repo-GGUF` -> `u-repo-gguf:latest`); they take the name a pull gives now. A row is
    renamed only when its origin (the reference pulled) gives exactly its old name, so a copy of a pulled model
    (same origin, a name of the user's choosing) keeps its name, and never onto a name that is taken."""
    for row in db.execute("SELECT name, origin FROM models").fetchall():
        ref = _pulled_reference(row["name"], row["origin"])
        if ref is None:
            continue                                   # an import (a path), an upload, a create
        new = ref.local_name()
        if ref.old_local_name() != row["name"] or new == row["name"]:
            continue
        if db.execute("SELECT 1 FROM models WHERE name = ? COLLATE NOCASE", (new,)).fetchone():
            continue
        db.execute("UPDATE models SET name = ? WHERE name = ?", (new, row["name"]))


def row_by_old_name(db, key: str):
    """The row of a pulled model that the old code named `key` (`me-m:v1` for `host/me/m:v1`), so scripts and
    chats that still use an old name keep working after the migration; None when there is none."""
    for row in db.execute("SELECT * FROM models WHERE origin IS NOT NULL").fetchall():
        ref = _pulled_reference(row["name"], row["origin"])
        if ref is not None and ref.local_name() == row["name"] and ref.old_local_name() == key:
            return row
    return None
