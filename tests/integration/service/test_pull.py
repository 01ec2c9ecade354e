"""`/api/pull` against an OCI registry the test serves on loopback (tests/support/registry_fixture.py), with the official
`ollama` client and raw HTTP: the exact progress stream, a multi-layer model turned into a store entry with its
Modelfile defaults, parallel ranges, resume after a cut and after a cancelled pull, digest mismatch, a missing
blob, a disk-space refusal, two pulls of one model at once, a token-protected registry, and bad names. Pulled
models are real synthetic GGUFs: one is loaded and generates."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import ollama
import pytest
from gguf_factory import write_dense_llama
from registry_fixture import Registry
from service_util import environ, wait_for


PART = 4_000_000                     # STRATA_PULL_PART_MIN: a 27 MB model is fetched in 7 parallel ranges


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("pull-home")


@pytest.fixture(scope="module")
def service(live_service, home):
    with environ({"STRATA_PULL_PART_MIN": str(PART), "STRATA_PULL_RETRIES": "4"}):
        svc = live_service(n_threads=1, num_ctx=256, num_parallel=1, keep_alive="10m", home=home)
        yield svc
        svc.stop()


@pytest.fixture
def registry():
    """A fresh registry per test (its log counts each test's requests alone)."""
    reg = Registry().start()
    yield reg
    reg.stop()


_seed = iter(range(100, 10_000))


def model_bytes(tmp_path: Path) -> bytes:
    """A real synthetic llama GGUF (27 MB, loads in llama.cpp); every call a different file (another seed)."""
    return write_dense_llama(tmp_path / f"m{next(_seed)}.gguf", seed=next(_seed)).read_bytes()


def names(http) -> set[str]:
    return {m["name"] for m in http.get("/api/tags").json()["models"]}


def downloads(home: Path) -> list[str]:
    d = home / "models" / ".downloads"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def stream_lines(http, body: dict) -> list[dict]:
    with http.stream("POST", "/api/pull", json=body) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in r.iter_lines() if line.strip()]


# ---- a clean pull ----------------------------------------------------------------------------------------

def test_clean_pull_of_a_multilayer_model(registry, http, oc, tmp_path, home):
    gguf = model_bytes(tmp_path)
    m = registry.add_model("library/tiny", "latest", gguf, template="{{ .System }} {{ .Prompt }}",
                           system="You are terse.", params={"temperature": 0.25, "stop": ["<x>", "<y>"],
                                                            "num_ctx": 128, "unknown_to_strata": 1},
                           license="TEST LICENSE 1.0")
    lines = stream_lines(http, {"model": f"{registry.host}/library/tiny", "insecure": True})

    # Ollama's stream, exactly: statuses in order, progress objects with only non-empty fields
    assert lines[0] == {"status": "pulling manifest"}
    assert [x["status"] for x in lines[-3:]] == ["verifying sha256 digest", "writing manifest", "success"]
    assert all(set(x) <= {"status", "digest", "total", "completed"} for x in lines)
    layers = m["layers"] + [m["config"]]
    for layer in layers:
        mine = [x for x in lines if x.get("digest") == layer["digest"]]
        assert mine and all(x["status"] == f"pulling {layer['digest'][7:19]}" for x in mine)
        assert all(x["total"] == layer["size"] for x in mine)
        assert mine[-1]["completed"] == layer["size"]
    firsts = [next(i for i, x in enumerate(lines) if x.get("digest") == layer["digest"]) for layer in layers]
    assert firsts == sorted(firsts)                          # layers in manifest order, config last
    model_digest = m["layers"][0]["digest"]
    assert len(set(registry.range_starts(model_digest))) == 7      # parallel ranges of PART bytes
    assert registry.bytes_served(model_digest) == len(gguf)        # each byte once

    # the store entry: the GGUF blob, and the Modelfile defaults from the other layers
    local = f"{registry.host}/library/tiny:latest"
    assert local in names(http)
    blob = home / "models" / f"sha256-{model_digest[7:]}.gguf"
    assert blob.read_bytes() == gguf
    show = oc.show(f"{registry.host}/library/tiny")             # found by the reference that was pulled
    assert 'SYSTEM """You are terse."""' in show.modelfile and show.license == "TEST LICENSE 1.0"
    assert show.template == "{{ .System }} {{ .Prompt }}"
    assert "temperature" in show.parameters and "<y>" in show.parameters
    assert "unknown_to_strata" not in show.parameters
    assert downloads(home) == []                                   # no partial left behind

    # and it is a model: it loads and generates
    r = oc.generate(local, prompt="hi", options={"num_predict": 2}, keep_alive=0)
    assert r.done and r.eval_count >= 1


def test_pull_stream_false_answers_once_and_present_blobs_are_not_downloaded(registry, oc, http, tmp_path, home):
    gguf = model_bytes(tmp_path)
    m = registry.add_model("me/once", "v1", gguf)
    digest = m["layers"][0]["digest"]
    resp = oc.pull(f"{registry.host}/me/once:v1", insecure=True, stream=False)
    assert resp.status == "success"
    r = http.post("/api/pull", json={"model": f"{registry.host}/me/once:v1", "insecure": True, "stream": False})
    assert r.status_code == 200 and r.json() == {"status": "success"}
    assert registry.bytes_served(digest) == len(gguf)              # the second pull fetched nothing

    # a GGUF imported before (same bytes) is not downloaded either
    gguf2 = model_bytes(tmp_path)
    src = tmp_path / "local-copy.gguf"
    src.write_bytes(gguf2)
    oc.create("imported-first", from_=str(src))
    m2 = registry.add_model("me/same", "latest", gguf2)
    lines = stream_lines(http, {"model": f"{registry.host}/me/same", "insecure": True})
    assert lines[-1] == {"status": "success"}
    assert registry.bytes_served(m2["layers"][0]["digest"]) == 0
    assert f"{registry.host}/me/same:latest" in names(http)


# ---- interrupted, resumed, cancelled -----------------------------------------------------------------------

def test_a_cut_connection_is_resumed_from_where_it_stopped(registry, http, tmp_path):
    gguf = model_bytes(tmp_path)
    m = registry.add_model("me/cut", "latest", gguf)
    digest = m["layers"][0]["digest"]
    cut_at = 2 * PART + 1_500_000                                  # inside the third range
    registry.faults.cut_after[digest] = cut_at
    lines = stream_lines(http, {"model": f"{registry.host}/me/cut", "insecure": True})
    assert lines[-1] == {"status": "success"}, lines[-3:]
    starts = registry.range_starts(digest)
    # the cut range, then its retry from where its written bytes end (bytes still in the client's socket buffer
    # when the connection broke are lost: aiohttp drops them), never the whole blob again
    assert len([s for s in starts if 2 * PART <= s <= cut_at]) >= 2, starts
    assert registry.bytes_served(digest) < len(gguf) + PART


def test_a_cancelled_pull_registers_nothing_and_the_next_pull_resumes(registry, http, oc, tmp_path, home):
    gguf = model_bytes(tmp_path)
    m = registry.add_model("me/stall", "latest", gguf)
    digest = m["layers"][0]["digest"]
    stall_at = 2 * PART + 2_000_000
    registry.faults.stall_after[digest] = stall_at
    ref = f"{registry.host}/me/stall"

    def pull_until_stalled():
        # every range but the stalled one done, and that one's 2 MB received (1 MiB of it written): give up
        with http.stream("POST", "/api/pull", json={"model": ref, "insecure": True}) as r:
            for line in r.iter_lines():
                if json.loads(line).get("completed", 0) >= len(gguf) - 2_000_000:
                    break                                           # the client gives up: closes the stream

    pull_until_stalled()
    wait_for(registry.stall_released.is_set, 120, "the stalled download to be cancelled")
    # while (and after) it was being pulled the model is not there: it cannot be listed or loaded
    assert f"{ref}:latest" not in names(http)
    with pytest.raises(ollama.ResponseError) as e:
        oc.generate(ref, prompt="hi")
    assert e.value.status_code == 404
    assert any(n.endswith(".partial") for n in downloads(home))    # kept for the next pull

    first_pull = len(registry.log)
    del registry.faults.stall_after[digest]
    lines = stream_lines(http, {"model": ref, "insecure": True})
    assert lines[-1] == {"status": "success"}
    second = [e["start"] for e in registry.log[first_pull:] if e["digest"] == digest]
    assert any(2 * PART < s <= stall_at for s in second), second     # resumed inside the stalled range
    # every byte crossed the wire once, but for what was received and not yet written (< 1 MiB a range)
    assert registry.bytes_served(digest) < len(gguf) + 7 * (1 << 20)
    assert (home / "models" / f"sha256-{digest[7:]}.gguf").read_bytes() == gguf
    assert downloads(home) == []


# ---- refusals that leave nothing behind -----------------------------------------------------------------

def test_digest_mismatch_is_refused_and_the_partial_removed(registry, http, oc, tmp_path, home):
    gguf = model_bytes(tmp_path)
    m = registry.add_model("me/bad", "latest", gguf)
    registry.faults.corrupt.add(m["layers"][0]["digest"])
    lines = stream_lines(http, {"model": f"{registry.host}/me/bad", "insecure": True})
    assert "digest mismatch" in lines[-1]["error"] and m["layers"][0]["digest"] in lines[-1]["error"]
    assert {"status": "verifying sha256 digest"} in lines
    assert f"{registry.host}/me/bad:latest" not in names(http)
    assert downloads(home) == []
    assert not (home / "models" / f"sha256-{m['layers'][0]['digest'][7:]}.gguf").exists()
    with pytest.raises(ollama.ResponseError) as e:                 # the official client raises it
        oc.pull(f"{registry.host}/me/bad", insecure=True)
    assert "digest mismatch" in str(e.value)


def test_a_manifest_naming_a_missing_blob(registry, http, tmp_path, home):
    m = registry.add_model("me/missing", "latest", model_bytes(tmp_path))
    gone = m["layers"][0]["digest"]
    del registry.blobs[gone]
    lines = stream_lines(http, {"model": f"{registry.host}/me/missing", "insecure": True})
    assert gone in lines[-1]["error"] and "404" in lines[-1]["error"]
    r = http.post("/api/pull", json={"model": f"{registry.host}/me/missing", "insecure": True, "stream": False})
    assert r.status_code == 404 and gone in r.json()["error"]
    r = http.post("/api/pull", json={"model": f"{registry.host}/me/nosuch", "insecure": True, "stream": False})
    assert r.status_code == 404 and "not found" in r.json()["error"]
    assert f"{registry.host}/me/missing:latest" not in names(http)
    assert downloads(home) == []                                   # nothing to resume from: nothing kept


def test_not_enough_disk_space_is_refused_before_downloading(registry, http, home):
    huge = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "ab" * 32, "size": 10 ** 15}
    registry.manifests[("me/huge", "latest")] = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
         "config": None, "layers": [huge]}).encode()
    r = http.post("/api/pull", json={"model": f"{registry.host}/me/huge", "insecure": True, "stream": False})
    assert r.status_code == 507 and "not enough disk space" in r.json()["error"]
    lines = stream_lines(http, {"model": f"{registry.host}/me/huge", "insecure": True})
    assert lines == [{"status": "pulling manifest"}, {"error": r.json()["error"]}]
    assert registry.log == []                                       # not one byte was asked for
    assert f"{registry.host}/me/huge:latest" not in names(http)


def test_a_model_layer_that_is_not_a_gguf_is_not_kept(registry, http, home):
    junk = b"not a gguf at all " * 1000
    m = registry.add_model("me/junk", "latest", junk)
    r = http.post("/api/pull", json={"model": f"{registry.host}/me/junk", "insecure": True, "stream": False})
    assert r.status_code == 415 and "not a GGUF model" in r.json()["error"]
    assert not (home / "models" / f"sha256-{m['layers'][0]['digest'][7:]}.gguf").exists()
    assert f"{registry.host}/me/junk:latest" not in names(http) and downloads(home) == []


def test_two_pulls_of_one_model_at_once_share_one_download(registry, service, tmp_path):
    gguf = model_bytes(tmp_path)
    m = registry.add_model("me/twice", "latest", gguf)
    digest = m["layers"][0]["digest"]
    results, errors = [], []

    def pull():
        try:
            c = ollama.Client(host=service.url, timeout=120)
            results.append([p.status for p in c.pull(f"{registry.host}/me/twice", insecure=True, stream=True)])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=pull) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 2
    assert all(r[-1] == "success" for r in results)
    assert registry.bytes_served(digest) == len(gguf)              # downloaded once, shared


def test_a_server_without_byte_ranges_is_read_in_one_stream(tmp_path, http, home):
    reg = Registry().start()
    try:
        reg.faults.no_ranges = True
        gguf = model_bytes(tmp_path)
        m = reg.add_model("me/noranges", "latest", gguf)
        lines = stream_lines(http, {"model": f"{reg.host}/me/noranges", "insecure": True})
        assert lines[-1] == {"status": "success"}
        digest = m["layers"][0]["digest"]
        assert (home / "models" / f"sha256-{digest[7:]}.gguf").read_bytes() == gguf
        assert reg.range_starts(digest)[-1] == 0                  # the last request took it whole
    finally:
        reg.stop()


def test_a_registry_that_asks_for_a_token(tmp_path, http):
    reg = Registry(token="t0ken").start()
    try:
        reg.add_model("me/locked", "latest", model_bytes(tmp_path))
        lines = stream_lines(http, {"model": f"{reg.host}/me/locked", "insecure": True})
        assert lines[-1] == {"status": "success"}
        assert f"{reg.host}/me/locked:latest" in names(http)
    finally:
        reg.stop()


@pytest.mark.parametrize("bad", ["../x", "", "   ", "x" * 600, "a/" + "b" * 81, "https://user:secret@127.0.0.1:9/a/b",
                                 "host/ns/m?x=1", "a/b/c/d", "ftp://h/n/m", "x:../y", 42])
def test_bad_names_get_a_400_and_change_nothing(http, registry, bad):
    before = names(http)
    r = http.post("/api/pull", json={"model": bad, "insecure": True})
    assert r.status_code == 400, r.text
    assert "secret" not in r.json()["error"]                       # credentials are never echoed
    assert names(http) == before and registry.log == []


def test_plain_http_needs_insecure(http, registry, tmp_path):
    registry.add_model("me/plain", "latest", model_bytes(tmp_path))
    r = http.post("/api/pull", json={"model": f"http://{registry.host}/me/plain", "stream": False})
    assert r.status_code == 400 and "insecure" in r.json()["error"]
    r = http.post("/api/pull", json={"model": f"{registry.host}/me/plain", "stream": False})   # https to it
    assert r.status_code == 502 and "insecure" in r.json()["error"]
    assert registry.log == []
