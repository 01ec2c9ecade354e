"""Ollama's model folder as Ollama writes it, for the tests of other apps' models (external_models.py): blobs named
`sha256-HEX` and a JSON manifest per name under manifests/HOST/NAMESPACE/MODEL/TAG."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def write_ollama_model(root: Path, manifest_parts: list[str], gguf_src: Path | None, params: dict | None = None,
                       system: str | None = None, digest_override: str | None = None,
                       projector: Path | None = None) -> Path:
    """A manifest at root/manifests/<parts> whose model layer is `gguf_src` (hard-linked into root/blobs; none
    when None; `digest_override` writes another digest in the manifest), with params, system and projector
    layers when given. Returns the manifest's path."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    layers = []

    def add_file(src: Path, media: str, digest: str | None = None) -> None:
        d = hashlib.sha256(Path(src).read_bytes()).hexdigest()
        if not (blobs / f"sha256-{d}").exists():
            os.link(src, blobs / f"sha256-{d}")
        layers.append({"mediaType": f"application/vnd.ollama.image.{media}", "digest": digest or f"sha256:{d}",
                       "size": Path(src).stat().st_size})

    if gguf_src is not None:
        add_file(gguf_src, "model", digest_override)
    for media, content in (("params", json.dumps(params) if params else None), ("system", system)):
        if content:
            b = content.encode()
            d = hashlib.sha256(b).hexdigest()
            (blobs / f"sha256-{d}").write_bytes(b)
            layers.append({"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{d}",
                           "size": len(b)})
    if projector is not None:
        add_file(projector, "projector")
    m = root / "manifests" / os.path.join(*manifest_parts)
    m.parent.mkdir(parents=True, exist_ok=True)
    m.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return m
