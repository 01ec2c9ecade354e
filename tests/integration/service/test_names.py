"""Models keep the name they were pulled by, and "make sure it is there" works, through the official `ollama`
client against a registry the test serves on loopback (tests/support/registry_fixture.py): pull, list, pull again (no blob
byte downloaded), run / chat / embed / show / copy / delete by that name, the usual scripting idiom, a pull of the
built-in model and of a read-only model found in Ollama's folder, a store written by the old code migrated, and
the fields of /api/tags, /api/show and /api/ps against the values Ollama's docs/api.md shows."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import ollama
import pytest
from gguf_factory import write_dense_llama
from registry_fixture import MEDIA, Registry, digest_of

from app.service.dialects.ollama.schema import parameter_size
from app.service.store.registry.reference import canonical_name
from app.service.store.model_store import ModelStore

BUILTIN = "smollm2:135m"
QUICK = {"num_predict": 2}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("names-home")


@pytest.fixture(scope="module")
def service(live_service, home):
    return live_service(n_threads=1, num_ctx=256, num_parallel=1, keep_alive="10m", home=home)


@pytest.fixture(scope="module")
def registry():
    reg = Registry().start()
    yield reg
    reg.stop()


def blob_gets(registry: Registry) -> int:
    return len(registry.log)


# ---- names ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("written,stored", [
    ("llama3.2", "llama3.2:latest"), ("registry.ollama.ai/library/llama3.2:3b", "llama3.2:3b"),
    ("Llama3.2:3B", "llama3.2:3b"), ("user/model", "user/model:latest"),
    ("registry.ollama.ai/user/model:v1", "user/model:v1"), ("127.0.0.1:5000/library/smol:test",
                                                            "127.0.0.1:5000/library/smol:test"),
    ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
    ("huggingface.co/someone/Tiny-GGUF", "hf.co/someone/Tiny-GGUF:latest"),
])
def test_a_name_is_the_reference_spelt_as_ollama_lists_it(written, stored):
    assert canonical_name(written) == stored
    assert canonical_name(stored) == stored                 # a listed name finds itself


# ---- pull, list, pull again, run, copy, delete -----------------------------------------------------------

def test_pulled_model_is_listed_run_copied_and_deleted_by_its_reference(oc, http, registry, tmp_path, home):
    gguf = write_dense_llama(tmp_path / "smol.gguf", seed=301).read_bytes()
    manifest = registry.add_model("library/smol", "test", gguf, system="Be brief.", license="L1")
    name = f"{registry.host}/library/smol:test"
    assert oc.pull(name, insecure=True).status == "success"
    listed = {m.model: m for m in oc.list().models}
    assert name in listed                                   # the reference as written, not a name of Strata's
    raw = registry.manifests[("library/smol", "test")]
    assert listed[name].digest == hashlib.sha256(raw).hexdigest()     # Ollama's digest: the manifest's sha256
    tags = {m["name"]: m for m in http.get("/api/tags").json()["models"]}
    assert tags[name]["model"] == name and tags[name]["details"]["family"] == "llama"

    # pulled again: the manifest is read, no blob (model or metadata) is fetched, the stream is the same
    before = blob_gets(registry)
    again = [p.status for p in oc.pull(name, insecure=True, stream=True)]
    assert again[0] == "pulling manifest" and again[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    for layer in manifest["layers"] + [manifest["config"]]:
        assert f"pulling {layer['digest'][7:19]}" in again
    assert blob_gets(registry) == before
    assert 'SYSTEM """Be brief."""' in oc.show(name).modelfile and oc.show(name).license == "L1"

    # run by that name: every dialect's `model` field echoes it
    r = oc.generate(name, prompt="hi", options=QUICK, keep_alive="1m")
    assert r.model == name and r.done
    c = oc.chat(name, messages=[{"role": "user", "content": "hi"}], options=QUICK)
    assert c.model == name and c.done
    e = oc.embed(name, input="hi")
    assert e.model == name and len(e.embeddings[0]) == 64
    ps = {m.model: m for m in oc.ps().models}
    assert name in ps and ps[name].digest == listed[name].digest

    # copy to a name of the user's choosing, and to another reference; delete by the reference
    oc.copy(name, "my-smol")
    oc.copy(name, "team/smol:v2")
    names = {m.model for m in oc.list().models}
    assert {name, "my-smol:latest", "team/smol:v2"} <= names
    assert oc.generate("team/smol:v2", prompt="hi", options=QUICK, keep_alive=0).model == "team/smol:v2"
    # push accepts the name too: back to where it came from (nothing to upload), and a copy to a new repository
    assert oc.push(name, insecure=True).status == "success"
    oc.copy("my-smol", f"{registry.host}/team/smol:v3")
    assert oc.push(f"{registry.host}/team/smol:v3", insecure=True).status == "success"
    assert json.loads(registry.manifests[("team/smol", "v3")])["layers"][0]["digest"] == digest_of(gguf)
    oc.delete(name)
    assert name not in {m.model for m in oc.list().models}
    assert '"""Be brief."""' in oc.show("my-smol").modelfile     # the copies keep the file
    with pytest.raises(ollama.ResponseError) as err:
        oc.show(name)
    assert err.value.status_code == 404
    # names match without regard to case, as Ollama's do
    assert oc.show("TEAM/SMOL:V2").details.family == "llama"


def test_the_scripting_idiom_pulls_once(oc, registry, tmp_path):
    gguf = write_dense_llama(tmp_path / "idiom.gguf", seed=302).read_bytes()
    registry.add_model("me/idiom", "latest", gguf)
    name = f"{registry.host}/me/idiom:latest"
    pulls = 0
    for _ in range(2):
        if name not in [m.model for m in oc.list().models]:
            oc.pull(name, insecure=True)
            pulls += 1
    assert pulls == 1
    before = blob_gets(registry)
    assert oc.pull(name, insecure=True).status == "success"        # `pull` before every run: cheap
    assert blob_gets(registry) == before


def test_a_changed_model_fetches_only_what_differs(oc, registry, tmp_path):
    gguf = write_dense_llama(tmp_path / "v1.gguf", seed=303).read_bytes()
    registry.add_model("me/moving", "latest", gguf, template="{{ .Prompt }}", system="one")
    name = f"{registry.host}/me/moving:latest"
    oc.pull(name, insecure=True)
    m2 = registry.add_model("me/moving", "latest", gguf, template="{{ .Prompt }}", system="two")
    before = len(registry.log)
    assert oc.pull(name, insecure=True).status == "success"
    fetched = {e["digest"] for e in registry.log[before:]}
    system = next(x["digest"] for x in m2["layers"] if x["mediaType"] == MEDIA["system"])
    assert fetched == {system}                      # the GGUF, template and config (unchanged) were not fetched
    assert 'SYSTEM """two"""' in oc.show(name).modelfile and oc.show(name).template == "{{ .Prompt }}"


# ---- the built-in and other apps' models ----------------------------------------------------------------

def test_pulling_the_builtin_answers_success_and_writes_nothing(oc, smollm2_path, home):
    before = smollm2_path.stat().st_mtime_ns
    stream = list(oc.pull(BUILTIN, stream=True))            # registry.ollama.ai is never asked (no network here)
    statuses = [p.status for p in stream]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    layer = next(p for p in stream if p.digest)
    assert layer.total == layer.completed == smollm2_path.stat().st_size
    assert layer.digest == "sha256:" + hashlib.sha256(smollm2_path.read_bytes()).hexdigest()
    assert oc.pull(BUILTIN, stream=False).status == "success"
    rec = next(m for m in oc.list().models if m.model == BUILTIN)
    assert rec.size == smollm2_path.stat().st_size and smollm2_path.stat().st_mtime_ns == before
    with sqlite3.connect(home / "strata.db") as db:
        assert not db.execute("SELECT 1 FROM models WHERE name = ?", (BUILTIN,)).fetchone()


def _ollama_folder(user_home: Path, registry: Registry, repo: str, tag: str, gguf: bytes) -> None:
    """A model as Ollama keeps it: manifests/HOST/NS/MODEL/TAG and blobs/sha256-HEX."""
    root = user_home / ".ollama" / "models"
    ns, model = repo.split("/")
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    d = digest_of(gguf)
    (root / "blobs" / f"sha256-{d[7:]}").write_bytes(gguf)
    m = root / "manifests" / registry.host / ns / model
    m.mkdir(parents=True, exist_ok=True)
    (m / tag).write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": MEDIA["model"], "digest": d, "size": len(gguf)}]}))


def test_a_read_only_model_is_answered_and_a_newer_one_stored_beside_it(live_service, tmp_path, registry,
                                                                       strata_home):
    import os

    user_home = Path(os.environ["STRATA_USER_HOME"])
    old = write_dense_llama(tmp_path / "ext.gguf", seed=304).read_bytes()
    _ollama_folder(user_home, registry, "me/ext", "v1", old)
    registry.add_model("me/ext", "v1", old)
    home = tmp_path / "ext-home"

    def make():
        return ModelStore(db_path=home / "strata.db", models_dir=home / "models", discover_external=("ollama",))

    svc = live_service(n_threads=1, num_ctx=256, num_parallel=1, home=home, store=make)
    try:
        c = ollama.Client(host=svc.url, timeout=120)
        name = f"{registry.host}/me/ext:v1"
        found = {m.model: m for m in c.list().models}
        assert name in found                                 # listed as Ollama lists it
        before = registry.bytes_served(digest_of(old))
        lines = [p.status for p in c.pull(name, insecure=True, stream=True)]
        assert lines[-1] == "success" and registry.bytes_served(digest_of(old)) == before
        assert not list((home / "models").glob("sha256-*"))  # nothing written
        # the registry has a newer one: it goes into Strata's store under that name, and the stream says so
        new = write_dense_llama(tmp_path / "ext2.gguf", seed=305).read_bytes()
        registry.add_model("me/ext", "v1", new)
        lines = [p.status for p in c.pull(name, insecure=True, stream=True)]
        assert lines[-1] == "success" and any("read-only copy" in s for s in lines)
        assert (home / "models" / f"sha256-{digest_of(new)[7:]}.gguf").read_bytes() == new
        listed = [m for m in c.list().models if m.model == name]
        assert len(listed) == 1 and listed[0].size == len(new)
        assert c.show(name).modelinfo["general.architecture"] == "llama"
        assert (user_home / ".ollama" / "models" / "blobs" / f"sha256-{digest_of(old)[7:]}").read_bytes() == old
    finally:
        svc.stop()


# ---- a store written by the old code -------------------------------------------------------------------------

OLD_SCHEMA = """
CREATE TABLE models (name TEXT PRIMARY KEY, path TEXT NOT NULL, size INTEGER NOT NULL, sha256 TEXT,
    modified_at REAL NOT NULL, parameters TEXT NOT NULL DEFAULT '{}', template TEXT, system TEXT, origin TEXT,
    license TEXT, adapters TEXT NOT NULL DEFAULT '[]');
CREATE TABLE file_hashes (path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL);
"""


def test_names_stored_by_the_old_code_are_migrated(tmp_path):
    """Rows exactly as the old pull wrote them: `namespace-model:tag` names, the reference in `origin`."""
    models = tmp_path / "models"
    models.mkdir()
    blob = write_dense_llama(models / "sha256-00.gguf", seed=306)
    rows = [  # name, origin
        ("me-once:v1", "127.0.0.1:18450/me/once:v1"),                        # another registry
        ("library-smol:test", "127.0.0.1:18450/library/smol:test"),
        ("llama3.2:3b", "registry.ollama.ai/library/llama3.2:3b"),           # unchanged
        ("user-model:latest", "registry.ollama.ai/user/model:latest"),
        ("someone-tiny-gguf:latest", "hf.co/someone/Tiny-GGUF:Q4_K_M (revision 0123456789ab)"),
        ("someone-tiny-gguf:q8_0", "hf.co/someone/Tiny-GGUF:Q8_0 (revision 0123456789ab)"),
        ("mine:latest", "127.0.0.1:18450/me/once:v1"),                      # a copy: a name the user chose
        ("imported:latest", str(tmp_path / "src" / "x.gguf")),
        ("uploaded:latest", "uploaded (/api/create files)"),
    ]
    db = sqlite3.connect(tmp_path / "strata.db")
    db.executescript(OLD_SCHEMA)
    for name, origin in rows:
        db.execute("INSERT INTO models (name, path, size, sha256, modified_at, origin) VALUES (?, ?, ?, ?, 0, ?)",
                   (name, str(blob), blob.stat().st_size, "00", origin))
    db.commit()
    db.close()

    store = ModelStore(db_path=tmp_path / "strata.db", models_dir=models, discover_external=False)
    names = {r.name for r in store.list() if r.source == "store"}
    assert names == {"127.0.0.1:18450/me/once:v1", "127.0.0.1:18450/library/smol:test", "llama3.2:3b",
                     "user/model:latest", "hf.co/someone/Tiny-GGUF:latest", "hf.co/someone/Tiny-GGUF:q8_0",
                     "mine:latest", "imported:latest", "uploaded:latest"}
    assert store.resolve_path("127.0.0.1:18450/me/once:v1") == blob         # found by what was pulled
    assert store.get("someone/Tiny-GGUF:q8_0").name == "hf.co/someone/Tiny-GGUF:q8_0"
    again = ModelStore(db_path=tmp_path / "strata.db", models_dir=models, discover_external=False)
    assert {r.name for r in again.list() if r.source == "store"} == names     # once only
    # an old name still finds its model (a script, a saved chat), unless a model has that name now
    assert again.get("me-once:v1").name == "127.0.0.1:18450/me/once:v1"
    assert again.get("someone-tiny-gguf:q8_0").name == "hf.co/someone/Tiny-GGUF:q8_0"
    assert again.get("mine").name == "mine:latest"
    again.remove("library-smol:test")
    assert "127.0.0.1:18450/library/smol:test" not in {r.name for r in again.list()}


# ---- the fields Ollama's clients read ---------------------------------------------------------------------------

@pytest.mark.parametrize("n,shown", [(8_030_261_248, "8.0B"), (3_212_749_888, "3.2B"), (7_615_616_512, "7.6B"),
                                     (7_241_732_096, "7.2B"), (134_515_008, "134.52M"), (8_000_000_000, "8B"),
                                     (22_000_000, "22M"), (999_999, "1000K")])
def test_parameter_size_is_ollamas_human_number(n, shown):
    assert parameter_size(n) == shown                     # docs/api.md: "8.0B", "3.2B", "7.6B", "7.2B"


def test_tags_show_and_ps_fields_as_ollama_fills_them(oc, http, smollm2_path):
    from app.engine.gguf.model_info import read_model_info

    info = read_model_info(smollm2_path)
    tag = next(m for m in http.get("/api/tags").json()["models"] if m["name"] == BUILTIN)
    assert tag["model"] == BUILTIN and tag["modified_at"].endswith("Z")
    assert len(tag["digest"]) == 64 and tag["size"] == smollm2_path.stat().st_size
    assert tag["details"] == {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                              "parameter_size": "134.52M", "quantization_level": "Q4_1",
                              "context_length": 8192, "embedding_length": 576}
    show = http.post("/api/show", json={"model": BUILTIN}).json()
    mi = show["model_info"]
    # the GGUF's own keys and types, as in the docs' example: file_type is the integer, arrays left empty
    assert mi["general.architecture"] == "llama" and mi["general.file_type"] == 3
    assert mi["general.parameter_count"] == info.n_params
    assert mi["general.quantization_version"] == 2
    assert mi["llama.attention.layer_norm_rms_epsilon"] == 0.00001
    assert mi["llama.context_length"] == 8192 and mi["llama.embedding_length"] == 576
    assert mi["llama.block_count"] == 30 and mi["llama.attention.head_count_kv"] == 3
    assert mi["tokenizer.ggml.model"] == "gpt2" and mi["tokenizer.ggml.tokens"] == []
    assert mi["tokenizer.ggml.merges"] == [] and mi["tokenizer.ggml.token_type"] == []
    assert "general.name" not in mi and "tokenizer.chat_template" not in mi
    verbose = http.post("/api/show", json={"model": BUILTIN, "verbose": True}).json()["model_info"]
    assert len(verbose["tokenizer.ggml.tokens"]) == info.n_vocab
    assert show["details"] == tag["details"] and show["capabilities"][0] == "completion"
    assert show["modified_at"].endswith("Z")
    c = oc.show(BUILTIN)                                  # and the official client parses all of it
    assert c.modelinfo["general.parameter_count"] == info.n_params and c.details.parameter_size == "134.52M"

    oc.generate(BUILTIN, prompt="hi", options=QUICK, keep_alive="5m")
    ps = next(m for m in http.get("/api/ps").json()["models"] if m["name"] == BUILTIN)
    assert ps["model"] == BUILTIN and ps["digest"] == tag["digest"] and ps["details"] == tag["details"]
    assert ps["expires_at"].endswith("Z") and ps["size"] >= ps["size_vram"] >= 0
    assert ps["context_length"] == 256
    oc.generate(BUILTIN, prompt="", keep_alive=0)
