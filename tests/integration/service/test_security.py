"""Security checks on a live loopback service, as a browser, a DNS-rebinding page or a hostile client would
try them. Complements test_service_api.py (which checks one evil origin, Origin: null, one Host and the basic
API-key round trip): here every route, many spellings, and that a refused request changed nothing.

No model is loaded: every refusal happens before any work (name checks, security middleware)."""
from __future__ import annotations

import http.client as httpclient
import json
import os

import httpx
import pytest


MODEL = "smollm2:135m"


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("svc-security")
    svc = live_service(n_threads=1, num_ctx=512, num_parallel=1, keep_alive="1m", home=home)
    svc.home = home
    # one model of our own to try to delete/overwrite/copy through refused requests
    r = httpx.post(svc.url + "/api/create", json={"model": "mine", "from": MODEL, "stream": False}, timeout=60)
    assert r.status_code == 200, r.text
    yield svc


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def _names(http) -> list[str]:
    return sorted(m["name"] for m in http.get("/api/tags").json()["models"])


def _raw(url: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """A request with exactly this path and these headers (httpx would normalise the path and set Host)."""
    host, port = url.split("//")[1].rsplit(":", 1)
    conn = httpclient.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        hdrs = {"Host": f"{host}:{port}", **(headers or {})}
        if body is not None:
            hdrs.setdefault("Content-Type", "application/json")
            hdrs["Content-Length"] = str(len(body))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, dict(resp.getheaders()), data
    finally:
        conn.close()


# ---- cross-origin browser requests ----------------------------------------------------------------------

EVIL_ORIGINS = [
    "https://evil.example",
    "http://evil.example:11434",
    "http://localhost.evil.example",          # starts like localhost
    "http://127.0.0.1.evil.example",          # starts like the loopback address
    "http://evil.example#@localhost",
    "https://localhost@evil.example",         # userinfo trick: the host is evil.example
    "file://",
    "chrome-extension://abcdefghijklmnop",
    "null",
]


@pytest.mark.parametrize("origin", EVIL_ORIGINS)
def test_cross_origin_requests_are_refused_by_default(http, origin):
    before = _names(http)
    # a "simple" POST (text/plain) is sent by browsers without a preflight: it must be refused, not just
    # left without CORS headers
    r = http.post("/api/create", content=json.dumps({"model": "planted", "from": MODEL, "stream": False}),
                  headers={"Origin": origin, "Content-Type": "text/plain"})
    assert r.status_code == 403, r.text
    assert "origin" in r.json()["error"]
    assert "Access-Control-Allow-Origin" not in r.headers
    r = http.request("DELETE", "/api/delete", json={"model": "mine"}, headers={"Origin": origin})
    assert r.status_code == 403
    r = http.get("/api/tags", headers={"Origin": origin})
    assert r.status_code == 403 and "Access-Control-Allow-Origin" not in r.headers
    r = http.get("/v1/models", headers={"Origin": origin})
    assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
    r = http.options("/api/generate", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
    assert r.status_code == 403 and "Access-Control-Allow-Origin" not in r.headers
    assert _names(http) == before                # nothing was created or deleted


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173",
                                    "https://localhost", "app://strata"])
def test_local_origins_are_allowed(http, origin):
    r = http.get("/api/tags", headers={"Origin": origin})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == origin


def test_configured_origin_allows_only_itself(live_service, smollm2_path):
    with live_service.running(n_threads=1, origins=("https://app.example.com",)) as svc, \
            httpx.Client(base_url=svc.url) as c:
        assert c.get("/api/tags", headers={"Origin": "https://app.example.com"}).status_code == 200
        for other in ("https://evil.example", "http://app.example.com", "https://app.example.com.evil.example",
                      "https://sub.app.example.com"):
            assert c.get("/api/tags", headers={"Origin": other}).status_code == 403, other


# ---- DNS rebinding: the Host header ---------------------------------------------------------------------

EVIL_HOSTS = [
    "evil.example",
    "evil.example:11434",
    "localhost.evil.example",
    "127.0.0.1.nip.io",
    "localhost@evil.example",
    "evil.example#@localhost",
    "[::1].evil.example",
]


@pytest.mark.parametrize("host", EVIL_HOSTS)
def test_host_header_naming_another_site_is_refused(server, host):
    status, _, body = _raw(server.url, "GET", "/api/tags", headers={"Host": host})
    assert status == 403, (host, status, body)
    assert "Host" in json.loads(body)["error"]
    # a write through a rebound name is refused before it runs
    status, _, body = _raw(server.url, "POST", "/api/copy",
                           json.dumps({"source": "mine", "destination": "rebound"}).encode(), headers={"Host": host})
    assert status == 403
    with httpx.Client(base_url=server.url) as c:
        assert "rebound:latest" not in _names(c)


@pytest.mark.parametrize("host", ["localhost", "localhost:11434", "127.0.0.1", "[::1]:8080", "app.localhost"])
def test_local_host_headers_are_allowed(server, host):
    status, _, _ = _raw(server.url, "GET", "/api/tags", headers={"Host": host})
    assert status == 200


# ---- model names that try to leave the store -------------------------------------------------------------

BAD_NAMES = [
    "../../etc/passwd",
    "..",
    "../mine",
    "mine/../../x",
    "/etc/passwd",
    "/tmp/model.gguf",
    "C:\\Windows\\system32\\x",
    "..\\..\\x",
    "%2e%2e%2fsecret",
    "mine%2f..%2f..%2fx",
    "%252e%252e%252f",         # double-encoded
    "mine%5cx",
    "mine:../latest",
    "mine:..",
    "~/.ssh/id_rsa",
    "mine\x00.gguf",
]

# (method, path, body with NAME in the name field) for every endpoint that takes a model name in its body
NAME_ENDPOINTS = [
    ("POST", "/api/show", {"model": "NAME"}),
    ("POST", "/api/show", {"name": "NAME"}),
    ("POST", "/api/create", {"model": "NAME", "from": MODEL, "stream": False}),
    ("POST", "/api/create", {"name": "NAME", "modelfile": f"FROM {MODEL}", "stream": False}),
    ("POST", "/api/copy", {"source": "NAME", "destination": "copied"}),
    ("POST", "/api/copy", {"source": "mine", "destination": "NAME"}),
    ("DELETE", "/api/delete", {"model": "NAME"}),
    ("DELETE", "/api/delete", {"name": "NAME"}),
    ("POST", "/api/generate", {"model": "NAME", "prompt": "hi"}),
    ("POST", "/api/generate", {"model": "NAME"}),                         # load-only form
    ("POST", "/api/chat", {"model": "NAME", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/api/chat", {"model": "NAME", "messages": [], "keep_alive": 0}),   # unload form
    ("POST", "/api/embed", {"model": "NAME", "input": "hi"}),
    ("POST", "/api/embeddings", {"model": "NAME", "prompt": "hi"}),
    ("POST", "/api/layout", {"model": "NAME"}),
    ("POST", "/v1/chat/completions", {"model": "NAME", "messages": [{"role": "user", "content": "hi"}]}),
    ("POST", "/v1/completions", {"model": "NAME", "prompt": "hi"}),
    ("POST", "/v1/embeddings", {"model": "NAME", "input": "hi"}),
]


def _with_name(body: dict, name: str) -> dict:
    return {k: (name if v == "NAME" else v) for k, v in body.items()}


def _error_text(r: httpx.Response) -> str:
    err = r.json()["error"]
    return err["message"] if isinstance(err, dict) else err


@pytest.mark.parametrize("method,path,body", NAME_ENDPOINTS,
                         ids=[f"{m} {p} {next(k for k, v in b.items() if v == 'NAME')}" for m, p, b in NAME_ENDPOINTS])
def test_bad_names_are_refused_at_every_endpoint(server, http, method, path, body):
    before = _names(http)
    models_dir = sorted(p.name for p in (server.home / "models").iterdir())
    for name in BAD_NAMES:
        r = http.request(method, path, json=_with_name(body, name))
        assert r.status_code == 400, (name, r.status_code, r.text)
        text = _error_text(r).lower()
        assert "name" in text, (name, text)
    assert _names(http) == before
    assert sorted(p.name for p in (server.home / "models").iterdir()) == models_dir
    assert not (server.home.parent / "copied").exists()


@pytest.mark.parametrize("raw_path", [
    "/v1/models/..%2F..%2Fetc%2Fpasswd",
    "/v1/models/%2e%2e%2fsecret",
    "/v1/models/%252e%252e%252fsecret",
    "/v1/models/mine%5c..%5cx",
    "/v1/models/..",
    "/v1/models/%2Fetc%2Fpasswd",
    "/v1/models/mine/../../x",
])
def test_bad_names_in_the_url_path_are_refused(server, raw_path):
    status, _, body = _raw(server.url, "GET", raw_path)
    assert status in (400, 404), (raw_path, status, body)
    err = json.loads(body)["error"]
    msg = err["message"] if isinstance(err, dict) else err
    assert msg
    if status == 404:        # only "no such endpoint" (a normalised path) or "not found", never a file read
        assert "passwd" not in msg or "not found" in msg or "no such endpoint" in msg


def test_good_name_still_works(http):
    """The refusals above are about the names, not the endpoints."""
    assert http.post("/api/show", json={"model": "mine"}).status_code == 200
    assert http.get("/v1/models/mine:latest").status_code == 200


# ---- API key ----------------------------------------------------------------------------------------------

def _every_route(doc: dict) -> list[tuple[str, str]]:
    out = []
    for path, ops in doc["paths"].items():
        concrete = path.replace("{model}", MODEL).replace("{digest}", "sha256-" + "0" * 64)
        for method in ops:
            out.append((method.upper(), concrete))
    return out


def test_api_key_is_needed_everywhere_but_version(live_service, smollm2_path):
    with live_service.running(n_threads=1, api_key="k3y-Secret") as svc, \
            httpx.Client(base_url=svc.url, timeout=60) as c:
        good = {"Authorization": "Bearer k3y-Secret"}
        doc = c.get("/api/openapi.json", headers=good).json()
        routes = _every_route(doc)
        assert len(routes) >= 25 and ("GET", "/api/version") in routes
        bad_headers = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "k3y-Secret"},
                       {"Authorization": "Basic azN5LVNlY3JldDo="}, {"Authorization": "Bearer"},
                       {"Authorization": "Bearer k3y-secret"},            # case matters
                       {"X-Api-Key": "k3y-Secret"}]
        for method, path in routes:
            for h in bad_headers:
                r = c.request(method, path, headers=h, json={"model": MODEL} if method != "GET" else None)
                if path == "/api/version":
                    assert r.status_code == 200
                    continue
                assert r.status_code == 401, (method, path, h, r.status_code, r.text[:200])
                assert r.headers.get("WWW-Authenticate") == "Bearer"
                assert "API key" in _error_text(r)
        # query strings and path tricks do not open a route
        for path in ("/api/version/../tags", "/api/tags?/api/version", "//api/tags", "/api/version/..%2Ftags"):
            status, _, body = _raw(svc.url, "GET", path)
            assert status in (401, 404), (path, status, body)
            if status == 200:
                raise AssertionError(f"{path} answered without a key")
        # with the key, nothing is 401
        for method, path in routes:
            if path == "/api/events":
                continue            # a stream that never ends: checked below
            body = {"model": MODEL} if method != "GET" else None
            r = c.request(method, path, headers=good, json=body)
            assert r.status_code != 401, (method, path, r.text[:200])
        with c.stream("GET", "/api/events", headers=good) as r:
            assert r.status_code == 200
        with c.stream("GET", "/api/events") as r:
            assert r.status_code == 401


# ---- /api/create `from` special files ------------------------------------------------------------------------

def test_create_from_special_files_is_refused_without_hanging(server, http, tmp_path):
    """`from` may name a GGUF on this machine; anything else is refused quickly, without reading forever from
    a device or blocking on a FIFO, and without copying anything into the store."""
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    (tmp_path / "dir.gguf").mkdir()
    link = tmp_path / "zero.gguf"
    link.symlink_to("/dev/zero")
    before = _names(http)
    blobs = sorted(p.name for p in (server.home / "models").iterdir())
    for src in ("/dev/zero", "/dev/urandom", str(fifo), str(tmp_path / "dir.gguf"), str(link),
                "/proc/self/environ", "/etc/hostname", str(tmp_path)):
        r = http.post("/api/create", json={"model": "special", "from": src, "stream": False}, timeout=30)
        assert r.status_code in (400, 404), (src, r.status_code, r.text)
        assert r.json()["error"], src
    assert _names(http) == before
    assert sorted(p.name for p in (server.home / "models").iterdir()) == blobs


def test_create_from_a_private_file_does_not_echo_its_content(http, tmp_path):
    """Refusing a non-GGUF `from` must not leak the file's first bytes to the caller (Ollama's CVE-2024-39719 class:
    a create error that disclosed file contents)."""
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET-TOKEN-1234\n" * 4)
    r = http.post("/api/create", json={"model": "leak", "from": str(secret), "stream": False}, timeout=30)
    assert r.status_code == 400, r.text
    assert "not a GGUF file" in r.json()["error"]
    assert "SECR" not in r.text and "SECRET" not in r.text
