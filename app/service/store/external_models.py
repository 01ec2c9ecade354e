"""GGUF models the user already has from other apps, found read-only (nothing is copied or changed):

- Ollama:   ~/.ollama/models (or $OLLAMA_MODELS): manifests/HOST/NAMESPACE/MODEL/TAG are JSON documents whose
            `application/vnd.ollama.image.model` layer names a blob `blobs/sha256-HEX`, which is the GGUF.
- LM Studio: ~/.lmstudio/models and ~/.cache/lm-studio/models (publisher/repo/file.gguf), plus the
            `downloadsFolder` of ~/.lmstudio/settings.json when set.
- Hugging Face cache: ~/.cache/huggingface/hub (or $HF_HUB_CACHE, $HF_HOME/hub):
            models--ORG--REPO/snapshots/REV/**.gguf (symlinks into blobs/, named by the file's sha256).

`STRATA_USER_HOME` replaces the home directory (app.paths.sandboxed_home: tests point it at a fixture tree; the
environment overrides above are then ignored so a test never sees the real machine). Which apps are scanned comes
in as `sources` (the service's config: `STRATA_EXTERNAL_MODELS=0` turns discovery off,
`STRATA_EXTERNAL_MODELS=ollama,lmstudio` keeps only those, else the settings file's choice).
Split GGUFs (`-00001-of-00003.gguf`) and vision projectors (mmproj) are skipped: they are not a model alone. A
projector is paired with the model it belongs to instead: Ollama's `application/vnd.ollama.image.projector` layer, or
an `*mmproj*.gguf` beside the model file (LM Studio, Hugging Face; F16 preferred, then Q8_0, then the first).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.paths import sandboxed_home
from app.service.store.names import InvalidName, sanitize_name
from app.service.store.registry.reference import canonical_name

log = logging.getLogger(__name__)

OLLAMA_MODEL_MEDIA = "application/vnd.ollama.image.model"
OLLAMA_PARAMS_MEDIA = "application/vnd.ollama.image.params"
OLLAMA_SYSTEM_MEDIA = "application/vnd.ollama.image.system"
OLLAMA_PROJECTOR_MEDIA = "application/vnd.ollama.image.projector"
DEFAULT_OLLAMA_HOST = "registry.ollama.ai"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
MAX_MANIFEST_BYTES = 1 << 20
MAX_SMALL_BLOB_BYTES = 1 << 16
MAX_WALK_DEPTH = 6
SOURCES = ("ollama", "lmstudio", "huggingface")


@dataclass(frozen=True)
class ExternalModel:
    name: str                    # valid name:tag in Strata's namespace
    path: Path
    size: int
    source: str                  # "ollama" | "lmstudio" | "huggingface"
    origin: str                  # where it came from, for people: "ollama: library/llama3.2:3b", a relative path
    modified_at: float
    sha256: str | None = None    # known for free for Ollama and HF blobs
    parameters: dict = field(default_factory=dict)
    system: str | None = None
    projector: Path | None = None  # its vision projector GGUF (mmproj), when one belongs to it


def user_home() -> Path:
    return sandboxed_home() or Path.home()


def _env_dir(var: str) -> Path | None:
    """Another app's own variable (OLLAMA_MODELS, ...), except in a sandboxed home."""
    if sandboxed_home():
        return None                      # a sandboxed home: the real machine's settings do not apply
    v = os.environ.get(var)
    return Path(v) if v else None


def ollama_models_dir(home: Path | None = None) -> Path:
    return (None if home else _env_dir("OLLAMA_MODELS")) or (home or user_home()) / ".ollama" / "models"


def lmstudio_dirs(home: Path | None = None) -> list[Path]:
    home = home or user_home()
    dirs = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    try:
        settings = json.loads((home / ".lmstudio" / "settings.json").read_text()[:MAX_MANIFEST_BYTES])
        custom = settings.get("downloadsFolder") if isinstance(settings, dict) else None
        if isinstance(custom, str) and custom:
            dirs.insert(0, Path(custom).expanduser())
    except (OSError, ValueError):
        pass
    return dirs


def hf_hub_dir(home: Path | None = None) -> Path:
    if home is None:
        if d := _env_dir("HF_HUB_CACHE"):
            return d
        if d := _env_dir("HF_HOME"):
            return d / "hub"
        if d := _env_dir("XDG_CACHE_HOME"):
            return d / "huggingface" / "hub"
    return (home or user_home()) / ".cache" / "huggingface" / "hub"


def _is_gguf(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _wanted_file(p: Path) -> bool:
    n = p.name.lower()
    return n.endswith(".gguf") and "mmproj" not in n and not _SPLIT.search(n)


def discover_ollama(root: Path) -> list[ExternalModel]:
    manifests, blobs = root / "manifests", root / "blobs"
    if not manifests.is_dir():
        return []
    out = []
    for mpath in sorted(_walk_files(manifests)):
        rel = mpath.relative_to(manifests).parts
        if len(rel) < 3:
            continue
        try:
            m = _ollama_entry(mpath, rel, blobs)
        except (OSError, ValueError, InvalidName) as e:
            log.debug("skipping Ollama manifest %s: %s", mpath, e)
            continue
        if m:
            out.append(m)
    return out


def _ollama_name(rel: tuple[str, ...]) -> tuple[str, str]:
    """manifest path parts -> (Strata name, Ollama's own spelling). Strata lists the model as Ollama does:
    `llama3.2:3b`, `user/model:tag`, `hf.co/org/Repo-GGUF:Q4_K_M` (the shortest spelling of its reference)."""
    host, *ns, model, tag = rel
    shown = "/".join([host, *ns, model]) + f":{tag}"
    if host == DEFAULT_OLLAMA_HOST and ns == ["library"]:
        shown = f"{model}:{tag}"
    try:
        return canonical_name(shown if "/" in shown else f"{model}:{tag}"), shown
    except InvalidName:           # a spelling Strata's names do not take: a name made from it
        return sanitize_name("-".join([*ns, model]) if ns != ["library"] else model, tag), shown


def _ollama_entry(mpath: Path, rel: tuple[str, ...], blobs: Path) -> ExternalModel | None:
    if mpath.stat().st_size > MAX_MANIFEST_BYTES:
        raise ValueError("manifest too large")
    doc = json.loads(mpath.read_text(encoding="utf-8"))
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise ValueError("no layers")

    def blob(layer) -> Path | None:
        d = layer.get("digest") if isinstance(layer, dict) else None
        m = _DIGEST.match(d) if isinstance(d, str) else None
        return blobs / f"sha256-{m.group(1)}" if m else None    # the digest is checked: no path tricks

    model_path = digest = projector = None
    params, system = {}, None
    for layer in layers:
        media = layer.get("mediaType") if isinstance(layer, dict) else None
        p = blob(layer)
        if p is None:
            continue
        if media == OLLAMA_MODEL_MEDIA and model_path is None:
            model_path, digest = p, p.name.removeprefix("sha256-")
        elif media == OLLAMA_PARAMS_MEDIA and p.is_file() and p.stat().st_size <= MAX_SMALL_BLOB_BYTES:
            loaded = json.loads(p.read_text(encoding="utf-8"))
            params = loaded if isinstance(loaded, dict) else {}
        elif media == OLLAMA_SYSTEM_MEDIA and p.is_file() and p.stat().st_size <= MAX_SMALL_BLOB_BYTES:
            system = p.read_text(encoding="utf-8", errors="replace")
        elif media == OLLAMA_PROJECTOR_MEDIA and p.is_file() and _is_gguf(p):
            projector = p
    if model_path is None or not model_path.is_file() or not _is_gguf(model_path):
        return None
    name, shown = _ollama_name(rel)
    st = model_path.stat()
    return ExternalModel(name=name, path=model_path, size=st.st_size, source="ollama", origin=f"ollama: {shown}",
                         modified_at=mpath.stat().st_mtime, sha256=digest, parameters=params, system=system,
                         projector=projector)


def _walk_files(root: Path, depth: int = MAX_WALK_DEPTH):
    """Files under root, not following directory symlinks, at most `depth` levels down."""
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if len(Path(dirpath).parts) - base >= depth:
            dirnames.clear()
        dirnames.sort()
        for f in sorted(filenames):
            yield Path(dirpath) / f


def discover_gguf_tree(root: Path, source: str) -> list[ExternalModel]:
    if not root.is_dir():
        return []
    out = []
    for p in _walk_files(root):
        if not _wanted_file(p) or not _is_gguf(p):
            continue
        try:
            real = p.resolve(strict=True)
            st = real.stat()
        except OSError:
            continue
        sha = None
        if source == "huggingface" and re.fullmatch(r"[0-9a-f]{64}", real.name):
            sha = real.name          # LFS blobs in the HF cache are named by their sha256
        rel = p.relative_to(root)
        if source == "huggingface":
            repo = root.name.removeprefix("models--").replace("--", "/")
            origin = f"huggingface: {repo}/{'/'.join(rel.parts[2:])}"     # snapshots/REV/...
        else:
            origin = f"lmstudio: {rel.as_posix()}"
        out.append(ExternalModel(name=sanitize_name(p.stem), path=p, size=st.st_size, source=source,
                                 origin=origin, modified_at=st.st_mtime, sha256=sha, projector=sibling_projector(p)))
    return out


def sibling_projector(model: Path) -> Path | None:
    """The vision projector stored beside a model file (`*mmproj*.gguf` in its folder): F16, else Q8_0, else the
    first by name; None when there is none."""
    try:
        found = sorted(q for q in model.parent.iterdir()
                       if "mmproj" in q.name.lower() and q.name.lower().endswith(".gguf") and _is_gguf(q))
    except OSError:
        return None
    for want in ("f16", "q8_0"):
        for q in found:
            if want in q.name.lower():
                return q
    return found[0] if found else None


def discover_external(home: Path | None = None, sources=SOURCES) -> list[ExternalModel]:
    """Every external GGUF found in `sources` (of SOURCES: the service's config passes its external_sources,
    STRATA_EXTERNAL_MODELS over the settings file), names unique (the first found keeps a name; later ones get a
    suffix)."""
    wanted = set(sources)
    found: list[ExternalModel] = []
    try:
        if "ollama" in wanted:
            found += discover_ollama(ollama_models_dir(home))
    except OSError as e:
        log.debug("Ollama discovery failed: %s", e)
    seen_paths: set[Path] = set()
    for d in lmstudio_dirs(home) if "lmstudio" in wanted else ():
        try:
            found += [m for m in discover_gguf_tree(d, "lmstudio") if m.path not in seen_paths]
            seen_paths.update(m.path for m in found)
        except OSError as e:
            log.debug("LM Studio discovery in %s failed: %s", d, e)
    try:
        hub = hf_hub_dir(home)
        if "huggingface" in wanted and hub.is_dir():
            real_seen = set()
            for repo in sorted(hub.glob("models--*")):
                for m in discover_gguf_tree(repo, "huggingface"):
                    real = m.path.resolve()
                    if real not in real_seen:     # the same blob in several snapshots
                        real_seen.add(real)
                        found.append(m)
    except OSError as e:
        log.debug("Hugging Face cache discovery failed: %s", e)
    return _unique_names(found)


def _unique_names(models: list[ExternalModel]) -> list[ExternalModel]:
    taken: set[str] = set()
    out = []
    for m in models:
        name = m.name
        if name in taken:
            base, tag = name.split(":")
            name, i = f"{base}-{m.source}:{tag}", 2
            while name in taken:
                name, i = f"{base}-{m.source}{i}:{tag}", i + 1
        taken.add(name)
        out.append(m if name == m.name else replace(m, name=name))
    return out
