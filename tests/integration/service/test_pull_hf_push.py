"""Hugging Face pulls through huggingface_hub against a Hub stand-in (HF_ENDPOINT on loopback), split GGUFs
pulled whole and loaded by their first part; push to a loopback registry and pull back; blob uploads and
/api/create with files, with the official `ollama` client; and `strata pull` on the command line."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from gguf_factory import write_dense_llama, write_minimal, write_split_dense_llama
from registry_fixture import Registry, digest_of

from repo_paths import ROOT
from service_util import environ

ENV = {"STRATA_PULL_PART_MIN": "4000000", "HF_TOKEN": "hf_test_token"}


@pytest.fixture(scope="module")
def registry():
    reg = Registry().start()
    yield reg
    reg.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("hf-home")


@pytest.fixture(scope="module")
def service(live_service, home, registry, tmp_path_factory):
    env = {**ENV, "HF_ENDPOINT": registry.url, "HF_HOME": str(tmp_path_factory.mktemp("hf-cache"))}
    with environ(env):
        svc = live_service(n_threads=1, num_ctx=256, num_parallel=1, keep_alive="10m", home=home)
        yield svc
        svc.stop()


def names(http) -> set[str]:
    return {m["name"] for m in http.get("/api/tags").json()["models"]}


@pytest.fixture(scope="module")
def hub_repo(registry, tmp_path_factory):
    """A GGUF repository as they are on the Hub: a split Q4_K_M (in a folder), a single Q8_0, a projector."""
    d = tmp_path_factory.mktemp("hub")
    parts = write_split_dense_llama(d / "Tiny-Q4_K_M.gguf", n_parts=3, seed=21)
    single = write_dense_llama(d / "single.gguf", seed=22)
    files = {f"Q4_K_M/{p.name}": p.read_bytes() for p in parts}
    files["Tiny-Q8_0.gguf"] = single.read_bytes()
    files["mmproj-Tiny-F16.gguf"] = write_minimal(d / "mmproj.gguf", seed=23).read_bytes()
    files["README.md"] = b"# Tiny\n"
    registry.add_hub_repo("someone/Tiny-GGUF", files)
    return files


# ---- Hugging Face ---------------------------------------------------------------------------------------

def test_hf_pull_takes_the_whole_split_set_and_it_loads(oc, http, registry, hub_repo, home):
    stream = list(oc.pull("hf.co/someone/Tiny-GGUF", stream=True))        # no tag: Q4_K_M is chosen
    statuses = [p.status for p in stream]
    assert statuses[0] == "pulling manifest" and statuses[-2:] == ["writing manifest", "success"]
    assert statuses.index("verifying sha256 digest") < statuses.index("writing manifest")
    parts = sorted(p for p in hub_repo if p.startswith("Q4_K_M/"))
    for p in parts:
        d = digest_of(hub_repo[p])
        assert f"pulling {d[7:19]}" in statuses
        assert registry.bytes_served(d) == len(hub_repo[p])
    assert registry.bytes_served(digest_of(hub_repo["Tiny-Q8_0.gguf"])) == 0       # only the chosen quant
    # the repository's projector comes along; this one is no vision projector (a llama GGUF): not kept
    assert "the repository's projector is not a vision projector: the model is pulled without it" in statuses
    # the token went to the Hub, never to the storage host it redirected to
    assert all(auth == "Bearer hf_test_token" for path, auth in registry.hub_auth if not path.startswith("cdn:"))
    assert all(auth is None for path, auth in registry.hub_auth if path.startswith("cdn:"))
    assert "hf.co/someone/Tiny-GGUF:latest" in names(http)      # the reference as pulled, tag added
    first = digest_of(hub_repo[parts[0]])[7:]
    stored = sorted(p.name for p in (home / "models").glob(f"sha256-{first}-*"))
    assert stored == [f"sha256-{first}-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    r = oc.generate("hf.co/someone/Tiny-GGUF", prompt="hi", options={"num_predict": 2}, keep_alive=0)
    assert r.done and r.eval_count >= 1
    # removing it removes every part
    oc.delete("hf.co/someone/Tiny-GGUF:latest")
    assert not list((home / "models").glob(f"sha256-{first}-*"))


def test_hf_quant_by_tag_and_llama_server_spelling(oc, http, registry, hub_repo):
    resp = oc.pull("someone/Tiny-GGUF:q8_0", stream=False)
    assert resp.status == "success"
    assert registry.bytes_served(digest_of(hub_repo["Tiny-Q8_0.gguf"])) == len(hub_repo["Tiny-Q8_0.gguf"])
    assert "hf.co/someone/Tiny-GGUF:q8_0" in names(http)          # llama-server's spelling, with hf.co/
    r = http.post("/api/pull", json={"model": "hf.co/someone/Tiny-GGUF:Q3_K_S", "stream": False})
    assert r.status_code == 404 and "Q4_K_M" in r.json()["error"] and "Q8_0" in r.json()["error"]
    r = http.post("/api/pull", json={"model": "hf.co/someone/Nope-GGUF", "stream": False})
    assert r.status_code == 404 and "not found" in r.json()["error"]


def test_hf_files_kept_in_git_are_checked_by_their_git_blob_id(oc, http, registry, tmp_path):
    small = write_minimal(tmp_path / "small.gguf", seed=24, rows=64).read_bytes()
    registry.add_hub_repo("someone/Small-GGUF", {"small-Q4_0.gguf": small}, lfs=False)
    assert oc.pull("hf.co/someone/Small-GGUF:Q4_0").status == "success"
    assert "hf.co/someone/Small-GGUF:Q4_0" in names(http)
    assert oc.show("hf.co/someone/Small-GGUF:Q4_0").details.family == "llama"


# ---- push, and back ---------------------------------------------------------------------------------------

def test_push_to_a_registry_and_pull_it_back(oc, http, registry, tmp_path, home):
    src = write_dense_llama(tmp_path / "pushme.gguf", seed=31)
    oc.create("pushme:v1", from_=str(src), system="Be brief.", parameters={"temperature": 0.5})
    target = f"{registry.host}/team/pushme:v1"
    lines = list(oc.push(target, insecure=True, stream=True))      # pushes local pushme:v1 (model:tag)
    statuses = [p.status for p in lines]
    assert statuses[0] == "retrieving manifest" and statuses[-2:] == ["pushing manifest", "success"]
    model_digest = digest_of(src.read_bytes())
    assert registry.blobs[model_digest] == src.read_bytes()
    assert ("team/pushme", "v1") in registry.manifests
    # pushing again uploads nothing new
    oc.push(target, insecure=True)
    # and Strata (or Ollama) pulls it back with its defaults
    oc.delete("pushme:v1")
    assert oc.pull(target, insecure=True).status == "success"
    show = oc.show(target)
    assert 'SYSTEM """Be brief."""' in show.modelfile and "temperature" in show.parameters
    r = http.post("/api/push", json={"model": f"{registry.host}/team/nothing:v1", "insecure": True,
                                     "stream": False})
    assert r.status_code == 404 and "not found" in r.json()["error"]


# ---- blobs and /api/create with files -------------------------------------------------------------------

def test_create_from_uploaded_blobs(oc, http, tmp_path, home):
    gguf = write_dense_llama(tmp_path / "upload.gguf", seed=41)
    digest = oc.create_blob(gguf)                                   # POST /api/blobs/<digest>
    assert http.head(f"/api/blobs/{digest}").status_code == 200
    assert http.head("/api/blobs/sha256:" + "0" * 64).status_code == 404
    assert http.head("/api/blobs/sha256:../../x").status_code in (400, 404)
    resp = oc.create("uploaded:v1", files={"upload.gguf": digest}, system="From a blob.", license="MIT",
                     stream=False)
    assert resp.status == "success"
    show = oc.show("uploaded:v1")
    assert show.license == "MIT"
    r = oc.generate("uploaded:v1", prompt="hi", options={"num_predict": 2}, keep_alive=0)
    assert r.done

    # a body that does not match its digest is refused and not kept
    before = sorted(p.name for p in (home / "models").iterdir())
    other = "sha256:" + hashlib.sha256(b"something else").hexdigest()
    r = http.post(f"/api/blobs/{other}", content=gguf.read_bytes())
    assert r.status_code == 400 and "digest mismatch" in r.json()["error"]
    r = http.post(f"/api/blobs/{digest_of(b'not a gguf')}", content=b"not a gguf")
    assert r.status_code == 400 and "GGUF" in r.json()["error"]
    assert sorted(p.name for p in (home / "models").iterdir()) == before
    r = http.post("/api/create", json={"model": "x", "files": {"../evil.gguf": digest}})
    assert r.status_code == 400 and "relative" in r.json()["error"]
    r = http.post("/api/create", json={"model": "x", "files": {"m.gguf": "sha256:" + "1" * 64}})
    assert r.status_code == 400 and "upload it first" in r.text
    r = http.post("/api/create", json={"model": "x", "files": {"m.gguf": digest}, "adapters": {"a.gguf": digest}})
    assert r.status_code == 400 and "not a LoRA adapter" in r.json()["error"]


def test_create_from_uploaded_split_parts(oc, tmp_path):
    parts = write_split_dense_llama(tmp_path / "up.gguf", n_parts=2, seed=42)
    files = {p.name: oc.create_blob(p) for p in parts}
    assert oc.create("split-upload", files=files).status == "success"
    assert oc.generate("split-upload", prompt="hi", options={"num_predict": 1}, keep_alive=0).done


# ---- the command line -----------------------------------------------------------------------------------

def test_strata_pull_on_the_command_line(service, registry, tmp_path):
    registry.add_model("library/cli", "v2", write_dense_llama(tmp_path / "cli.gguf", seed=51).read_bytes(),
                       system="cli")
    env = {**os.environ, "STRATA_HOST": service.url.removeprefix("http://"),
           "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "app", "pull", f"{registry.host}/library/cli:v2", "--insecure"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"pulled as {registry.host}/library/cli:v2" in r.stdout
    assert "success" in r.stderr and "writing manifest" in r.stderr
    r = subprocess.run([sys.executable, "-m", "app", "pull", "../x"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("Error: ") and "'..'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "app", "pull", f"{registry.host}/library/none", "--insecure"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "not found" in r.stderr


def test_the_cli_progress_view_draws_ollamas_stream():
    """On a terminal: one bar per layer, redrawn in place, then the step lines; otherwise one line per step."""
    import io

    from app.cli.pull import ProgressView

    class Tty(io.StringIO):
        def isatty(self):
            return True

    lines = [{"status": "pulling manifest"},
             {"status": "pulling 0123456789ab", "digest": "sha256:0123456789ab" + "0" * 52, "total": 2_000_000},
             {"status": "pulling 0123456789ab", "digest": "sha256:0123456789ab" + "0" * 52, "total": 2_000_000,
              "completed": 2_000_000},
             {"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
    bar = "100% ▕█████████████████████████▏ 2 MB/2 MB"
    for out, expect in ((Tty(), bar), (io.StringIO(), "0123456789ab 2 MB")):
        view = ProgressView(out)
        for line in lines:
            view.update(line)
        view.close()
        text = out.getvalue()
        assert text.startswith("pulling manifest\n") and text.endswith("writing manifest\nsuccess\n")
        assert expect in text


# ---- LoRA adapters ----------------------------------------------------------------------------------------

def test_lora_adapters_from_uploads_and_modelfile_change_the_output_and_travel_with_push(oc, http, registry,
                                                                                        tmp_path):
    from gguf_factory import write_lora_llama

    base = write_dense_llama(tmp_path / "base.gguf", seed=61)
    lora = write_lora_llama(tmp_path / "lora.gguf")
    greedy = {"temperature": 0, "num_predict": 8, "seed": 1}
    oc.create("lora-base", files={"base.gguf": oc.create_blob(base)})
    assert oc.create("lora-on", from_="lora-base", adapters={"lora.gguf": oc.create_blob(lora)}).status == "success"
    assert "ADAPTER " in oc.show("lora-on").modelfile and "ADAPTER " not in oc.show("lora-base").modelfile
    plain = oc.generate("lora-base", prompt="The sky is", options=greedy, keep_alive=0).response
    with_lora = oc.generate("lora-on", prompt="The sky is", options=greedy, keep_alive=0).response
    assert plain != with_lora                                      # the runner applied the adapter
    # the Modelfile spelling: ADAPTER <path on this machine>
    mf = f"FROM lora-base\nADAPTER {lora}\n"
    r = http.post("/api/create", json={"model": "lora-mf", "modelfile": mf, "stream": False})
    assert r.status_code == 200, r.text
    assert oc.generate("lora-mf", prompt="The sky is", options=greedy, keep_alive=0).response == with_lora
    # a model GGUF is not an adapter; an adapter for another architecture does not fit
    r = http.post("/api/create", json={"model": "bad-lora", "from": "lora-base",
                                       "adapters": {"x.gguf": oc.create_blob(base)}, "stream": False})
    assert r.status_code == 400 and "not a LoRA adapter" in r.json()["error"]
    other = write_lora_llama(tmp_path / "qwen-lora.gguf", arch="qwen3")
    r = http.post("/api/create", json={"model": "bad-lora", "from": "lora-base",
                                       "adapters": {"q.gguf": oc.create_blob(other)}, "stream": False})
    assert r.status_code == 400 and "qwen3" in r.json()["error"]
    assert "bad-lora:latest" not in names(http)
    # pushed, the adapter is an Ollama adapter layer; pulled back, it is applied again
    target = f"{registry.host}/team/lora-on:latest"
    oc.push(target, insecure=True)
    media = [x["mediaType"] for x in json.loads(registry.manifests[("team/lora-on", "latest")])["layers"]]
    assert "application/vnd.ollama.image.adapter" in media
    assert oc.pull(target, insecure=True).status == "success"
    assert oc.generate(target, prompt="The sky is", options=greedy, keep_alive=0).response == with_lora
