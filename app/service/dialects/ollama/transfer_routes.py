"""Getting models in and out, Ollama's way: POST /api/pull, POST /api/push, HEAD and POST /api/blobs/:digest,
and /api/create with `files` (uploaded GGUF blobs). The registry work is in app/service/store/registry/.

Streams are Ollama's: NDJSON progress lines, then `{"status":"success"}`; a failure after the stream started
is a final `{"error": "..."}` line (a failure before it is an HTTP error); `stream: false` answers once, with
the last progress line (`{"status":"success"}`) or the error.
Covered by tests/integration/service/test_pull.py and test_pull_hf_push.py.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import time
from pathlib import Path

from aiohttp import web

from app.engine.gguf.adapter import read_adapter
from app.engine.gguf.errors import GGUFError
from app.engine.gguf.split import SPLIT_NAME, part_path

from ... import appkeys as keys
from ...generation.request import field
from ...http.bodies import NDJSONWriter, read_json
from ...http.errors import ApiError, error_bodies
from ...store.proxy import store_error
from ...store.registry.download import RegistryError
from ...store.registry.pull import SPACE_RESERVE, Puller, progress_line
from ...store.registry.push import push as push_model
from ...store.registry.reference import InvalidReference, parse_reference
from .render import error_body

PULLER = web.AppKey("puller", Puller)
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
UPLOAD_CHUNK = 1 << 20


def add_routes(app: web.Application) -> None:
    app[PULLER] = Puller(app[keys.STORE])

    async def close(app: web.Application) -> None:       # cancel transfers, close the HTTP session
        await app[PULLER].close()

    app.on_shutdown.append(close)
    r = app.router
    with error_bodies(app).speaking(app, error_body):
        r.add_post("/api/pull", pull)
        r.add_post("/api/push", push)
        r.add_route("HEAD", "/api/blobs/{digest}", head_blob)
        r.add_post("/api/blobs/{digest}", post_blob)


def _reference(body: dict):
    raw = body.get("model") if body.get("model") else body.get("name")     # Ollama: cmp.Or(req.Model, req.Name)
    if raw is None:
        raise ApiError(400, "'model' is required (a name like llama3.2, namespace/model:tag, "
                            "host:port/namespace/model:tag or hf.co/user/repo:quant)", param="model")
    try:
        return parse_reference(raw)
    except InvalidReference as e:
        raise ApiError(400, str(e), param="model") from None


async def _progress_response(request: web.Request, stream: bool, job) -> web.StreamResponse:
    """Run job(emit) and answer the way Ollama's streamResponse / waitForStream do."""
    if not stream:
        last: list[dict] = [{}]

        async def keep(line: dict) -> None:
            last[0] = line
        try:
            await job(keep)
        except Exception as e:  # noqa: BLE001 - mapped to an HTTP status by type
            raise _api_error(e) from None
        return web.json_response(last[0])
    w = NDJSONWriter(request)
    try:
        await job(w.send)
    except Exception as e:  # noqa: BLE001 - mapped by type; after the first line it is an error line
        err = _api_error(e)
        if not w.resp.prepared:
            raise err from None
        await w.send({"error": err.message})
    return await w.finish()


def _api_error(e: Exception) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, RegistryError):
        return ApiError(e.status, str(e))
    return store_error(e)


async def pull(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    ref = _reference(body)
    insecure = field(body, "insecure", bool, False)
    stream = field(body, "stream", bool, True)
    puller = request.app[PULLER]      # a name already here (even the built-in) is answered, never refused
    return await _progress_response(request, stream, lambda emit: puller.pull(ref, insecure, emit))


async def push(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    ref = _reference(body)
    insecure = field(body, "insecure", bool, False)
    stream = field(body, "stream", bool, True)
    source = field(body, "source", str)           # Strata: the local model to push (default: the one `model` names)
    puller = request.app[PULLER]
    return await _progress_response(request, stream, lambda emit: push_model(puller, ref, insecure, source, emit))


async def _check_writable(request: web.Request, name: str) -> None:
    try:
        await request.app[keys.STORE].check_writable(name)
    except Exception as e:  # noqa: BLE001 - mapped by type (the built-in model's name is refused)
        raise store_error(e, name) from None


# ---- blobs -------------------------------------------------------------------------------------------------

def _digest_hex(request: web.Request) -> str:
    m = _DIGEST.match(request.match_info["digest"])
    if not m:
        raise ApiError(400, "invalid digest: expected sha256:<64 lowercase hex digits>", param="digest")
    return m.group(1)


async def head_blob(request: web.Request) -> web.Response:
    hex_ = _digest_hex(request)
    found = await request.app[keys.STORE].blob_path(hex_)
    if found is None:
        raise ApiError(404, f"blob \"sha256:{hex_}\" not found", param="digest")
    return web.Response(status=200)


async def post_blob(request: web.Request) -> web.Response:
    """Ollama clients upload a GGUF here before /api/create with `files`. 200 when the blob is here already,
    201 once stored; a body whose sha256 differs from the digest is refused (400) and nothing is kept."""
    hex_ = _digest_hex(request)
    store = request.app[keys.STORE]
    if await store.blob_path(hex_) is not None:
        return web.Response(status=200)
    blob_dir = Path(await store.blob_dir())
    length = request.content_length
    if length is not None:
        free = shutil.disk_usage(blob_dir).free
        if length + SPACE_RESERVE > free:
            raise ApiError(507, f"not enough disk space for a {length}-byte blob ({free} bytes free)")
    tmp = blob_dir / f".upload-{os.getpid()}-{time.monotonic_ns()}.partial"
    try:
        got = await _receive(request, tmp)
        if got != hex_:
            raise ApiError(400, f"digest mismatch, expected \"sha256:{hex_}\", got \"sha256:{got}\"",
                           param="digest")
        os.replace(tmp, blob_dir / f"sha256-{hex_}.gguf")
    finally:
        tmp.unlink(missing_ok=True)
    return web.Response(status=201)


async def _receive(request: web.Request, tmp: Path) -> str:
    """The request body into `tmp`, hashed on the way (writes and hashing off the event loop)."""
    loop = asyncio.get_running_loop()
    h = hashlib.sha256()

    def write(f, data: bytes) -> None:
        h.update(data)
        f.write(data)

    checked = False
    with open(tmp, "wb") as f:
        buf = bytearray()
        while True:
            chunk = await request.content.read(UPLOAD_CHUNK)
            buf += chunk
            if not checked and (len(buf) >= 4 or not chunk):
                checked = True
                if bytes(buf[:4]) != b"GGUF":
                    raise ApiError(400, "only GGUF files can be uploaded (Strata runs GGUF models; convert "
                                        "safetensors with llama.cpp's convert_hf_to_gguf.py)", param="digest")
            if buf and (len(buf) >= UPLOAD_CHUNK or not chunk):
                await loop.run_in_executor(None, write, f, bytes(buf))
                buf.clear()
            if not chunk:
                break
    return h.hexdigest()


# ---- /api/create with files --------------------------------------------------------------------------------

def _file_digests(files, what: str) -> list[tuple[str, str]]:
    if not isinstance(files, dict) or not files:
        raise ApiError(400, f"'{what}' must be an object of file name -> sha256 digest", param=what)
    out = []
    for fname, digest in files.items():
        if (not isinstance(fname, str) or not fname or fname.startswith(("/", "\\")) or ".." in fname
                or "\\" in fname or len(fname) > 255):
            raise ApiError(400, f"'{what}': file path must be relative: {str(fname)[:80]!r}", param=what)
        m = _DIGEST.match(digest) if isinstance(digest, str) else None
        if not m:
            raise ApiError(400, f"'{what}': {fname!r} needs a digest sha256:<64 hex digits>", param=what)
        out.append((fname, m.group(1)))
    return out


async def create_from_files(request: web.Request, body: dict, name: str, from_: str | None, parameters: dict,
                            template: str | None, system: str | None, license: str | None,
                            stream: bool, projector: str | None = None) -> web.StreamResponse:
    """`files` and `adapters` as Ollama documents them: {"model.gguf": "sha256:..."} of blobs uploaded with
    POST /api/blobs (a split model is its parts, named ...-00001-of-0000N.gguf); `adapters` are LoRA GGUFs put on
    the model made from `files`, or on `from`."""
    files = _model_files(body) if body.get("files") else []
    adapters = _file_digests(body.get("adapters"), "adapters") if body.get("adapters") else []
    if not files and not from_:
        raise ApiError(400, "'files' or 'from' is required with 'adapters'", param="from")
    store = request.app[keys.STORE]
    await _check_writable(request, name)
    sources = {}
    for fname, hex_ in files + adapters:      # every blob must be here before anything starts (a clear 400)
        src = await store.blob_path(hex_)
        if src is None:
            raise ApiError(400, f"blob sha256:{hex_} ({fname}) is not on this server; upload it first with "
                                "POST /api/blobs/sha256:<digest>", param="files" if (fname, hex_) in files
                           else "adapters")
        sources[hex_] = src
    for fname, hex_ in adapters:
        try:
            await asyncio.to_thread(read_adapter, sources[hex_])
        except GGUFError as e:
            raise ApiError(400, f"adapters: {fname}: {str(e).split(': ', 1)[-1]}", param="adapters") from None

    async def job(emit) -> None:
        await emit(progress_line("parsing GGUF"))
        names = ([f"sha256-{files[0][1]}.gguf"] if len(files) == 1 else
                 [part_path(f"sha256-{files[0][1]}", i + 1, len(files)) for i in range(len(files))])
        placed = []
        for (_fname, hex_), dest in zip(files + adapters, names + [f"sha256-{h}.gguf" for _, h in adapters]):
            placed.append(await store.adopt_blob(sources[hex_], dest))
            await emit(progress_line(f"using existing layer sha256:{hex_}"))
        lora = tuple(str(p) for p in placed[len(files):])
        if files:
            await store.add_model(name, placed[0], files[0][1], parameters, template, system, license,
                                  "uploaded (/api/create files)", lora, projector=projector)
        else:
            assert from_ is not None                         # checked above: adapters without files need 'from'
            await store.create(name, from_, parameters, template, system, license, lora, projector)
        for (_fname, hex_), put in zip(files, placed):       # split parts now live under their split names
            if Path(sources[hex_]) != Path(put):
                await store.release_blob(sources[hex_])
        await emit(progress_line("writing manifest"))
        await emit(progress_line("success"))

    return await _progress_response(request, stream, job)


def _model_files(body: dict) -> list[tuple[str, str]]:
    files = sorted(_file_digests(body.get("files"), "files"))
    if len(files) > 1 and not all(f.lower().endswith(".gguf") for f, _ in files):
        raise ApiError(400, "only GGUF files can make a model (safetensors conversion is not supported)",
                       param="files")
    if len(files) > 1:
        counts = {int(m["count"]) if (m := SPLIT_NAME.match(f.rsplit("/", 1)[-1])) else None for f, _ in files}
        if counts != {len(files)}:
            raise ApiError(400, "several files must be the parts of one split GGUF (...-00001-of-0000N.gguf)",
                           param="files")
    return files
