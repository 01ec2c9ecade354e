"""Hostile GGUF files through the three ways a file reaches Strata: `strata import` (the CLI), `POST /api/create`
with a path, and a load through the service (a stored model whose file was changed on disk after import, as a
user editing a hard-linked original would). Each is refused with a clear message, the service keeps serving,
and the store is left as it was.

The files come from a generator: a real (tiny, loadable) model from tests/support/gguf_factory.py, then truncated at
every section boundary of its layout and mutated field by field (magic, version, counts, string lengths, value
and tensor types, dimensions, offsets, duplicate names), plus files whose header is valid but whose tensors
are missing. read_model_info itself is covered by tests/unit/engine/gguf/test_bad_gguf.py; this file checks the entry points."""
from __future__ import annotations

import os
import shutil
import sys
import struct
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest


VALUE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # GGUF scalar types
STRING, ARRAY = 8, 9


# ---- the generator -----------------------------------------------------------------------------------------

@dataclass
class Field:
    """Where a field of the GGUF layout lives in the file (for mutations)."""
    what: str
    offset: int
    size: int


@dataclass
class Layout:
    boundaries: list[tuple[str, int]]       # (section that ends here, offset)
    fields: dict[str, Field]
    tensor_names: list[tuple[str, int]]     # (name, offset of the name's bytes)
    data_offset: int


def walk(b: bytes) -> Layout:
    """The section boundaries of a little-endian GGUF v3 (written by the gguf package, so trusted)."""
    pos = 0
    bounds: list[tuple[str, int]] = []
    fields: dict[str, Field] = {}

    def take(n: int) -> int:
        nonlocal pos
        start = pos
        pos += n
        return start

    def u32() -> int:
        return struct.unpack_from("<I", b, take(4))[0]

    def u64() -> int:
        return struct.unpack_from("<Q", b, take(8))[0]

    def string() -> tuple[int, str]:
        at = pos
        n = u64()
        return at, b[take(n):pos].decode()

    def skip_value(vtype: int) -> None:
        if vtype == STRING:
            string()
        elif vtype == ARRAY:
            item, n = u32(), u64()
            for _ in range(n):
                skip_value(item)
        else:
            take(VALUE_SIZES[vtype])

    take(4)
    bounds.append(("magic", pos))
    fields["version"] = Field("version", pos, 4)
    u32()
    bounds.append(("version", pos))
    fields["n_tensors"] = Field("tensor count", pos, 8)
    n_tensors = u64()
    bounds.append(("tensor count", pos))
    fields["n_kv"] = Field("key count", pos, 8)
    n_kv = u64()
    bounds.append(("key count", pos))
    for i in range(n_kv):
        key_at, key = string()
        fields.setdefault("first_key_len", Field("key length", key_at, 8))
        type_at = pos
        vtype = u32()
        if vtype == STRING and "string_value_len" not in fields:
            fields["string_value_len"] = Field(f"value length of {key}", pos, 8)
        if vtype == ARRAY and "array_len" not in fields:
            fields["array_len"] = Field(f"array length of {key}", pos + 4, 8)
        if vtype == 4 and "u32_type" not in fields:
            fields["u32_type"] = Field(f"value type of {key}", type_at, 4)
        skip_value(vtype)
        bounds.append((f"key {key}", pos))
    names = []
    for i in range(n_tensors):
        name_at, name = string()
        names.append((name, name_at))
        n_dims_at = pos
        n_dims = u32()
        dims_at = pos
        take(8 * n_dims)
        type_at = pos
        u32()
        off_at = pos
        u64()
        if i == 0:
            fields["t0_ndims"] = Field(f"n_dims of {name}", n_dims_at, 4)
            fields["t0_dim0"] = Field(f"first dimension of {name}", dims_at, 8)
            fields["t0_type"] = Field(f"type of {name}", type_at, 4)
            fields["t0_offset"] = Field(f"offset of {name}", off_at, 8)
        if i == n_tensors - 1:
            fields["tlast_offset"] = Field(f"offset of {name}", off_at, 8)
        bounds.append((f"tensor info {name}", pos))
    data_offset = pos + (-pos % 32)
    bounds.append(("alignment padding", data_offset))
    return Layout(bounds, fields, names, data_offset)


def _set(b: bytes, f: Field, value: int, fmt: str | None = None) -> bytes:
    fmt = fmt or {4: "<I", 8: "<Q"}[f.size]
    out = bytearray(b)
    struct.pack_into(fmt, out, f.offset, value)
    return bytes(out)


def hostile_variants(good: bytes) -> list[tuple[str, bytes]]:
    """(case name, file bytes) for every malformation; none of them is a file Strata may accept."""
    lay = walk(good)
    size = len(good)
    f = lay.fields
    out: list[tuple[str, bytes]] = []
    # truncated at every section boundary (and one byte short of it), then inside the tensor data
    for what, at in lay.boundaries:
        out.append((f"cut after {what}", good[:at]))
        if at - 1 > 0:
            out.append((f"cut 1 byte before the end of {what}", good[:at - 1]))
    for frac in (0.25, 0.5, 0.999):
        at = lay.data_offset + int((size - lay.data_offset) * frac)
        out.append((f"cut at {frac:.1%} of the tensor data", good[:at]))
    out.append(("empty file", b""))
    # magic and version
    for magic in (b"GGML", b"FUGG", b"\0\0\0\0", b"gguf"):
        out.append((f"magic {magic!r}", magic + good[4:]))
    for version in (0, 1, 4, 0xFFFFFFFF, 3 << 16, 3 << 24):
        out.append((f"version {version:#x}", _set(good, f["version"], version)))
    # absurd or wrong counts
    for n in (1 << 60, (1 << 64) - 1, 1 << 24):
        out.append((f"tensor count {n}", _set(good, f["n_tensors"], n)))
        out.append((f"key count {n}", _set(good, f["n_kv"], n)))
    n_t = len(lay.tensor_names)
    out.append(("tensor count one too many", _set(good, f["n_tensors"], n_t + 1)))
    out.append(("key count one too many", _set(good, f["n_kv"], struct.unpack_from("<Q", good, 16)[0] + 1)))
    # strings (and arrays) longer than the file
    for fld in ("first_key_len", "string_value_len", "array_len"):
        for n in (size + 1, 2 * size, 1 << 62):
            out.append((f"{f[fld].what} {n}", _set(good, f[fld], n)))
    # unknown types
    for t in (13, 99, 0xFFFFFFFF):
        out.append((f"unknown value type {t}", _set(good, f["u32_type"], t)))
    for t in (4, 5, 99, 0xFFFFFFFF):           # 4, 5: removed Q4_2/Q4_3
        out.append((f"unknown tensor type {t}", _set(good, f["t0_type"], t)))
    # dimensions and offsets
    for n in (0, 5, 0xFFFFFFFF):
        out.append((f"n_dims {n}", _set(good, f["t0_ndims"], n)))
    for d in (-1, 1 << 40, (1 << 63) - 1):
        out.append((f"first dimension {d}", _set(good, f["t0_dim0"], d, "<q")))
    for off in (size, 4 * size, (1 << 64) - 32, 32):
        out.append((f"first tensor offset {off}", _set(good, f["t0_offset"], off)))
        out.append((f"last tensor offset {off}", _set(good, f["tlast_offset"], off)))
    # duplicate tensor names: rename the second tensor to the first one's name when they are the same length
    by_len: dict[int, list[tuple[str, int]]] = {}
    for name, at in lay.tensor_names:
        by_len.setdefault(len(name), []).append((name, at))
    pair = next(v for v in by_len.values() if len(v) >= 2)
    (first, _), (second, at) = pair[0], pair[1]
    dup = bytearray(good)
    dup[at + 8:at + 8 + len(first)] = first.encode()
    out.append((f"duplicate tensor name {first} (was {second})", bytes(dup)))
    return out


def write_without(src: Path, dst: Path, drop) -> Path:
    """The same model with some tensors left out (the header and metadata stay valid)."""
    from gguf import GGUFReader, GGUFWriter

    r = GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(str(dst), arch)
    for name, fld in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = fld.types[0]
        sub = fld.types[-1] if len(fld.types) > 1 else None
        w.add_key_value(name, fld.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        if drop(t.name):
            continue
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)   # quantized: byte rows, shape derived
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


# ---- fixtures ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good_model(tmp_path_factory, smollm2_path) -> Path:
    """A real, loadable model, as small as the factory makes one (SmolLM2's vocabulary, Q8_0, tied output)."""
    from gguf_factory import write_dense_llama

    return write_dense_llama(tmp_path_factory.mktemp("hostile-base") / "good.gguf", qtype="Q8_0", tie_output=True)


@pytest.fixture(scope="module")
def variants(good_model):
    return hostile_variants(good_model.read_bytes())


@pytest.fixture(scope="module")
def missing_tensor_files(good_model, tmp_path_factory):
    d = tmp_path_factory.mktemp("missing-tensors")
    return [
        ("no blk.1.ffn_down", write_without(good_model, d / "no-ffn-down.gguf", lambda n: n == "blk.1.ffn_down.weight")),
        ("no output_norm", write_without(good_model, d / "no-output-norm.gguf", lambda n: n == "output_norm.weight")),
        ("no layer 2 at all", write_without(good_model, d / "no-layer-2.gguf", lambda n: n.startswith("blk.2."))),
        ("no token_embd", write_without(good_model, d / "no-token-embd.gguf", lambda n: n == "token_embd.weight")),
    ]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hostile-home")


@pytest.fixture(scope="module")
def server(live_service, home, smollm2_path, good_model):
    svc = live_service(n_threads=1, num_ctx=256, num_parallel=1, keep_alive=0, home=home)
    # a model whose stored file the load test overwrites: from a copy, since the store hard-links its source
    victim_src = home / "victim-source.gguf"
    shutil.copyfile(good_model, victim_src)
    r = httpx.post(svc.url + "/api/create", json={"model": "victim", "from": str(victim_src), "stream": False},
                   timeout=60)
    assert r.status_code == 200, r.text
    yield svc


@pytest.fixture()
def cli_env(home, monkeypatch):
    """The CLI in this process on the service's store (STRATA_HOME is what `strata` reads)."""
    monkeypatch.setenv("STRATA_HOME", str(home))
    monkeypatch.setenv("STRATA_EXTERNAL_MODELS", "0")


def _store_state(home: Path) -> tuple:
    from app.service.store.model_store import ModelStore

    s = ModelStore(db_path=home / "strata.db", models_dir=home / "models", discover_external=False)
    names = tuple((r.name, r.path, r.size) for r in s.list())
    blobs = tuple(sorted(p.name for p in (home / "models").iterdir()))
    return names, blobs


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    from app.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.err + out.out


def _clear(msg: str) -> bool:
    """A message a person can act on: it names the file or the format, not a Python traceback."""
    return ("Traceback" not in msg and "internal error" not in msg
            and any(w in msg for w in ("GGUF", "gguf", "truncated", "tensor", "file", "magic")))


# ---- the three entry points --------------------------------------------------------------------------------

def test_generator_covers_the_layout(good_model, variants):
    lay = walk(good_model.read_bytes())
    assert len(lay.boundaries) > 50 and len(lay.tensor_names) >= 20
    assert len(variants) > 150
    from app.engine.gguf.model_info import read_model_info

    assert read_model_info(good_model).n_layer == 3        # the base itself is good


def test_strata_import_refuses_each(server, home, variants, tmp_path, cli_env, capsys):
    before = _store_state(home)
    problems = []
    for i, (case, content) in enumerate(variants):
        p = tmp_path / f"hostile-{i}.gguf"
        p.write_bytes(content)
        rc, msg = _cli(["import", str(p), "--name", f"hostile{i}"], capsys)
        if rc != 1 or not msg.startswith("Error:") or not _clear(msg):
            problems.append(f"{case}: rc={rc} {msg[:200]!r}")
        p.unlink()
    assert not problems, "\n".join(problems)
    assert _store_state(home) == before
    assert not list((home / "models").glob(".import-*"))        # no partial file left behind
    assert httpx.get(server.url + "/api/version").status_code == 200


def test_api_create_refuses_each(server, home, variants, tmp_path):
    before = _store_state(home)
    problems = []
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for i, (case, content) in enumerate(variants):
            p = tmp_path / f"hostile-{i}.gguf"
            p.write_bytes(content)
            for body in ({"model": f"hostile{i}", "from": str(p), "stream": False},
                         {"model": f"hostile{i}", "modelfile": f"FROM {p}\nPARAMETER temperature 0.1"}):
                r = c.post("/api/create", json=body)
                err = r.json().get("error", "") if r.headers.get("content-type", "").startswith("application/json") else ""
                if r.status_code != 400 or not _clear(err):
                    problems.append(f"{case}: {r.status_code} {r.text[:200]!r}")
            p.unlink()
        assert c.get("/api/version").status_code == 200
    assert not problems, "\n".join(problems)
    assert _store_state(home) == before


def _overwrite(path: Path, content: bytes, stamp: list[int]) -> None:
    """Change a stored file in place (as editing a hard-linked original would), with a new mtime each time."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(content)
    stamp[0] += 10**9
    os.utime(path, ns=(stamp[0], stamp[0]))


def test_load_of_a_file_changed_after_import_is_refused(server, home, variants, good_model):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        blob = Path(c.post("/api/show", json={"model": "victim"}).json()["strata"]["path"])
        before = _store_state(home)
        stamp = [blob.stat().st_mtime_ns]
        problems = []
        try:
            for case, content in variants:
                _overwrite(blob, content, stamp)
                r = c.post("/api/generate", json={"model": "victim", "prompt": "hi", "stream": False,
                                                  "options": {"num_predict": 1}})
                err = r.json().get("error", "")
                if r.status_code != 400 or not _clear(err) or "victim" not in err:
                    problems.append(f"{case}: {r.status_code} {r.text[:200]!r}")
        finally:
            _overwrite(blob, good_model.read_bytes(), stamp)
        assert not problems, "\n".join(problems)
        assert _store_state(home) == before
        # the service is alive and the (restored) model loads and answers
        r = c.post("/api/generate", json={"model": "victim", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200 and r.json()["done"], r.text


def test_valid_header_with_missing_tensors(server, home, missing_tensor_files, tmp_path, cli_env, capsys):
    """A file whose header is fine but whose tensors are not all there: refused at import if the check can
    see it, otherwise by llama.cpp at load time; either way a clear message and a service that keeps going."""
    with httpx.Client(base_url=server.url, timeout=180) as c:
        for i, (case, path) in enumerate(missing_tensor_files):
            before = _store_state(home)
            rc, msg = _cli(["import", str(path), "--name", f"missing{i}"], capsys)
            sys.__stderr__.write(f"{case}: import {'refused: ' + msg.strip() if rc == 1 else 'accepted'}\n")
            if rc == 1:          # refused up front: every entry point refuses it the same way
                assert msg.startswith("Error:") and _clear(msg), (case, msg)
                r = c.post("/api/create", json={"model": f"missing{i}", "from": str(path), "stream": False})
                assert r.status_code == 400 and _clear(r.json()["error"]), (case, r.text)
                assert _store_state(home) == before
                continue
            assert rc == 0, (case, msg)
            r = c.post("/api/generate", json={"model": f"missing{i}", "prompt": "hi", "stream": False,
                                              "options": {"num_predict": 1}})
            assert 400 <= r.status_code < 600 and r.status_code != 503, (case, r.text)
            err = r.json()["error"]
            sys.__stderr__.write(f"{case}: load answered {r.status_code} {err}\n")
            assert "tensor" in err.lower() and "Traceback" not in err, (case, err)
            ps = c.get("/api/ps").json()["models"]
            assert all(m["name"] != f"missing{i}:latest" or m["strata"]["state"] == "failed" for m in ps)
            rc, _ = _cli(["rm", f"missing{i}"], capsys)
            assert rc == 0
        r = c.post("/api/generate", json={"model": "victim", "prompt": "hi", "stream": False,
                                          "options": {"num_predict": 2}})
        assert r.status_code == 200, r.text


def _structural_spans(good: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the header that are structure (counts, keys, scalar values, the tensor table), not the
    bulk of the vocabulary strings, so random corruption lands where parsers and llama.cpp can trip."""
    lay = walk(good)
    spans, prev = [], 0
    for _, end in lay.boundaries:
        if end - prev <= 4096:
            spans.append((prev, end))
        else:                    # a big array: its key, type and length fields only
            spans.append((prev, prev + 64))
        prev = end
    return spans


def test_random_header_corruption_through_create_and_load(server, home, good_model, tmp_path):
    """Seeded random corruption (hypothesis) of the structural header bytes: /api/create accepts the file or
    refuses it with a 400 naming the problem; an accepted file is loaded too, and the load either works or
    fails with a JSON error (llama.cpp runs in a child process: an abort there must not reach the service)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    good = good_model.read_bytes()
    spans = _structural_spans(good)
    position = st.sampled_from(spans).flatmap(lambda s: st.integers(s[0], s[1] - 1))
    before = _store_state(home)
    seen = {"refused": 0, "accepted": 0, "loaded": 0, "load_failed": 0}
    counter = [0]
    max_loads = int(os.environ.get("STRATA_GGUF_FUZZ_LOADS", "6"))

    with httpx.Client(base_url=server.url, timeout=180) as c:
        @settings(max_examples=int(os.environ.get("STRATA_GGUF_FUZZ_EXAMPLES", "80")), deadline=None,
                  database=None, derandomize=True, suppress_health_check=list(HealthCheck))
        @given(st.lists(st.tuples(position, st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]) | st.integers(0, 255)),
                        min_size=1, max_size=4))
        def one(mutations):
            counter[0] += 1
            b = bytearray(good)
            for pos, value in mutations:
                b[pos] = value
            p = tmp_path / f"fuzz-{counter[0]}.gguf"      # a new file each time: the store hard-links it
            p.write_bytes(bytes(b))
            r = c.post("/api/create", json={"model": "fuzzed", "from": str(p), "stream": False})
            assert r.status_code in (200, 400), (mutations, r.status_code, r.text)
            if r.status_code == 400:
                seen["refused"] += 1
                assert _clear(r.json()["error"]), r.text
                return
            seen["accepted"] += 1
            if seen["loaded"] + seen["load_failed"] < max_loads:      # loads are slow: a few are enough
                g = c.post("/api/generate", json={"model": "fuzzed", "prompt": "hi", "stream": False,
                                                  "options": {"num_predict": 1}})
                assert g.headers["content-type"].startswith("application/json"), g.text
                if g.status_code == 200:
                    seen["loaded"] += 1
                else:
                    seen["load_failed"] += 1
                    assert g.status_code in (400, 500, 507) and g.json()["error"], g.text
                    sys.__stderr__.write(f"load of a corrupted file: {g.status_code} {g.json()['error'][-160:]}\n")
            assert c.request("DELETE", "/api/delete", json={"model": "fuzzed"}).status_code == 200
            p.unlink()

        one()
        assert c.get("/api/version").status_code == 200
    sys.__stderr__.write(f"random header corruption: {seen}\n")
    assert seen["refused"] > 10                 # most structural corruption is caught up front
    assert _store_state(home) == before
