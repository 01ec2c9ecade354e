"""`pull`: a registry reference in, a store entry out, with progress in Ollama's exact format
(api.ProgressResponse: `status`, and `digest` / `total` / `completed` left out when empty, as Go's omitempty):

    {"status":"pulling manifest"}
    {"status":"pulling 6a0746a1ec1a","digest":"sha256:6a07...","total":2019377376,"completed":241970}  (per layer)
    {"status":"verifying sha256 digest"}
    {"status":"writing manifest"}
    {"status":"success"}

Order of work, so that a cancelled or failed pull leaves no half-registered model: list what is needed, refuse
when the disk cannot hold it, fetch each layer (blobs already on this machine are linked, not downloaded), verify
every downloaded blob, and only then write the store entry in one transaction. The name is not in the store
until that last step, so a model being pulled cannot be loaded.

The model is stored under the reference as written (`Reference.local_name()`: `llama3.2:3b`,
`127.0.0.1:5000/team/m:v1`, `hf.co/user/Repo-GGUF:latest`). Pulling a name that is already there is how scripts
make sure a model is present, so it is cheap and always ends in `success`:
- a store model: the manifest is read again and only what differs is fetched (model blobs are found by digest;
  metadata layers whose digests the stored manifest already had are not fetched again);
- the built-in model: answered from the file shipped with Strata, no registry asked, nothing written;
- a read-only model of another app (Ollama's folder, ...): when the registry's model is the same file, nothing is
  written; when it differs, the registry's is pulled into Strata's own store under that name (which then comes
  first in the listing) and a progress line says so.
Covered by tests/integration/service/test_pull.py and test_pull_hf_push.py.
"""
from __future__ import annotations

import asyncio
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from app.engine.gguf.errors import GGUFError
from app.engine.gguf.projector import read_projector
from app.engine.gguf.split import part_path
from app.service.store.modelfile import ModelfileError, parse_param_value
from app.service.store.proxy import AsyncStore

from . import hf
from .download import Downloader, RegistryError, Source
from .ollama import (MEDIA_ADAPTER, MEDIA_LICENSE, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_PROJECTOR, MEDIA_PROMPT,
                     MEDIA_SYSTEM, MEDIA_TEMPLATE, SMALL_MEDIA, RegistryClient, parse_manifest)
from .reference import Reference

log = logging.getLogger("strata.pull")

Emit = Callable[[dict], Awaitable[None]]
SPACE_RESERVE = 512 << 20          # a pull never leaves less than this free


def progress_line(status: str, digest: str = "", total: int = 0, completed: int = 0) -> dict:
    """One api.ProgressResponse, with Go's omitempty: zero or empty fields are left out."""
    line: dict = {"status": status}
    if digest:
        line["digest"] = digest
    if total:
        line["total"] = total
    if completed:
        line["completed"] = completed
    return line


def short(digest: str) -> str:
    """`pulling 6a0746a1ec1a`: Ollama shows 12 hex digits of the digest."""
    return digest.split(":", 1)[-1][:12]


@dataclass
class ModelFile:
    """One GGUF (or one part of a split GGUF) to have in the store."""
    source: Source
    dest_name: str | None              # None: known only once hashed (a Hub file stored in git, not LFS)
    local: Path | None = None          # already on this machine (a store blob, another app's blob, the HF cache)
    adapter: bool = False              # a LoRA adapter layer, not (a part of) the model
    projector: bool = False            # a vision projector layer (mmproj): stored with the model

    @property
    def part_of_model(self) -> bool:
        return not (self.adapter or self.projector)


@dataclass
class Plan:
    origin: str
    steps: list = field(default_factory=list)   # ("model", ModelFile) | ("small", Layer), in manifest order
    files: list[ModelFile] = field(default_factory=list)
    client: RegistryClient | None = None
    manifest: str | None = None                 # the registry's manifest (Ollama registries), kept with the model
    known: dict = field(default_factory=dict)   # metadata layers the store has already: digest -> meta to apply


def model_dest_names(hexes: list[str]) -> list[str]:
    """Store file names: `sha256-HEX.gguf`, or for a split model every part named after the first part's digest
    the way llama.cpp finds parts (`sha256-HEX-00002-of-00003.gguf`)."""
    if len(hexes) == 1:
        return [f"sha256-{hexes[0]}.gguf"]
    return [part_path(f"sha256-{hexes[0]}", i + 1, len(hexes)) for i in range(len(hexes))]


class Puller:
    def __init__(self, store: AsyncStore):
        self.store = store
        self._downloader: Downloader | None = None
        self.pulling: dict[str, int] = {}             # local names with a pull under way

    async def downloader(self) -> Downloader:
        if self._downloader is None:
            models_dir = Path(await self.store.blob_dir())
            self._downloader = Downloader(models_dir / ".downloads")
        return self._downloader

    async def close(self) -> None:
        if self._downloader is not None:
            await self._downloader.close()

    async def pull(self, ref: Reference, insecure: bool, emit: Emit):
        """Pull `ref` into the store under ref.local_name(); returns the ModelRecord. Raises RegistryError."""
        if ref.explicit_http and not insecure:
            raise RegistryError("insecure protocol http: pass insecure (`strata pull --insecure`) to use a "
                                "plain-http registry", 400)
        name = ref.local_name()
        self.pulling[name] = self.pulling.get(name, 0) + 1
        try:
            await emit(progress_line("pulling manifest"))
            present = await self._present(name)
            if present is not None and present.source == "builtin":
                return await self._answer_builtin(present, emit)
            dl = await self.downloader()
            plan = await (self._plan_hf(ref) if ref.kind == "hf" else self._plan_ollama(ref, insecure, dl))
            note = ""
            if present is not None and present.read_only:
                if await self._same_files(plan, present):
                    return await self._answer_present(plan, present, emit)
                note = (f"{name} differs from the read-only copy ({present.origin}); the registry's is stored in "
                        "Strata's own store under that name")
            elif present is not None:
                plan.known = _known_meta(plan, present)
            await self._find_local(plan)
            self._check_space(plan, dl)
            meta = await self._fetch(plan, dl, emit)
            await emit(progress_line("verifying sha256 digest"))
            paths = [await self._finish(f, dl) for f in plan.files]
            projector = next((str(p) for f, p in zip(plan.files, paths) if f.projector), None)
            if projector is not None and not await self._usable_projector(projector):
                await emit(progress_line("the repository's projector is not a vision projector: the model is "
                                         "pulled without it"))
                projector = None
            await emit(progress_line("writing manifest"))
            lora = tuple(str(p) for f, p in zip(plan.files, paths) if f.adapter)
            model = next(p for f, p in zip(plan.files, paths) if f.part_of_model)
            try:
                record = await self.store.add_model(name, model, _hex_of(model),
                                                    meta.get("parameters"), meta.get("template"), meta.get("system"),
                                                    meta.get("license"), plan.origin, lora, plan.manifest,
                                                    projector=projector)
            except GGUFError as e:       # verified bytes, but not a model Strata can run: do not keep them
                for f, p in zip(plan.files, paths):
                    if f.local is None:
                        await self.store.release_blob(p)
                raise RegistryError(f"{ref.display()} is not a GGUF model Strata can run: {e}", 415) from None
            if note:
                await emit(progress_line(note))
            await emit(progress_line("success"))
            return record
        finally:
            self.pulling[name] -= 1
            if not self.pulling[name]:
                del self.pulling[name]

    # ---- a name that is here already -------------------------------------------------------------------------
    async def _present(self, name: str):
        try:
            return await self.store.get(name)
        except LookupError:                                # ModelNotFound
            return None

    async def _answer_builtin(self, record, emit: Emit):
        """The built-in model ships with Strata (not from a registry): the pull is answered from its file."""
        digest = "sha256:" + await self.store.sha256(record.name)
        await emit(progress_line(f"pulling {short(digest)}", digest, record.size, record.size))
        for status in ("verifying sha256 digest", "writing manifest", "success"):
            await emit(progress_line(status))
        return record

    async def _same_files(self, plan: Plan, record) -> bool:
        """True when the registry's model is exactly the read-only file (one GGUF, no adapter, same sha256)."""
        if len(plan.files) != 1 or not plan.files[0].part_of_model or not plan.files[0].source.digest.startswith("sha256:"):
            return False
        return plan.files[0].source.hex == await self.store.sha256(record.name)

    async def _answer_present(self, plan: Plan, record, emit: Emit):
        """The registry has what is here: every layer reported complete, nothing fetched, nothing written."""
        for kind, item in plan.steps:
            digest, size = (item.digest, item.size) if kind == "small" else (item.source.digest, item.source.size)
            await emit(progress_line(f"pulling {short(digest)}", digest, size, size))
        for status in ("verifying sha256 digest", "writing manifest", "success"):
            await emit(progress_line(status))
        return record

    # ---- planning --------------------------------------------------------------------------------------------
    async def _plan_ollama(self, ref: Reference, insecure: bool, dl: Downloader) -> Plan:
        client = RegistryClient(dl.session(), ref, insecure)
        manifest = await client.manifest()
        try:
            text = manifest.raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        models = [layer for layer in manifest.layers if layer.media_type == MEDIA_MODEL]
        if not models:
            kinds = ", ".join(sorted({layer.media_type.rsplit(".", 1)[-1] for layer in manifest.layers}))
            raise RegistryError(f"{ref.display()} has no GGUF model layer (it has: {kinds}); Strata runs GGUF "
                                "models only", 415)
        names = model_dest_names([layer.hex for layer in models])
        plan = Plan(origin=f"{ref.host}/{ref.repository}:{ref.tag}", client=client, manifest=text)
        for layer in manifest.all_layers:
            if layer.media_type == MEDIA_MODEL:
                f = ModelFile(client.blob_source(layer), names[models.index(layer)])
                plan.files.append(f)
                plan.steps.append(("model", f))
            elif layer.media_type == MEDIA_ADAPTER:
                f = ModelFile(client.blob_source(layer), f"sha256-{layer.hex}.gguf", adapter=True)
                plan.files.append(f)
                plan.steps.append(("model", f))
            elif layer.media_type == MEDIA_PROJECTOR:      # the vision projector: the model then takes images
                f = ModelFile(client.blob_source(layer), f"sha256-{layer.hex}.gguf", projector=True)
                plan.files.append(f)
                plan.steps.append(("model", f))
            elif layer.media_type in SMALL_MEDIA:
                plan.steps.append(("small", layer))
            else:                  # tensor layers (safetensors): not used by Strata (see README)
                log.info("%s: skipping layer %s (%s)", ref.display(), layer.digest[:19], layer.media_type)
        return plan

    async def _plan_hf(self, ref: Reference) -> Plan:
        loop = asyncio.get_running_loop()
        sel = await loop.run_in_executor(None, hf.resolve, ref)
        hexes = [f.sha256 for f in sel.files]
        known = [h for h in hexes if h]
        names: list[str | None] = list(model_dest_names(known)) if len(known) == len(hexes) else [None] * len(hexes)
        plan = Plan(origin=f"hf.co/{sel.repo_id}:{sel.quant} (revision {sel.revision[:12]})")
        for f, dest in zip(sel.files, names):
            mf = ModelFile(hf.source_for(sel, f), dest)
            if dest is not None:
                mf.local = await loop.run_in_executor(None, hf.cached_file, sel, f)
            plan.files.append(mf)
            plan.steps.append(("model", mf))
        if sel.projector is not None:          # the repository's vision projector comes along (hf.choose_projector)
            pf = sel.projector
            mf = ModelFile(hf.source_for(sel, pf), f"sha256-{pf.sha256}.gguf" if pf.sha256 else None, projector=True)
            if pf.sha256:
                mf.local = await loop.run_in_executor(None, hf.cached_file, sel, pf)
            plan.files.append(mf)
            plan.steps.append(("model", mf))
        return plan

    async def _find_local(self, plan: Plan) -> None:
        """Blobs this machine already has (same digest): in the store, imported, or another app's."""
        # a split model's parts are stored under split names, not their own digests
        split = sum(f.part_of_model for f in plan.files) > 1
        for f in plan.files:
            if f.dest_name is None:
                continue
            if f.local is None and not (split and f.part_of_model):
                f.local = await self.store.blob_path(f.source.hex, f.source.size)
            if f.local is None:
                dest = Path(await self.store.blob_dir()) / f.dest_name
                if dest.is_file() and dest.stat().st_size == f.source.size:
                    f.local = dest

    def _check_space(self, plan: Plan, dl: Downloader) -> None:
        need = sum(f.source.size - dl.downloaded_bytes(f.source) for f in plan.files if f.local is None)
        if need <= 0:
            return
        dl.root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(dl.root).free
        if need + SPACE_RESERVE > free:
            raise RegistryError(f"not enough disk space: the model needs {_gb(need)} more, {_gb(free)} is free in "
                                f"{dl.root.parent} (and {_gb(SPACE_RESERVE)} is kept free)", 507)

    # ---- fetching --------------------------------------------------------------------------------------------
    async def _fetch(self, plan: Plan, dl: Downloader, emit: Emit) -> dict:
        meta: dict = {}
        for kind, item in plan.steps:
            if kind == "small":
                if item.digest in plan.known:               # the stored model has this layer: not fetched again
                    meta.update(plan.known[item.digest])
                else:
                    assert plan.client is not None      # small layers come only in a registry's plan, with its client
                    _apply_meta(meta, item.media_type, await plan.client.small_blob(item))
                await emit(progress_line(f"pulling {short(item.digest)}", item.digest, item.size, item.size))
                continue
            f: ModelFile = item
            status, size = f"pulling {short(f.source.digest)}", f.source.size
            if f.local is not None:
                await emit(progress_line(status, f.source.digest, size, size))
                continue

            async def progress(done: int, total: int, status=status, digest=f.source.digest) -> None:
                await emit(progress_line(status, digest, total, done))

            await dl.fetch(f.source, progress)
        return meta

    async def _usable_projector(self, path: str) -> bool:
        """The pulled projector is one (engine/gguf/projector.py); a file that is not is let go, not kept."""
        try:
            await asyncio.to_thread(read_projector, path)
            return True
        except GGUFError as e:
            log.warning("%s: not a vision projector (%s); pulling the model without it", path, e)
            await self.store.release_blob(Path(path))
            return False

    async def _finish(self, f: ModelFile, dl: Downloader) -> Path:
        """The file in its final place: a local blob linked in, or the download verified and moved there."""
        blob_dir = Path(await self.store.blob_dir())
        if f.local is not None:
            assert f.dest_name is not None          # _find_local looks only for files whose name is known
            return Path(await self.store.adopt_blob(f.local, f.dest_name))
        return await dl.verify_into(f.source, lambda hex_: blob_dir / (f.dest_name or f"sha256-{hex_}.gguf"))


def _known_meta(plan: Plan, record) -> dict:
    """Metadata layers a stored pull of this name already has (same digests in its stored manifest), with the
    Modelfile defaults they gave it: digest -> {field: value}. A kind of layer counts only when all of its layers
    are unchanged (license texts are joined), so a changed template is always fetched."""
    if not record.manifest or plan.client is None:
        return {}
    try:
        old = parse_manifest(record.manifest.encode())
    except RegistryError:
        return {}
    fields = {MEDIA_TEMPLATE: "template", MEDIA_PROMPT: "template", MEDIA_SYSTEM: "system",
              MEDIA_PARAMS: "parameters", MEDIA_LICENSE: "license"}
    new_small = [item for kind, item in plan.steps if kind == "small"]

    def digests(layers, media) -> list[str]:
        return [x.digest for x in layers if x.media_type == media]

    known: dict[str, dict] = {}
    for layer in new_small:
        media = layer.media_type
        if digests(new_small, media) != digests(old.all_layers, media):
            continue
        f = fields.get(media)
        value = getattr(record, f) if f else None
        known[layer.digest] = {f: (dict(value) if isinstance(value, dict) else value)} if f and value else {}
    return known


def _apply_meta(meta: dict, media: str, data: bytes) -> None:
    """Ollama's template / system / params / license layers -> the store entry's Modelfile defaults."""
    text = data.decode("utf-8", errors="replace")
    if media in (MEDIA_TEMPLATE, MEDIA_PROMPT):
        meta["template"] = text
    elif media == MEDIA_SYSTEM:
        meta["system"] = text
    elif media == MEDIA_LICENSE:
        meta["license"] = text if "license" not in meta else meta["license"] + "\n" + text
    elif media == MEDIA_PARAMS:
        try:
            raw = json.loads(text)
        except ValueError:
            raise RegistryError("the model's params layer is not JSON", 502) from None
        params = {}
        for k, v in (raw.items() if isinstance(raw, dict) else ()):
            try:
                params[k.lower()] = parse_param_value(k, v)
            except ModelfileError as e:   # a parameter Strata does not have: the others still apply
                log.info("pulled parameter %s ignored: %s", k, e)
        meta["parameters"] = params


def _hex_of(path: Path) -> str:
    """`sha256-HEX.gguf` / `sha256-HEX-00001-of-00003.gguf` -> HEX (the first part's digest)."""
    return path.name[len("sha256-"):len("sha256-") + 64]


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"
