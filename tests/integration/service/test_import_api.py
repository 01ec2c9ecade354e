"""POST /api/import: a GGUF on this machine into the store, with an NDJSON progress stream; closing the stream
cancels and leaves nothing behind. A real service on loopback with its own store."""
from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request

import pytest

from service_util import wait_for


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory):
    home = tmp_path_factory.mktemp("import-home")
    svc = live_service(n_threads=1, home=home)
    svc.home = home
    yield svc


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=300)


def error_of(server, path, body) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as e:
        post(server, path, body)
    return e.value.code, json.loads(e.value.read())["error"]


def names(server) -> list[str]:
    with urllib.request.urlopen(server.url + "/api/tags", timeout=60) as r:
        return [m["name"] for m in json.loads(r.read())["models"]]


def leftovers(server) -> list[str]:
    return sorted(p.name for p in (server.home / "models").iterdir() if not p.name.startswith("sha256-"))


def test_import_streams_progress_then_success(server, dense_gguf):
    with post(server, "/api/import", {"path": str(dense_gguf), "model": "dense:test", "link": False}) as r:
        assert r.headers["Content-Type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in r if x.strip()]
    progress, last = lines[:-1], lines[-1]
    size = os.path.getsize(dense_gguf)
    assert progress and {p["status"] for p in progress} == {"copying"}
    assert progress[-1]["completed"] == progress[-1]["total"] == size
    assert last["status"] == "success" and last["model"] == "dense:test" and last["size"] == size
    assert last["digest"].startswith("sha256:") and len(last["digest"]) == 71
    assert "dense:test" in names(server)
    # without stream, one JSON object
    with post(server, "/api/import", {"path": str(dense_gguf), "model": "dense:flat", "stream": False}) as r:
        assert json.loads(r.read())["model"] == "dense:flat"


def test_bad_imports_are_4xx_naming_the_problem(server, tmp_path):
    assert error_of(server, "/api/import", {})[0] == 400
    code, msg = error_of(server, "/api/import", {"path": 7})
    assert code == 400 and "'path'" in msg
    code, msg = error_of(server, "/api/import", {"path": str(tmp_path / "missing.gguf")})
    assert code == 400 and "no such file" in msg
    junk = tmp_path / "notes.gguf"
    junk.write_text("these are not the weights you are looking for")
    code, msg = error_of(server, "/api/import", {"path": str(junk)})
    assert code == 400 and "weights you are" not in msg
    code, msg = error_of(server, "/api/import", {"path": str(tmp_path), "model": "x"})
    assert code == 400 and "not a regular file" in msg
    assert leftovers(server) == []


def test_closing_the_stream_cancels_and_leaves_nothing(server, smollm2_path, tmp_path):
    # SmolLM2 with 3 GiB of (sparse) zeros after it: hashing takes seconds, so the cancel lands mid-file
    big = tmp_path / "big.gguf"
    shutil.copyfile(smollm2_path, big)
    os.truncate(big, big.stat().st_size + (3 << 30))
    before = sorted(p.name for p in (server.home / "models").iterdir())
    r = post(server, "/api/import", {"path": str(big), "model": "big:cancelled"})
    first = json.loads(r.readline())
    assert first["status"] in ("hashing", "copying") and first["completed"] < first["total"]
    r.close()                       # the client goes away
    wait_for(lambda: sorted(p.name for p in (server.home / "models").iterdir()) == before, 120,
             "the partial import to be removed")
    assert "big:cancelled" not in names(server)
