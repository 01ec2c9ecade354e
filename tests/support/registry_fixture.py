"""Registries served by the tests on loopback (never the internet): a small OCI distribution registry (what
Ollama's registry speaks) and a Hugging Face Hub stand-in (reached through HF_ENDPOINT). Both are one real aiohttp
server on its own thread, with faults to inject per blob: a connection cut after N bytes, a stall, corrupted bytes,
a missing blob, no byte-range support. Everything served is recorded, so tests assert on what went over the wire.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MEDIA = {"model": "application/vnd.ollama.image.model", "template": "application/vnd.ollama.image.template",
         "system": "application/vnd.ollama.image.system", "params": "application/vnd.ollama.image.params",
         "license": "application/vnd.ollama.image.license", "config": "application/vnd.docker.container.image.v1+json",
         "projector": "application/vnd.ollama.image.projector"}


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Faults:
    cut_after: dict[str, int] = field(default_factory=dict)      # digest -> bytes sent before the connection drops
    cut_times: dict[str, int] = field(default_factory=dict)      # how many GETs are cut (default once)
    stall_after: dict[str, int] = field(default_factory=dict)    # digest -> bytes sent before the server stalls
    corrupt: set[str] = field(default_factory=set)               # served with one byte flipped
    no_ranges: bool = False                                      # Range ignored: always the whole blob, 200


class Registry:
    """OCI registry + Hub stand-in. `url` is http://127.0.0.1:PORT; `host` is 127.0.0.1:PORT."""

    def __init__(self, token: str | None = None):
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}
        self.hub: dict[str, dict] = {}                      # repo_id -> {"sha": ..., "files": {path: bytes}}
        self.faults = Faults()
        self.token = token                                  # when set: a bearer challenge on /v2/
        self.log: list[dict] = []                           # every blob GET: digest, range start, bytes sent
        self.served: Counter = Counter()                    # digest -> bytes sent
        self.stalled = threading.Event()                    # a stalled response has started waiting
        self.stall_released = threading.Event()             # ... and its connection is gone (client cancelled)
        self.hub_auth: list[tuple[str, str | None]] = []    # (path, Authorization) of every Hub file request
        self.uploads: dict[str, bytearray] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ---- content -------------------------------------------------------------------------------------------
    def add_blob(self, data: bytes) -> str:
        d = digest_of(data)
        self.blobs[d] = data
        return d

    def add_model(self, repo: str, tag: str, gguf: bytes | list[bytes], *, template: str | None = None,
                  system: str | None = None, params: dict | None = None, license: str | None = None,
                  extra_layers: list[dict] | None = None, config: dict | None = None) -> dict:
        """An Ollama-style manifest (model layers, then template/system/params/license); returns it."""
        layers = []
        for part in (gguf if isinstance(gguf, list) else [gguf]):
            layers.append({"mediaType": MEDIA["model"], "digest": self.add_blob(part), "size": len(part)})
        for kind, text in (("template", template), ("system", system),
                           ("params", json.dumps(params) if params is not None else None), ("license", license)):
            if text is not None:
                data = text.encode()
                layers.append({"mediaType": MEDIA[kind], "digest": self.add_blob(data), "size": len(data)})
        layers += extra_layers or []
        cfg = json.dumps(config or {"model_format": "gguf", "model_family": "llama"}).encode()
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_V2,
                    "config": {"mediaType": MEDIA["config"], "digest": self.add_blob(cfg), "size": len(cfg)},
                    "layers": layers}
        self.manifests[(repo, tag)] = json.dumps(manifest).encode()
        return manifest

    def add_hub_repo(self, repo_id: str, files: dict[str, bytes], lfs: bool = True) -> str:
        sha = hashlib.sha1(repo_id.encode() + str(len(self.hub)).encode()).hexdigest()
        self.hub[repo_id] = {"sha": sha, "files": dict(files), "lfs": lfs}
        for data in files.values():
            self.add_blob(data)
        return sha

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def bytes_served(self, digest: str) -> int:
        return self.served[digest]

    def range_starts(self, digest: str) -> list[int]:
        return [e["start"] for e in self.log if e["digest"] == digest]

    # ---- server --------------------------------------------------------------------------------------------
    def start(self) -> "Registry":
        ready = threading.Event()

        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._serve(ready))
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="test-registry", daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("test registry did not start")
        return self

    async def _serve(self, ready: threading.Event) -> None:
        app = web.Application(client_max_size=1 << 30)
        r = app.router
        r.add_get("/token", self._token)
        r.add_route("*", "/v2/{ns}/{model}/manifests/{tag}", self._manifest)
        r.add_route("GET", "/v2/{ns}/{model}/blobs/{digest}", self._blob)
        r.add_route("HEAD", "/v2/{ns}/{model}/blobs/{digest}", self._blob_head)
        r.add_post("/v2/{ns}/{model}/blobs/uploads/", self._upload_start)
        r.add_put("/v2/{ns}/{model}/blobs/uploads/{id}", self._upload_put)
        r.add_get("/api/models/{ns}/{repo}", self._hub_info)
        r.add_get("/api/models/{ns}/{repo}/revision/{rev}", self._hub_info)
        r.add_get("/{ns}/{repo}/resolve/{rev}/{path:.+}", self._hub_resolve)
        r.add_get("/cdn/{digest}", self._cdn)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        ready.set()

    def stop(self) -> None:
        if self._loop is None:
            return

        async def down():
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # ---- registry handlers -----------------------------------------------------------------------------------
    def _authorized(self, request) -> bool:
        if not self.token:
            return True
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    def _challenge(self, request) -> web.Response:
        realm = f"{self.url}/token"
        return web.Response(status=401, headers={"WWW-Authenticate": f'Bearer realm="{realm}",service="test"'})

    async def _token(self, request):
        return web.json_response({"token": self.token})

    async def _manifest(self, request):
        if not self._authorized(request):
            return self._challenge(request)
        key = (f"{request.match_info['ns']}/{request.match_info['model']}", request.match_info["tag"])
        if request.method == "PUT":
            body = await request.read()
            doc = json.loads(body)
            for layer in doc["layers"] + [doc["config"]]:
                if layer["digest"] not in self.blobs:
                    return web.json_response({"errors": [{"code": "BLOB_UNKNOWN"}]}, status=400)
            self.manifests[key] = body
            return web.Response(status=201)
        if key not in self.manifests:
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        return web.Response(body=self.manifests[key], content_type=MANIFEST_V2)

    async def _blob_head(self, request):
        if not self._authorized(request):
            return self._challenge(request)
        d = request.match_info["digest"]
        return web.Response(status=200 if d in self.blobs else 404)

    async def _blob(self, request):
        if not self._authorized(request):
            return self._challenge(request)
        return await self._send_blob(request, request.match_info["digest"])

    async def _send_blob(self, request, d: str):
        data = self.blobs.get(d)
        if data is None:
            return web.json_response({"errors": [{"code": "BLOB_UNKNOWN"}]}, status=404)
        if d in self.faults.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, end = 0, len(data) - 1
        rng = request.headers.get("Range")
        ranged = rng is not None and not self.faults.no_ranges
        if ranged:
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start, end = int(a), (int(b) if b else len(data) - 1)
        body = data[start:end + 1]
        headers = {"Content-Length": str(len(body)), "Content-Type": "application/octet-stream"}
        if ranged:
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        resp = web.StreamResponse(status=206 if ranged else 200, headers=headers)
        await resp.prepare(request)
        entry = {"digest": d, "start": start, "sent": 0}
        self.log.append(entry)
        # a cut or stall at byte N of the blob hits the one response whose range holds byte N
        cut = self.faults.cut_after.get(d)
        cut = cut if cut is not None and start <= cut <= end else None
        stall = self.faults.stall_after.get(d)
        stall = stall if stall is not None and start <= stall <= end else None
        limit = len(body)
        if cut is not None:
            limit = min(limit, cut - start)
        if stall is not None:
            limit = min(limit, stall - start)
        for i in range(0, limit, 1 << 16):
            chunk = body[i:min(limit, i + (1 << 16))]
            await resp.write(chunk)
            entry["sent"] += len(chunk)
            self.served[d] += len(chunk)
        if stall is not None and limit < len(body):
            self.stalled.set()
            try:
                await asyncio.sleep(3600)
            finally:
                self.stall_released.set()
        if cut is not None and limit < len(body):
            times = self.faults.cut_times.get(d, 1) - 1
            if times <= 0:
                del self.faults.cut_after[d]
            else:
                self.faults.cut_times[d] = times
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp

    async def _upload_start(self, request):
        if not self._authorized(request):
            return self._challenge(request)
        uid = uuid.uuid4().hex
        self.uploads[uid] = bytearray()
        loc = f"/v2/{request.match_info['ns']}/{request.match_info['model']}/blobs/uploads/{uid}?_state=x"
        return web.Response(status=202, headers={"Location": loc, "Docker-Upload-UUID": uid})

    async def _upload_put(self, request):
        if not self._authorized(request):
            return self._challenge(request)
        uid = request.match_info["id"]
        if uid not in self.uploads or request.query.get("_state") != "x":
            return web.Response(status=404)
        data = bytes(self.uploads.pop(uid)) + await request.read()
        d = request.query.get("digest", "")
        if digest_of(data) != d:
            return web.json_response({"errors": [{"code": "DIGEST_INVALID"}]}, status=400)
        self.blobs[d] = data
        return web.Response(status=201, headers={"Docker-Content-Digest": d})

    # ---- Hugging Face stand-in ---------------------------------------------------------------------------
    async def _hub_info(self, request):
        repo_id = f"{request.match_info['ns']}/{request.match_info['repo']}"
        repo = self.hub.get(repo_id)
        if repo is None:
            return web.json_response({"error": "Repository not found"}, status=404,
                                     headers={"X-Error-Code": "RepoNotFound"})
        siblings = []
        for path, data in sorted(repo["files"].items()):
            s = {"rfilename": path, "size": len(data), "blobId": _git_blob_id(data)}
            if repo["lfs"]:
                s["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
            siblings.append(s)
        return web.json_response({"id": repo_id, "modelId": repo_id, "sha": repo["sha"], "private": False,
                                  "tags": ["gguf"], "siblings": siblings})

    async def _hub_resolve(self, request):
        repo_id = f"{request.match_info['ns']}/{request.match_info['repo']}"
        repo = self.hub.get(repo_id)
        path = request.match_info["path"]
        self.hub_auth.append((path, request.headers.get("Authorization")))
        if repo is None or path not in repo["files"] or request.match_info["rev"] not in (repo["sha"], "main"):
            return web.Response(status=404, headers={"X-Error-Code": "EntryNotFound"})
        # like the Hub: a redirect to a storage host (another name for this server), which must not get the token
        d = digest_of(repo["files"][path])
        return web.Response(status=302, headers={"Location": f"http://localhost:{self.port}/cdn/{d}"})

    async def _cdn(self, request):
        self.hub_auth.append((f"cdn:{request.match_info['digest'][:19]}", request.headers.get("Authorization")))
        return await self._send_blob(request, request.match_info["digest"])


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
