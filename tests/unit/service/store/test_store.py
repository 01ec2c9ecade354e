"""The model store on a real SQLite file and real files: import (hard link / copy), list, show, cp, rm,
create, the built-in model, discovery of other apps' models from a fixture tree, and refusals that leave the
store unchanged."""
from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest
from gguf_factory import write_minimal
from ollama_tree import write_ollama_model

from app import paths
from app.engine.gguf.model_info import GGUFError
from app.service.store.names import InvalidName, normalize_name, parse_name, sanitize_name
from app.service.store.model_store import ModelNotFound, ModelStore, ReadOnlyModel, StoreError


def sha(p) -> str:
    return hashlib.sha256(open(p, "rb").read()).hexdigest()


@pytest.fixture
def store():
    return ModelStore()


@pytest.fixture
def tiny(tmp_path):
    return write_minimal(tmp_path / "src" / "Tiny-Model.Q8_0.gguf", seed=1)


def snapshot(store: ModelStore) -> tuple:
    """Everything a refused request must leave alone: names, files, DB rows."""
    with sqlite3.connect(store.db_path) as db:
        rows = db.execute("SELECT * FROM models ORDER BY name").fetchall()
    files = sorted((p.name, p.stat().st_size) for p in store.models_dir.iterdir())
    return [r.name for r in store.list()], files, rows


# ---- names -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [
    ("llama3", "llama3:latest"), ("Llama3.2:3B", "llama3.2:3b"), ("smollm2:135m", "smollm2:135m"),
    ("my_model-v1.5:q4_k_m", "my_model-v1.5:q4_k_m"), ("  spaced:tag ", "spaced:tag"),
])
def test_valid_names(name, expected):
    assert normalize_name(name) == expected


@pytest.mark.parametrize("name", [
    "", " ", "a/b", "../x", "..", "x:..", "a..b", "/etc/passwd", "C:\\models\\x", "a\\b", "%2e%2e", "a%2Fb",
    "x:y:z", "x:", ":tag", "-lead", ".hidden", "a b", "tab\tname", "nul\0byte", "é", "x" * 81, "x:" + "t" * 81,
])
def test_invalid_names(name):
    with pytest.raises(InvalidName):
        parse_name(name)


def test_sanitize_makes_valid_names():
    assert sanitize_name("SmolLM2-135M-Instruct.Q4_1") == "smollm2-135m-instruct.q4_1:latest"
    assert sanitize_name("  weird name!!..gguf ", "Q4 K") == "weird-name.gguf:q4-k"
    assert sanitize_name("...") == "model:latest"
    for text in ("a/b/../c", "%2F..%2F", "日本語"):
        normalize_name(sanitize_name(text))          # never raises


# ---- the built-in model ----------------------------------------------------------------------------------

def test_builtin_always_listed(store, smollm2_path):
    recs = {r.name: r for r in store.list()}
    b = recs["smollm2:135m"]
    assert (b.source, b.read_only, b.path, b.size) == ("builtin", True, str(smollm2_path), smollm2_path.stat().st_size)
    assert store.resolve_path("smollm2:135m") == smollm2_path
    assert store.info("smollm2:135m").n_layer == 30
    digest = store.sha256("smollm2:135m")
    assert digest == sha(smollm2_path)
    assert store.sha256("smollm2:135m") == digest             # cached in the DB now
    with sqlite3.connect(store.db_path) as db:
        assert db.execute("SELECT sha256 FROM file_hashes").fetchall() == [(digest,)]


def test_builtin_is_read_only(store, tiny):
    before = snapshot(store)
    for action in (lambda: store.remove("smollm2:135m"), lambda: store.import_gguf(tiny, "smollm2:135m"),
                   lambda: store.copy("smollm2:135m", "smollm2:135m"), lambda: store.create("smollm2:135m", str(tiny))):
        with pytest.raises(ReadOnlyModel, match="built-in"):
            action()
    assert snapshot(store) == before


# ---- import / list / get / cp / rm -----------------------------------------------------------------------

def test_import_hard_links_on_the_same_filesystem(store, tiny, strata_home):
    calls = []
    rec = store.import_gguf(tiny, "tiny:q8", progress=lambda *a: calls.append(a))
    assert rec.name == "tiny:q8" and rec.source == "store" and not rec.read_only
    assert rec.sha256 == sha(tiny) and rec.size == tiny.stat().st_size
    blob = paths.models_dir() / f"sha256-{rec.sha256}.gguf"
    assert rec.path == str(blob)
    assert os.path.samefile(blob, tiny)            # tmp_path and STRATA_HOME share a filesystem: a hard link
    assert calls and calls[-1] == ("hashing", rec.size, rec.size)
    assert store.get("tiny:q8") == rec
    assert store.resolve_path("TINY:Q8") == blob
    assert [r.name for r in store.list()] == ["tiny:q8", "smollm2:135m"]
    # a new store object on the same DB sees it (persisted)
    assert ModelStore().get("tiny:q8") == rec


def test_import_copy(store, tiny):
    calls = []
    rec = store.import_gguf(tiny, link=False, progress=lambda *a: calls.append(a))
    assert rec.name == "tiny-model.q8_0:latest"                      # from the file name
    assert not os.path.samefile(rec.path, tiny)
    assert sha(rec.path) == rec.sha256 == sha(tiny)
    assert calls[-1] == ("copying", rec.size, rec.size)
    assert not [p for p in store.models_dir.iterdir() if p.name.startswith(".")]   # no partial files left


def test_same_file_twice_shares_one_blob(store, tiny):
    a = store.import_gguf(tiny, "a")
    b = store.import_gguf(tiny, "b", link=False)
    assert a.path == b.path
    assert len(list(store.models_dir.iterdir())) == 1


def test_reimport_replaces_and_frees_the_old_blob(store, tmp_path):
    old = store.import_gguf(write_minimal(tmp_path / "v1.gguf", seed=1), "m")
    new = store.import_gguf(write_minimal(tmp_path / "v2.gguf", seed=2), "m")
    assert old.sha256 != new.sha256
    assert not os.path.exists(old.path) and os.path.exists(new.path)


def test_cp_and_rm(store, tiny):
    rec = store.import_gguf(tiny, "orig:v1")
    cp = store.copy("orig:v1", "other")
    assert (cp.name, cp.path, cp.sha256) == ("other:latest", rec.path, rec.sha256)
    assert store.remove("orig:v1").name == "orig:v1"
    assert os.path.exists(rec.path)                  # still used by other:latest
    with pytest.raises(ModelNotFound):
        store.get("orig:v1")
    store.remove("other")
    assert not os.path.exists(rec.path)              # last name gone: blob gone
    assert os.path.exists(tiny)                      # the user's file is never touched
    assert [r.name for r in store.list()] == ["smollm2:135m"]


def test_cp_from_builtin_keeps_the_file_where_it_is(store, smollm2_path):
    rec = store.copy("smollm2:135m", "mine")
    assert rec.path == str(smollm2_path) and rec.source == "store"
    store.remove("mine")
    assert smollm2_path.exists()


def test_create_layers_parameters(store, tiny):
    store.import_gguf(tiny, "base")
    a = store.create("chatty", "base", {"temperature": 0.2, "stop": ["<end>"]}, None, "You are terse.")
    assert (a.parameters, a.system, a.path) == ({"temperature": 0.2, "stop": ["<end>"]}, "You are terse.",
                                                store.get("base").path)
    b = store.create("chatty:2", "chatty", {"temperature": 0.9, "num_ctx": 1024}, "{{ prompt }}", None)
    assert b.parameters == {"temperature": 0.9, "stop": ["<end>"], "num_ctx": 1024}
    assert (b.template, b.system) == ("{{ prompt }}", "You are terse.")
    c = store.create("frompath", str(tiny), {"top_k": 5})
    assert c.parameters == {"top_k": 5} and c.sha256 == sha(tiny)
    with pytest.raises(ModelNotFound):
        store.create("x", "no-such-model")
    with pytest.raises(StoreError):
        store.create("x", "base", {"bad": object()})
    assert "x:latest" not in {r.name for r in store.list()}


# ---- refusals leave the store unchanged ------------------------------------------------------------------

def test_bad_input_changes_nothing(store, tiny, tmp_path, smollm2_path):
    store.import_gguf(tiny, "keep")
    before = snapshot(store)
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(smollm2_path.read_bytes()[:5_000_000])
    cases = [
        (lambda: store.import_gguf(tmp_path / "missing.gguf", "x"), GGUFError, "no such file"),
        (lambda: store.import_gguf(tmp_path, "x"), GGUFError, "not a regular file"),
        (lambda: store.import_gguf(not_gguf, "x"), GGUFError, "not a GGUF file"),
        (lambda: store.import_gguf(truncated, "x"), GGUFError, "truncated"),
        (lambda: store.import_gguf(tiny, "../escape"), InvalidName, "'..'"),
        (lambda: store.import_gguf(tiny, "/abs/path"), InvalidName, "expected \\[host/\\]"),
        (lambda: store.import_gguf(tiny, "..%2F..%2Fx"), InvalidName, "'..'"),
        (lambda: store.import_gguf(tiny, "a:b:c"), InvalidName, "more than one ':'"),
        (lambda: store.copy("keep", "a/b/c/d"), InvalidName, "expected \\[host/\\]"),
        (lambda: store.copy("missing", "y"), ModelNotFound, "not found"),
        (lambda: store.copy("keep", "keep:latest"), StoreError, "same model"),
        (lambda: store.remove("missing"), ModelNotFound, "not found"),
        (lambda: store.remove("../keep"), InvalidName, "'..'"),
        (lambda: store.get("C:\\x"), InvalidName, "'\\\\'"),
    ]
    for action, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            action()
    assert snapshot(store) == before


def test_missing_file_behind_a_name(store, tmp_path):
    src = write_minimal(tmp_path / "gone.gguf")
    rec = store.import_gguf(src, "gone", link=False)
    os.unlink(rec.path)
    with pytest.raises(ModelNotFound, match="missing"):
        store.resolve_path("gone")
    with pytest.raises(FileNotFoundError):
        store.copy("gone", "gone2")
    store.remove("gone")                      # removing the dangling name still works


# ---- other apps' models (fixture tree under STRATA_USER_HOME) --------------------------------------------

@pytest.fixture
def other_apps(tmp_path):
    """A fake home with Ollama, LM Studio and Hugging Face cache models, plus junk they must skip."""
    home = tmp_path / "user-home"                     # = STRATA_USER_HOME (conftest)
    src = tmp_path / "srcs"
    g1, g2, g3, g4 = (write_minimal(src / f"m{i}.gguf", seed=i) for i in range(1, 5))
    oll = home / ".ollama" / "models"
    write_ollama_model(oll, ["registry.ollama.ai", "library", "tiny", "q8"], g1,
                  params={"temperature": 0.5, "stop": ["<x>"]}, system="Be brief.")
    write_ollama_model(oll, ["hf.co", "someorg", "Some-Repo-GGUF", "Q8_0"], g2)
    write_ollama_model(oll, ["registry.ollama.ai", "library", "evil", "latest"], g1,
                  digest_override="sha256:../../../../etc/passwd")
    write_ollama_model(oll, ["registry.ollama.ai", "library", "noblob", "latest"], None)
    (oll / "manifests" / "registry.ollama.ai" / "library" / "broken").mkdir(parents=True)
    (oll / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest").write_text("{not json")
    notgguf = src / "junk.bin"
    notgguf.write_bytes(b"\0" * 64)
    write_ollama_model(oll, ["registry.ollama.ai", "library", "junk", "latest"], notgguf)

    lms = home / ".lmstudio" / "models" / "pub" / "Tiny-GGUF"
    lms.mkdir(parents=True)
    os.link(g3, lms / "Tiny-Model-Q8_0.gguf")
    os.link(g3, lms / "mmproj-Tiny-F16.gguf")                    # vision projector: paired, not a model
    os.link(g3, lms / "Big-Model-00001-of-00002.gguf")           # split model: skipped
    (lms / "readme.gguf").write_text("not a gguf")               # wrong magic: skipped

    hub = home / ".cache" / "huggingface" / "hub" / "models--org--Repo-GGUF"
    d4 = sha(g4)
    (hub / "blobs").mkdir(parents=True)
    os.link(g4, hub / "blobs" / d4)
    for rev in ("rev1", "rev2"):                                 # same blob in two snapshots: listed once
        (hub / "snapshots" / rev).mkdir(parents=True)
        os.symlink(f"../../blobs/{d4}", hub / "snapshots" / rev / "repo-q8_0.gguf")
    return {"ollama": g1, "ollama_hf": g2, "lmstudio": g3, "hf": g4}


def test_discovers_other_apps_models(store, other_apps):
    recs = {r.name: r for r in store.list()}
    ext = {n: r for n, r in recs.items() if r.source not in ("store", "builtin")}
    assert set(ext) == {"tiny:q8", "hf.co/someorg/Some-Repo-GGUF:Q8_0", "tiny-model-q8_0:latest", "repo-q8_0:latest"}
    t = ext["tiny:q8"]
    assert (t.source, t.read_only, t.sha256) == ("ollama", True, sha(other_apps["ollama"]))
    assert t.parameters == {"temperature": 0.5, "stop": ["<x>"]} and t.system == "Be brief."
    assert t.origin == "ollama: tiny:q8"
    assert ext["hf.co/someorg/Some-Repo-GGUF:Q8_0"].origin == "ollama: hf.co/someorg/Some-Repo-GGUF:Q8_0"
    lm = ext["tiny-model-q8_0:latest"]
    assert (lm.source, lm.origin) == ("lmstudio", "lmstudio: pub/Tiny-GGUF/Tiny-Model-Q8_0.gguf")
    assert lm.projector.endswith("mmproj-Tiny-F16.gguf")         # the projector beside it is paired with it
    assert t.projector is None and ext["repo-q8_0:latest"].projector is None
    hf = ext["repo-q8_0:latest"]
    assert (hf.source, hf.sha256) == ("huggingface", sha(other_apps["hf"]))
    assert hf.origin.startswith("huggingface: org/Repo-GGUF/")
    # usable like any model: info, path, copy into the store (no file copied)
    assert store.info("tiny:q8").n_layer == 1
    assert os.path.samefile(store.resolve_path("repo-q8_0"), other_apps["hf"])
    mine = store.copy("tiny:q8", "mytiny")
    assert mine.source == "store" and mine.parameters == {"temperature": 0.5, "stop": ["<x>"]}
    assert store.sha256("tiny-model-q8_0") == sha(other_apps["lmstudio"])


def test_external_models_are_read_only(store, other_apps):
    before = snapshot(store)
    files_before = {p: p.stat().st_mtime_ns for p in other_apps.values()}
    with pytest.raises(ReadOnlyModel, match="ollama"):
        store.remove("tiny:q8")
    with pytest.raises(ReadOnlyModel, match="huggingface"):
        store.remove("repo-q8_0")
    assert snapshot(store) == before
    assert {p: p.stat().st_mtime_ns for p in other_apps.values()} == files_before


def test_store_names_shadow_external_ones(store, other_apps, tiny):
    store.import_gguf(tiny, "tiny:q8")
    recs = [r for r in store.list() if r.name == "tiny:q8"]
    assert len(recs) == 1 and recs[0].source == "store"


def test_discovery_can_be_turned_off(other_apps, monkeypatch):
    from app.service.config import ServiceConfig

    monkeypatch.setenv("STRATA_EXTERNAL_MODELS", "0")   # read by the config, which tells the store
    store = ModelStore(discover_external=ServiceConfig.from_env().external_sources)
    assert [r.name for r in store.list()] == ["smollm2:135m"]
    with pytest.raises(ModelNotFound):
        store.get("tiny:q8")


def test_import_across_filesystems_copies(store, tmp_path):
    """/dev/shm is another filesystem than the store here: the hard link fails (EXDEV) and the file is copied."""
    import pathlib

    shm = pathlib.Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == store.models_dir.stat().st_dev:
        pytest.skip("no second filesystem to import from")
    src = write_minimal(shm / f"strata-test-{os.getpid()}-{tmp_path.name}.gguf")
    try:
        phases = []
        rec = store.import_gguf(src, "elsewhere", progress=lambda phase, *a: phases.append(phase))
        assert set(phases) == {"copying"}
        assert not os.path.samefile(rec.path, src) and sha(rec.path) == sha(src)
    finally:
        src.unlink()


def test_split_gguf_is_imported_whole_and_removed_whole(store, tmp_path):
    """A split GGUF is named by its first part: every part is stored (named so llama.cpp finds them), the model's
    size is all of them, and removing it removes every part. A later part alone is refused."""
    from gguf_factory import write_split_dense_llama

    parts = write_split_dense_llama(tmp_path / "src" / "Big.gguf", n_parts=3)
    with pytest.raises(GGUFError, match="use its first part"):
        store.import_gguf(parts[1], "part-two")
    rec = store.import_gguf(parts[0], "big")
    assert rec.size == sum(p.stat().st_size for p in parts) and rec.sha256 == sha(parts[0])
    stored = sorted(p.name for p in store.models_dir.glob(f"sha256-{rec.sha256}-*"))
    assert stored == [f"sha256-{rec.sha256}-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert store.info("big").n_layer == 3 and len(store.info("big").tensors) == 30
    parts[2].unlink()                                     # the source may go: the store has its own copies
    assert store.info("big").file_size == rec.size
    store.remove("big")
    assert not list(store.models_dir.glob("sha256-*"))
