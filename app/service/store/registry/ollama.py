"""A client for the Ollama registry, which speaks the OCI distribution protocol (the Docker registry API v2):
manifests by tag, blobs by digest, uploads for push. Ollama's own client is server/images.go + download.go +
upload.go; the wire formats here follow it (media types, Accept headers, the anonymous bearer-token challenge).

    GET  /v2/<namespace>/<model>/manifests/<tag>       the manifest (config + layers, each a digest and size)
    GET  /v2/<namespace>/<model>/blobs/<digest>         a layer (byte ranges; may redirect to a CDN)
    HEAD /v2/<namespace>/<model>/blobs/<digest>         does the registry have it (push skips those)
    POST /v2/<namespace>/<model>/blobs/uploads/         start an upload -> Location
    PUT  <Location>?digest=<digest>                     the bytes, in one request
    PUT  /v2/<namespace>/<model>/manifests/<tag>        publish
Covered by tests/integration/service/test_pull.py and test_names.py.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable

import aiohttp
from yarl import URL

from .download import RegistryError, Source
from .reference import Reference

MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_TEMPLATE = "application/vnd.ollama.image.template"
MEDIA_PROMPT = "application/vnd.ollama.image.prompt"            # the template's older name
MEDIA_SYSTEM = "application/vnd.ollama.image.system"
MEDIA_PARAMS = "application/vnd.ollama.image.params"
MEDIA_LICENSE = "application/vnd.ollama.image.license"
MEDIA_MESSAGES = "application/vnd.ollama.image.messages"
MEDIA_ADAPTER = "application/vnd.ollama.image.adapter"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"
MEDIA_CONFIG = "application/vnd.docker.container.image.v1+json"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_OCI = "application/vnd.oci.image.manifest.v1+json"
SMALL_MEDIA = {MEDIA_TEMPLATE, MEDIA_PROMPT, MEDIA_SYSTEM, MEDIA_PARAMS, MEDIA_LICENSE, MEDIA_MESSAGES, MEDIA_CONFIG}
MAX_MANIFEST = 4 << 20
MAX_SMALL_LAYER = 16 << 20
MAX_LAYER_SIZE = 1 << 50
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')

Progress = Callable[[int, int], Awaitable[None]]


@dataclass(frozen=True)
class Layer:
    media_type: str
    digest: str
    size: int

    @property
    def hex(self) -> str:
        return self.digest[7:]

    def to_json(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Manifest:
    config: Layer | None
    layers: tuple[Layer, ...]
    raw: bytes = field(default=b"", compare=False, repr=False)    # as the registry sent it (Ollama keeps these bytes)

    @property
    def all_layers(self) -> tuple[Layer, ...]:
        """In Ollama's pull order: the layers, then the config."""
        return self.layers + ((self.config,) if self.config else ())

    def to_bytes(self) -> bytes:
        doc = {"schemaVersion": 2, "mediaType": MANIFEST_V2,
               "config": self.config.to_json() if self.config else None,
               "layers": [layer.to_json() for layer in self.layers]}
        return json.dumps(doc, separators=(",", ":")).encode()


def _layer(obj, where: str) -> Layer:
    if not isinstance(obj, dict):
        raise RegistryError(f"bad manifest: {where} is not an object")
    media, digest, size = obj.get("mediaType"), obj.get("digest"), obj.get("size")
    if not isinstance(media, str) or not isinstance(digest, str) or not _DIGEST.match(digest):
        raise RegistryError(f"bad manifest: {where} needs a mediaType and a sha256 digest")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_LAYER_SIZE:
        raise RegistryError(f"bad manifest: {where} has no valid size")
    return Layer(media, digest, size)


def parse_manifest(raw: bytes) -> Manifest:
    """A registry manifest, checked (a digest is used as a file name later: only sha256:HEX is accepted)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise RegistryError(f"bad manifest: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schemaVersion") != 2:
        raise RegistryError("bad manifest: expected a schemaVersion 2 image manifest")
    if "manifests" in doc:
        raise RegistryError("the registry sent a manifest list (a multi-platform image), not a model")
    layers = doc.get("layers")
    if not isinstance(layers, list) or not layers or len(layers) > 1000:
        raise RegistryError("bad manifest: no layers")
    config = doc.get("config")
    return Manifest(_layer(config, "config") if config else None,
                    tuple(_layer(x, f"layer {i}") for i, x in enumerate(layers)), bytes(raw))


class RegistryClient:
    """One registry and repository, for the length of one pull or push."""

    def __init__(self, session: aiohttp.ClientSession, ref: Reference, insecure: bool, push: bool = False):
        self.session, self.ref, self.insecure = session, ref, insecure
        self.base = URL(ref.base_url(insecure))
        self.actions = "pull,push" if push else "pull"
        self.token: str | None = None

    def _url(self, *parts: str) -> URL:
        return self.base.with_path("/v2/" + self.ref.repository + "/" + "/".join(parts))

    def _headers(self, extra: dict | None = None) -> dict:
        h = dict(extra or {})
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    async def request(self, method: str, url: URL, *, headers: dict | None = None, data=None,
                      allow_redirects: bool = True) -> aiohttp.ClientResponse:
        """One request, answering a bearer-token challenge once (anonymous tokens, as Docker registries
        issue them); connection problems become RegistryError with a hint."""
        for attempt in range(2):
            try:
                resp = await self.session.request(method, url, headers=self._headers(headers), data=data,
                                                  allow_redirects=allow_redirects)
            except aiohttp.ClientSSLError as e:
                raise RegistryError(f"cannot reach {self.base.host} over https ({e.__class__.__name__}); for a "
                                    "plain-http registry pass insecure", 502) from None
            except (aiohttp.ClientConnectionError, OSError) as e:
                hint = "; for a plain-http registry pass insecure" if self.base.scheme == "https" else ""
                raise RegistryError(f"cannot reach the registry {self.base.host}: {e}{hint}", 502) from None
            if resp.status == 401 and attempt == 0 and data is None:
                challenge = resp.headers.get("WWW-Authenticate", "")
                resp.release()
                await self._authenticate(challenge)
                continue
            return resp
        return resp

    async def _authenticate(self, challenge: str) -> None:
        if not challenge.lower().startswith("bearer "):
            raise RegistryError(f"{self.base.host} asks for credentials ({challenge.split(' ')[0] or 'HTTP 401'}); "
                                "Strata pulls without an account", 502)
        params = dict(_CHALLENGE.findall(challenge))
        realm = URL(params.pop("realm", ""))
        if realm.scheme not in ("https", "http") or (realm.scheme == "http" and not (self.insecure or
                                                                                    self.ref.explicit_http)):
            raise RegistryError(f"{self.base.host} sent a token address that is not https: {realm}", 502)
        params.setdefault("scope", f"repository:{self.ref.repository}:{self.actions}")
        async with self.session.get(realm, params=params) as r:
            if r.status != 200:
                raise RegistryError(f"{realm.host} refused a token for {self.ref.repository} "
                                    f"(HTTP {r.status})", 502)
            doc = await r.json(content_type=None)
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{realm.host} sent no token", 502)
        self.token = token

    # ---- pull ----------------------------------------------------------------------------------------------
    async def manifest(self) -> Manifest:
        url = self._url("manifests", self.ref.tag)
        resp = await self.request("GET", url, headers={"Accept": f"{MANIFEST_V2}, {MANIFEST_OCI}"})
        async with resp:
            if resp.status == 404:
                raise RegistryError(f"pull model manifest: {self.ref.display()} not found on {self.base.host} "
                                    "(file does not exist)", 404)
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:300]
                raise RegistryError(f"pull model manifest: {self.base.host} answered HTTP {resp.status} {text}"
                                    .strip(), 502)
            raw = await resp.content.read(MAX_MANIFEST + 1)
        if len(raw) > MAX_MANIFEST:
            raise RegistryError("bad manifest: larger than 4 MiB")
        return parse_manifest(raw)

    def blob_source(self, layer: Layer) -> Source:
        headers = (("Authorization", f"Bearer {self.token}"),) if self.token else ()
        return Source(str(self._url("blobs", layer.digest)), layer.digest, layer.size, headers,
                      allow_http=self.base.scheme == "http")

    async def small_blob(self, layer: Layer) -> bytes:
        """A metadata layer (template, params, ...) read into memory and checked against its digest."""
        if layer.size > MAX_SMALL_LAYER:
            raise RegistryError(f"layer {layer.digest} ({layer.media_type}) is {layer.size} bytes; at most "
                                f"{MAX_SMALL_LAYER} expected")
        resp = await self.request("GET", self._url("blobs", layer.digest))
        async with resp:
            if resp.status == 404:
                raise RegistryError(f"blob {layer.digest} from {self.base.host}: not found (HTTP 404)", 404)
            if resp.status != 200:
                raise RegistryError(f"blob {layer.digest} from {self.base.host}: HTTP {resp.status}", 502)
            data = await resp.content.read(MAX_SMALL_LAYER + 1)
        got = "sha256:" + hashlib.sha256(data).hexdigest()
        if got != layer.digest:
            raise RegistryError(f"digest mismatch, file must be downloaded again: want {layer.digest}, got {got}",
                                502)
        return data

    # ---- push ----------------------------------------------------------------------------------------------
    async def has_blob(self, digest: str) -> bool:
        resp = await self.request("HEAD", self._url("blobs", digest))
        async with resp:
            return resp.status == 200

    async def upload_blob(self, layer: Layer, path: Path | None, data: bytes | None, progress: Progress) -> None:
        """POST an upload, then PUT the bytes with ?digest= (a monolithic upload, which every registry takes)."""
        resp = await self.request("POST", self._url("blobs", "uploads", ""))
        async with resp:
            if resp.status not in (201, 202) or ("Location" not in resp.headers and resp.status == 202):
                text = (await resp.text(errors="replace"))[:300]
                raise RegistryError(f"{self.base.host} refused an upload to {self.ref.repository} "
                                    f"(HTTP {resp.status}) {text}".strip(), 502)
            if resp.status == 201:                              # mounted: the registry has it already
                await progress(layer.size, layer.size)
                return
            location = self.base.join(URL(resp.headers["Location"]))
        body: bytes | AsyncIterator[bytes]
        if data is not None:
            body = data
        elif path is not None:
            body = _file_chunks(path, layer.size, progress)
        else:
            raise ValueError(f"layer {layer.digest}: neither its bytes nor its file to upload")
        put = await self.request("PUT", location.update_query(digest=layer.digest), data=body,
                                 headers={"Content-Type": "application/octet-stream",
                                          "Content-Length": str(layer.size)})
        async with put:
            if put.status not in (200, 201, 204):
                text = (await put.text(errors="replace"))[:300]
                raise RegistryError(f"{self.base.host} refused blob {layer.digest} (HTTP {put.status}) {text}"
                                    .strip(), 502)
        await progress(layer.size, layer.size)

    async def put_manifest(self, manifest: Manifest) -> None:
        resp = await self.request("PUT", self._url("manifests", self.ref.tag), data=manifest.to_bytes(),
                                  headers={"Content-Type": MANIFEST_V2})
        async with resp:
            if resp.status not in (200, 201, 204):
                text = (await resp.text(errors="replace"))[:300]
                raise RegistryError(f"{self.base.host} refused the manifest (HTTP {resp.status}) {text}".strip(),
                                    502)


async def _file_chunks(path: Path, size: int, progress: Progress, chunk: int = 1 << 20):
    """The file's bytes for an upload body, reporting progress as they are sent."""
    loop = asyncio.get_running_loop()
    sent = 0
    with open(path, "rb") as f:
        while True:
            data = await loop.run_in_executor(None, f.read, chunk)
            if not data:
                break
            sent += len(data)
            await progress(sent, size)
            yield data
