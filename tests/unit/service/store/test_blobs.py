"""The store's blobs by digest (app/service/store/blobs.py, ModelStore's blob methods) on a real ModelStore in this test's STRATA_HOME with
real files: finding a file by its sha256 (and not a truncated or missing one), adopting a blob under a name,
LoRA adapters stored once by digest, and releasing only blobs that no model refers to."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from gguf_factory import write_dense_llama, write_lora_llama, write_minimal

from app.engine.gguf.model_info import GGUFError
from app.service.store.blobs import BlobFolder
from app.service.store.model_store import ModelStore


def sha(p) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def partials(store: ModelStore) -> list[str]:
    return [p.name for p in store.models_dir.iterdir() if p.name.startswith(".")]


@pytest.fixture
def store():
    s = ModelStore(discover_external=False)
    assert isinstance(s.blobs, BlobFolder) and s.blob_dir() == s.models_dir == s.blobs.path    # its folder
    return s


@pytest.fixture
def tiny(tmp_path):
    return write_minimal(tmp_path / "src" / "tiny.gguf", seed=1)


@pytest.fixture(scope="module")
def lora(tmp_path_factory, smollm2_path):
    return write_lora_llama(tmp_path_factory.mktemp("lora") / "lora.gguf")


@pytest.fixture(scope="module")
def base(tmp_path_factory, smollm2_path):
    """A dense llama the LoRA adapter fits (its architecture is the adapter's)."""
    return write_dense_llama(tmp_path_factory.mktemp("base") / "base.gguf")


# ---- blob_path: a file on this machine with this digest --------------------------------------------------------

def test_an_own_blob_is_found_by_digest_and_size(store, tiny):
    digest = sha(tiny)
    own = store.models_dir / f"sha256-{digest}.gguf"
    own.write_bytes(tiny.read_bytes())
    assert store.blob_path(digest) == own
    assert store.blob_path(digest, own.stat().st_size) == own
    assert store.blob_path(digest, own.stat().st_size + 1) is None         # a size that disagrees: not that file
    assert store.blob_path("0" * 64) is None


def test_a_truncated_or_missing_blob_is_not_offered(store, tiny):
    digest, size = sha(tiny), tiny.stat().st_size
    own = store.models_dir / f"sha256-{digest}.gguf"
    own.write_bytes(tiny.read_bytes()[: size // 2])                        # an interrupted copy
    assert store.blob_path(digest, size) is None
    own.unlink()
    assert store.blob_path(digest) is None


def test_a_models_file_is_found_by_its_digest_until_it_goes(store, tiny):
    rec = store.import_gguf(tiny, "tiny")
    assert store.blob_path(rec.sha256, rec.size) == Path(rec.path)
    Path(rec.path).unlink()                                                # the DB still names it; the file is gone
    assert store.blob_path(rec.sha256) is None


def test_a_file_hashed_before_outside_the_store_is_found(store, smollm2_path):
    """The built-in model is not in the store's folder: its digest, once computed, finds it there."""
    digest = store.sha256("smollm2:135m")
    assert digest == sha(smollm2_path)
    assert store.blob_path(digest, smollm2_path.stat().st_size) == Path(smollm2_path)


# ---- adopt_blob: a content-addressed file under a name in the store -----------------------------------------

def test_adopt_links_a_file_under_the_name(store, tiny):
    dest = store.adopt_blob(tiny, f"sha256-{sha(tiny)}.gguf")
    assert dest.parent == store.models_dir and dest.read_bytes() == tiny.read_bytes()
    assert os.path.samefile(dest, tiny)                     # same filesystem (tmp_path and STRATA_HOME): a link
    assert partials(store) == []


def test_adopt_is_idempotent(store, tiny):
    name = f"sha256-{sha(tiny)}.gguf"
    first = store.adopt_blob(tiny, name)
    again = store.adopt_blob(tiny, name)                     # the same bytes are there: the temporary goes
    assert again == first and first.read_bytes() == tiny.read_bytes()
    assert store.adopt_blob(first, name) == first            # adopting the blob itself changes nothing
    assert sorted(p.name for p in store.models_dir.iterdir()) == [name]


def test_adopt_of_a_missing_file_leaves_nothing(store, tmp_path):
    with pytest.raises(FileNotFoundError):
        store.adopt_blob(tmp_path / "gone.gguf", "sha256-" + "1" * 64 + ".gguf")
    assert list(store.models_dir.iterdir()) == []


# ---- add_adapter: a LoRA GGUF stored once, by its digest --------------------------------------------------------

def test_an_adapter_is_stored_under_its_digest_once(store, lora, tmp_path):
    stored = store.add_adapter(lora)
    assert stored == store.models_dir / f"sha256-{sha(lora)}.gguf"
    assert stored.read_bytes() == lora.read_bytes()
    copy = tmp_path / "elsewhere" / "same-adapter.gguf"
    copy.parent.mkdir()
    copy.write_bytes(lora.read_bytes())
    assert store.add_adapter(copy) == stored                 # identical bytes share the blob
    assert store.add_adapter(stored) == stored               # a stored blob is taken as it is
    assert [p.name for p in store.models_dir.iterdir()] == [stored.name]


def test_a_file_that_is_not_an_adapter_is_refused_and_not_stored(store, tiny, tmp_path):
    with pytest.raises(GGUFError, match="not a LoRA adapter"):
        store.add_adapter(tiny)
    with pytest.raises((GGUFError, OSError)):
        store.add_adapter(tmp_path / "missing.gguf")
    assert list(store.models_dir.iterdir()) == []


# ---- release_blob: only unused blobs of the store's own folder go ------------------------------------------------

def test_release_deletes_an_unused_blob(store, tiny):
    dest = store.adopt_blob(tiny, f"sha256-{sha(tiny)}.gguf")
    store.release_blob(dest)
    assert not dest.exists() and tiny.exists()               # the link goes, the source stays


def test_release_keeps_a_blob_a_model_uses(store, tiny):
    rec = store.import_gguf(tiny, "tiny")
    store.release_blob(Path(rec.path))
    assert Path(rec.path).exists() and store.get("tiny").path == rec.path


def test_release_keeps_an_adapter_a_model_uses_until_the_model_goes(store, base, lora):
    blob = store.import_gguf(base, "base").path
    adapter = store.add_adapter(lora)
    store.add_model("tuned", Path(blob), sha(base), adapters=(str(adapter),))
    store.release_blob(adapter)
    assert adapter.exists()                                  # "tuned" refers to it
    store.remove("tuned")
    assert not adapter.exists()                              # its last user is gone, so is it
    assert Path(blob).exists()                               # "base" still uses the weights


def test_a_blob_shared_by_two_names_goes_with_the_last(store, tiny):
    a = store.import_gguf(tiny, "a")
    store.import_gguf(tiny, "b")
    store.remove("a")
    assert Path(a.path).exists()
    store.remove("b")
    assert not Path(a.path).exists()


def test_release_never_deletes_outside_the_store_or_other_names(store, tiny):
    store.release_blob(tiny)                                 # not in the store's folder
    assert tiny.exists()
    other = store.models_dir / "notes.gguf"                  # in the folder, but not a sha256- blob
    other.write_bytes(b"x")
    store.release_blob(other)
    assert other.exists()
    store.release_blob(store.models_dir / ("sha256-" + "2" * 64 + ".gguf"))   # already gone: no error
