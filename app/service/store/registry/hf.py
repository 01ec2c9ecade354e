"""Hugging Face GGUF repositories, through the `huggingface_hub` library: it finds the repository's files (with
their LFS sha256 and size), builds the download addresses and the user's auth headers, and knows the user's
cache. `HF_ENDPOINT` (a mirror, or a test stand-in), `HF_TOKEN` / `hf auth login` and `HF_HOME` /
`HF_HUB_CACHE` are honoured, read when a pull starts (not when the service started).

The bytes themselves go through Strata's downloader (resumable, parallel ranges, verified, cancellable, with
progress in Ollama's format); a file already in the user's HF cache is linked, not downloaded again.

Which file: the tag names a quantization (`Q4_K_M`, `IQ4_XS`, `Q8_0`, `F16`...), matched against the quant in the
file name (`Model-Q4_K_M.gguf`, `model.q8_0.gguf`, `Q4_K_M/Model-Q4_K_M-00001-of-00002.gguf`). Without a tag
(`latest`) Q4_K_M is taken when there is one, as llama-server's `-hf` and Ollama do, then the next usual choices.
Vision projectors (`mmproj`) are never the model: the repository's projector comes along with it (the one of the
chosen quantization, else F16, else Q8_0, else BF16, else the first), so the model takes images. Split GGUFs are
taken whole: every part of the set.

`huggingface_hub` (and httpx under it) is imported inside the functions: it costs 0.4 s and only a Hugging Face
pull needs it, so the service starts without it.
Covered by tests/integration/service/test_pull_hf_push.py (Hugging Face pulls).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from app.engine.gguf.split import SPLIT_NAME
from app.service.store.external_models import hf_hub_dir

from .download import RegistryError, Source
from .reference import Reference

DEFAULT_ENDPOINT = "https://huggingface.co"
PREFERRED = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_XS", "Q4_1", "Q5_0", "BF16", "F16")
_QUANT = re.compile(r"(?:^|[-._/])((?:i?q[1-8](?:_[0-9a-z]+)*)|f16|bf16|f32|mxfp4(?:_[0-9a-z]+)*|tq[12]_0)$",
                    re.IGNORECASE)


@dataclass(frozen=True)
class HfFile:
    path: str                  # in the repository
    size: int
    sha256: str | None         # LFS files (every real GGUF)
    git_sha1: str | None       # files stored in git itself (tiny ones): verified by their git blob id


@dataclass(frozen=True)
class Selection:
    repo_id: str
    revision: str              # the commit the listing came from: every part is fetched from the same one
    quant: str
    files: tuple[HfFile, ...]  # one file, or the parts of a split model in order
    endpoint: str
    projector: HfFile | None = None   # the repository's vision projector (mmproj), when it has one


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def quant_of(path: str) -> str | None:
    """`Q4_K_M` for `dir/Model-Q4_K_M-00001-of-00002.gguf`; None when the name carries no quantization."""
    stem = path.rsplit("/", 1)[-1]
    m = SPLIT_NAME.match(stem)
    stem = m["prefix"] if m else (stem[:-5] if stem.lower().endswith(".gguf") else stem)
    q = _QUANT.search(stem)
    if q:
        return q.group(1).upper()
    d = path.rsplit("/", 1)[0] if "/" in path else ""
    q = _QUANT.search(d.rsplit("/", 1)[-1]) if d else None
    return q.group(1).upper() if q else None


def _candidates(files: list[HfFile]) -> dict[str, list[list[HfFile]]]:
    """quant -> model choices, each a list of files (one, or a complete split set in order)."""
    out: dict[str, list[list[HfFile]]] = {}
    splits: dict[tuple[str, int], dict[int, HfFile]] = {}
    for f in files:
        base = f.path.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf") or "mmproj" in base.lower():
            continue
        m = SPLIT_NAME.match(base)
        if m:
            key = (f.path[: len(f.path) - len(base)] + m["prefix"], int(m["count"]))
            splits.setdefault(key, {})[int(m["no"])] = f
            continue
        out.setdefault(quant_of(f.path) or "", []).append([f])
    for (_prefix, count), parts in sorted(splits.items()):
        if sorted(parts) == list(range(1, count + 1)):
            first = parts[1]
            out.setdefault(quant_of(first.path) or "", []).append([parts[i] for i in range(1, count + 1)])
    return out


def choose(files: list[HfFile], tag: str, repo_id: str) -> tuple[str, list[HfFile]]:
    """The model files for a tag (see the module docstring); RegistryError 404 naming what there is."""
    cands = _candidates(files)
    if not cands:
        raise RegistryError(f"hf.co/{repo_id} has no GGUF files (Strata runs GGUF models; look for a "
                            "'-GGUF' repository of this model)", 404)
    available = ", ".join(sorted(q for q in cands if q)) or "files without a quantization in their names"
    if tag.lower() == "latest":
        for q in PREFERRED:
            if q in cands:
                return q, cands[q][0]
        if len(cands) == 1:
            q = next(iter(cands))
            return q, cands[q][0]
        raise RegistryError(f"hf.co/{repo_id} has several GGUFs ({available}); name one: "
                            f"hf.co/{repo_id}:{sorted(q for q in cands if q)[0]}", 404)
    want = tag.upper()
    if want not in cands:
        raise RegistryError(f"hf.co/{repo_id} has no GGUF for quantization {tag!r}; it has: {available}", 404)
    return want, cands[want][0]


def choose_projector(files: list[HfFile], quant: str) -> HfFile | None:
    """The repository's vision projector to take with a model of `quant` (see the module docstring)."""
    found = sorted((f for f in files if "mmproj" in f.path.rsplit("/", 1)[-1].lower()
                    and f.path.lower().endswith(".gguf")), key=lambda f: f.path)
    for want in (quant.upper(), "F16", "Q8_0", "BF16"):
        for f in found:
            if (quant_of(f.path) or "") == want:
                return f
    return found[0] if found else None


def resolve(ref: Reference) -> Selection:
    """List the repository (one Hub API call) and choose the files. Blocking: run it in a thread."""
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    repo_id, ep = ref.repository, endpoint()
    try:
        info = HfApi(endpoint=ep).model_info(repo_id, files_metadata=True, timeout=30)
    except GatedRepoError:
        raise RegistryError(f"hf.co/{repo_id} is gated: accept its terms on the Hub and log in "
                            "(`hf auth login` or HF_TOKEN)", 403) from None
    except RepositoryNotFoundError:
        raise RegistryError(f"hf.co/{repo_id} not found on {ep} (or it is private: log in with "
                            "`hf auth login` or set HF_TOKEN)", 404) from None
    except HfHubHTTPError as e:
        raise RegistryError(f"the Hub at {ep} answered: {str(e).splitlines()[0]}", 502) from None
    except (httpx.HTTPError, OSError) as e:
        raise RegistryError(f"cannot reach the Hub at {ep}: {e}", 502) from None
    files = []
    for s in info.siblings or []:
        lfs = s.lfs
        size = lfs.size if lfs else s.size
        if size is None:
            continue
        files.append(HfFile(s.rfilename, int(size), lfs.sha256 if lfs else None, None if lfs else s.blob_id))
    quant, chosen = choose(files, ref.tag, repo_id)
    return Selection(repo_id, info.sha or "main", quant, tuple(chosen), ep, choose_projector(files, quant))


def source_for(sel: Selection, f: HfFile) -> Source:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(sel.repo_id, f.path, revision=sel.revision, endpoint=sel.endpoint)
    headers = tuple(build_hf_headers(user_agent="strata").items())   # the user's token, when logged in
    digest = f"sha256:{f.sha256}" if f.sha256 else f"gitsha1:{f.git_sha1}"
    return Source(url, digest, f.size, headers, allow_http=sel.endpoint.startswith("http://"))


def cached_file(sel: Selection, f: HfFile) -> Path | None:
    """The file from the user's Hugging Face cache, when it has this exact revision's copy."""
    from huggingface_hub import try_to_load_from_cache

    try:
        p = try_to_load_from_cache(sel.repo_id, f.path, cache_dir=str(hf_hub_dir()), revision=sel.revision)
    except Exception:  # noqa: BLE001 - a cache lookup must never fail a pull
        return None
    if isinstance(p, str) and os.path.isfile(p) and os.path.getsize(p) == f.size:
        return Path(p)
    return None
