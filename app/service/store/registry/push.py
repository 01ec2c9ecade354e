"""`push`: a store model to a registry the user names, as an Ollama model (the same manifest and layers Ollama
writes, so `ollama pull` and Strata's pull read it back):

    {"status":"retrieving manifest"}
    {"status":"pushing 6a0746a1ec1a","digest":"sha256:6a07...","total":2019377376,"completed":1048576}  (per layer)
    {"status":"pushing manifest"}
    {"status":"success"}

Layers: the GGUF (every part of a split model), its LoRA adapters, its vision projector, then template, system, params and license
when the model has them, and a config blob (format, family, size, quantization) as Ollama's ConfigV2.
Covered by tests/integration/service/test_pull_hf_push.py (push, then pull back).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

from app.engine.gguf.split import sibling_paths
from app.service.store.model_store import ModelNotFound, ModelRecord
from app.service.store.proxy import AsyncStore

from .download import RegistryError, sha256_file
from .ollama import (MEDIA_ADAPTER, MEDIA_CONFIG, MEDIA_LICENSE, MEDIA_MODEL, MEDIA_PARAMS, MEDIA_PROJECTOR,
                     MEDIA_SYSTEM, MEDIA_TEMPLATE, Layer, Manifest, RegistryClient)
from .pull import Emit, Puller, progress_line, short
from .reference import DEFAULT_HOST, Reference


async def find_source(store: AsyncStore, ref: Reference, source: str | None) -> ModelRecord:
    """The local model to push: `source` when given; else the model the reference names (what a pull of it
    would be called), else `model:tag` from the reference (so `push host/me/mymodel:v1` pushes mymodel:v1)."""
    names = [source] if source else [ref.local_name(), f"{ref.model}:{ref.tag}"]
    for n in names:
        try:
            return await store.get(n)
        except ModelNotFound:
            continue
    raise RegistryError(f"model {names[0]!r} not found (see `strata list`); name the local model to push with "
                        "'source'", 404)


def _size_label(n: int) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}".rstrip("0").rstrip(".") + unit
    return str(n)


async def push(puller: Puller, ref: Reference, insecure: bool, source: str | None, emit: Emit) -> None:
    if ref.kind != "ollama":
        raise RegistryError("pushing to Hugging Face is not supported; name an Ollama-style registry "
                            "(host[:port]/namespace/model:tag)", 400)
    if ref.host.lower() == DEFAULT_HOST:
        raise RegistryError("pushing to ollama.com needs an ollama.com account key (Ollama signs pushes with its "
                            "own key), which Strata does not use; push to a registry of your own: "
                            "host[:port]/namespace/model:tag", 400)
    if ref.explicit_http and not insecure:
        raise RegistryError("insecure protocol http: pass insecure to push to a plain-http registry", 400)
    await emit(progress_line("retrieving manifest"))
    record = await find_source(puller.store, ref, source)
    info = await puller.store.info(record.name)
    loop = asyncio.get_running_loop()
    files = [Path(p) for p in (sibling_paths(record.path) if info.file_size != Path(record.path).stat().st_size
                               else [record.path])]
    layers: list[tuple[Layer, Path | None, bytes | None]] = []
    for p in files:
        hex_ = (await loop.run_in_executor(None, sha256_file, p))[0]
        layers.append((Layer(MEDIA_MODEL, f"sha256:{hex_}", p.stat().st_size), p, None))
    for media, p in [(MEDIA_ADAPTER, Path(a)) for a in record.adapters] + \
            ([(MEDIA_PROJECTOR, Path(record.projector))] if record.projector else []):
        hex_ = (await loop.run_in_executor(None, sha256_file, p))[0]
        layers.append((Layer(media, f"sha256:{hex_}", p.stat().st_size), p, None))
    texts = [(MEDIA_TEMPLATE, record.template), (MEDIA_SYSTEM, record.system),
             (MEDIA_PARAMS, json.dumps(record.parameters) if record.parameters else None),
             (MEDIA_LICENSE, record.license)]
    for media, text in texts:
        if text:
            encoded = text.encode()
            layers.append((_layer_for(media, encoded), None, encoded))
    config = json.dumps({
        "model_format": "gguf", "model_family": info.architecture, "model_families": [info.architecture],
        "model_type": _size_label(info.n_params), "file_type": info.quantization,
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer, _, _ in layers]},
    }).encode()
    config_layer = _layer_for(MEDIA_CONFIG, config)

    dl = await puller.downloader()
    client = RegistryClient(dl.session(), ref, insecure, push=True)
    for layer, path, data in layers + [(config_layer, None, config)]:
        status = f"pushing {short(layer.digest)}"

        async def progress(done: int, total: int, status=status, digest=layer.digest) -> None:
            await emit(progress_line(status, digest, total, done))

        if await client.has_blob(layer.digest):
            await progress(layer.size, layer.size)
            continue
        await emit(progress_line(status, layer.digest, layer.size))
        await client.upload_blob(layer, path, data, progress)
    await emit(progress_line("pushing manifest"))
    await client.put_manifest(Manifest(config_layer, tuple(layer for layer, _, _ in layers)))
    await emit(progress_line("success"))


def _layer_for(media: str, data: bytes) -> Layer:
    return Layer(media, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))
