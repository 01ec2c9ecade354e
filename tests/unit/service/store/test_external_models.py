"""Other apps' models found read-only (app/service/store/external_models.py), called directly on a fixture home
(STRATA_USER_HOME, tests/conftest.py) of real GGUF files laid out as Ollama, LM Studio and the Hugging Face cache
lay them out: names as each app shows them, the projector that belongs to a model, what is skipped, the sources
asked for, and names kept unique. test_store.py checks the same models through ModelStore."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gguf_factory import write_minimal
from ollama_tree import write_ollama_model

from app.service.store.external_models import (ExternalModel, _unique_names, discover_external, discover_gguf_tree,
                                               discover_ollama, lmstudio_dirs, sibling_projector)


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "user-home"


@pytest.fixture
def ggufs(tmp_path) -> list[Path]:
    return [write_minimal(tmp_path / "src" / f"g{i}.gguf", seed=i) for i in range(1, 5)]


def test_ollama_names_as_ollama_lists_them(home, ggufs):
    root = home / ".ollama" / "models"
    write_ollama_model(root, ["registry.ollama.ai", "library", "tiny", "q8"], ggufs[0], system="Be brief.",
                       params={"temperature": 0.2}, projector=ggufs[3])
    write_ollama_model(root, ["registry.ollama.ai", "someone", "model", "v1"], ggufs[1])
    write_ollama_model(root, ["hf.co", "Org", "Repo-GGUF", "Q4_K_M"], ggufs[2])
    found = {m.name: m for m in discover_ollama(root)}
    assert set(found) == {"tiny:q8", "someone/model:v1", "hf.co/Org/Repo-GGUF:Q4_K_M"}
    t = found["tiny:q8"]
    assert (t.source, t.origin, t.system, t.parameters) == ("ollama", "ollama: tiny:q8", "Be brief.",
                                                            {"temperature": 0.2})
    assert t.path.read_bytes() == ggufs[0].read_bytes() and t.sha256 == t.path.name.removeprefix("sha256-")
    assert t.projector is not None and t.projector.read_bytes() == ggufs[3].read_bytes()
    assert found["someone/model:v1"].origin == "ollama: registry.ollama.ai/someone/model:v1"
    assert found["someone/model:v1"].projector is None


def test_ollama_manifests_that_name_no_usable_gguf_are_skipped(home, ggufs, tmp_path):
    root = home / ".ollama" / "models"
    write_ollama_model(root, ["registry.ollama.ai", "library", "evil", "latest"], ggufs[0],
                       digest_override="sha256:../../../etc/passwd")          # a digest is no path
    write_ollama_model(root, ["registry.ollama.ai", "library", "nomodel", "latest"], None, system="x")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\0" * 64)
    write_ollama_model(root, ["registry.ollama.ai", "library", "junk", "latest"], junk)     # not a GGUF
    bad = root / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    (root / "manifests" / "toplevel").write_text("{}")                                    # too shallow a path
    assert discover_ollama(root) == []
    assert discover_ollama(home / "nowhere") == []


def test_a_gguf_tree_skips_split_parts_projectors_and_other_files(tmp_path, ggufs):
    root = tmp_path / "lms"
    d = root / "pub" / "Repo-GGUF"
    d.mkdir(parents=True)
    os.link(ggufs[0], d / "Tiny-Model-Q8_0.gguf")
    os.link(ggufs[1], d / "Big-00001-of-00002.gguf")
    os.link(ggufs[2], d / "mmproj-Tiny-Q8_0.gguf")
    (d / "readme.gguf").write_text("not a gguf")
    (m,) = discover_gguf_tree(root, "lmstudio")
    assert (m.name, m.origin, m.source) == ("tiny-model-q8_0:latest", "lmstudio: pub/Repo-GGUF/Tiny-Model-Q8_0.gguf",
                                            "lmstudio")
    assert m.projector == d / "mmproj-Tiny-Q8_0.gguf" and m.sha256 is None
    assert discover_gguf_tree(tmp_path / "nowhere", "lmstudio") == []


def test_the_hf_cache_knows_each_blobs_digest(tmp_path, ggufs):
    repo = tmp_path / "hub" / "models--org--Repo-GGUF"
    digest = "ab" * 32
    (repo / "blobs").mkdir(parents=True)
    os.link(ggufs[0], repo / "blobs" / digest)
    (repo / "snapshots" / "rev1").mkdir(parents=True)
    os.symlink(f"../../blobs/{digest}", repo / "snapshots" / "rev1" / "repo-q8_0.gguf")
    (m,) = discover_gguf_tree(repo, "huggingface")
    assert (m.name, m.sha256, m.origin) == ("repo-q8_0:latest", digest, "huggingface: org/Repo-GGUF/repo-q8_0.gguf")


def test_the_projector_beside_a_model_prefers_f16_then_q8_0(tmp_path, ggufs):
    d = tmp_path / "m"
    d.mkdir()
    model = d / "model.gguf"
    os.link(ggufs[0], model)
    assert sibling_projector(model) is None
    os.link(ggufs[1], d / "mmproj-a-Q4_K.gguf")
    assert sibling_projector(model) == d / "mmproj-a-Q4_K.gguf"
    os.link(ggufs[2], d / "mmproj-b-Q8_0.gguf")
    assert sibling_projector(model) == d / "mmproj-b-Q8_0.gguf"
    os.link(ggufs[3], d / "mmproj-c-F16.gguf")
    (d / "mmproj-d-f16.gguf").write_text("not a gguf")            # not a GGUF: never chosen
    assert sibling_projector(model) == d / "mmproj-c-F16.gguf"


def test_lm_studio_s_own_downloads_folder_comes_first(home, tmp_path):
    assert lmstudio_dirs(home) == [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    (home / ".lmstudio").mkdir(parents=True)
    (home / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": str(tmp_path / "dl")}))
    assert lmstudio_dirs(home)[0] == tmp_path / "dl"
    (home / ".lmstudio" / "settings.json").write_text("{broken")
    assert lmstudio_dirs(home)[0] == home / ".lmstudio" / "models"


def test_sources_asked_for_and_names_kept_unique(home, ggufs):
    write_ollama_model(home / ".ollama" / "models", ["registry.ollama.ai", "library", "tiny", "latest"], ggufs[0])
    lms = home / ".lmstudio" / "models" / "pub" / "r"
    lms.mkdir(parents=True)
    os.link(ggufs[1], lms / "tiny.gguf")                         # the same name, "tiny:latest", in LM Studio
    both = discover_external(home)
    assert [(m.name, m.source) for m in both] == [("tiny:latest", "ollama"), ("tiny-lmstudio:latest", "lmstudio")]
    assert [m.source for m in discover_external(home, sources=("lmstudio",))] == ["lmstudio"]
    assert discover_external(home, sources=()) == []
    assert discover_external() == both                           # no home given: STRATA_USER_HOME's


def test_unique_names_count_up_per_source():
    def m(name, source):
        return ExternalModel(name=name, path=Path("/x"), size=1, source=source, origin="", modified_at=0.0)
    out = _unique_names([m("a:latest", "ollama"), m("a:latest", "lmstudio"), m("a:latest", "lmstudio"),
                         m("a-lmstudio:latest", "huggingface")])
    assert [x.name for x in out] == ["a:latest", "a-lmstudio:latest", "a-lmstudio2:latest",
                                     "a-lmstudio-huggingface:latest"]
