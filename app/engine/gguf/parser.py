"""A bounds-checked GGUF header parser: metadata and tensor table, never the weights.

Why not `gguf.GGUFReader` directly: it builds a numpy view for every string of every array (2.8 s and a few
hundred MB of Python objects for SmolLM2's 49k-token vocabulary), and on a hostile header it trusts the counts
(a claimed 2^60 strings means a loop that never ends or a MemoryError). This parser walks the same layout over
an `mmap` with every length checked against the bytes that remain, skips big arrays unless asked for them,
and applies the checks llama.cpp's `gguf_init_from_file` applies (so a file it would refuse, or abort on, is
refused here first, with the reason). The `gguf` package still supplies the type tables (ggml block sizes,
value types), and the tests check this parser's tensor table against `GGUFReader` on real files.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from app.engine.gguf.errors import GGUFError

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)          # v1 used 32-bit counts; llama.cpp refuses it
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4                         # GGML_MAX_DIMS
MAX_TENSOR_NAME = 63                 # GGML_MAX_NAME is 64 including the NUL
MAX_COUNT = 1 << 24                  # tensors or keys; real models have < 100k tensors and < 1k keys
MAX_KEY_LEN = 1 << 16
ARRAY_KEEP_DEFAULT = 4096         # longer arrays (vocabularies) are summarised unless the caller wants them

# value type -> (struct format, size) for fixed-size scalars
_SCALAR = {
    GGUFValueType.UINT8: ("<B", 1), GGUFValueType.INT8: ("<b", 1),
    GGUFValueType.UINT16: ("<H", 2), GGUFValueType.INT16: ("<h", 2),
    GGUFValueType.UINT32: ("<I", 4), GGUFValueType.INT32: ("<i", 4),
    GGUFValueType.FLOAT32: ("<f", 4), GGUFValueType.BOOL: ("<?", 1),
    GGUFValueType.UINT64: ("<Q", 8), GGUFValueType.INT64: ("<q", 8),
    GGUFValueType.FLOAT64: ("<d", 8),
}
_NP_DTYPE = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "<u1", GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}
_VALUE_TYPES = {int(t): t for t in GGUFValueType}
_GGML_TYPES = {int(t): t for t in GGML_QUANT_SIZES}


@dataclass(frozen=True)
class ArraySummary:
    """A metadata array left unread: its element type and length (e.g. the 49k tokenizer strings)."""
    item_type: GGUFValueType
    length: int


@dataclass(frozen=True)
class KeyValue:
    key: str
    vtype: GGUFValueType
    value: Any                       # python scalar, str, list, or ArraySummary
    item_type: GGUFValueType | None = None   # for arrays


@dataclass(frozen=True)
class RawTensor:
    name: str
    ne: tuple[int, ...]              # ggml order, ne0 first
    ggml_type: GGMLQuantizationType
    rel_offset: int                  # relative to the data section
    n_elements: int
    n_bytes: int


@dataclass
class GGUFFile:
    path: str
    file_size: int
    version: int
    alignment: int
    data_offset: int
    kv: dict[str, KeyValue] = field(default_factory=dict)
    tensors: list[RawTensor] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        kv = self.kv.get(key)
        return default if kv is None else kv.value


class _Cursor:
    """Reads little-endian values from a buffer, refusing to run past its end."""

    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(f"truncated file: {what} needs {n} bytes at offset {self.pos}, "
                            f"file has {self.size} bytes")

    def scalar(self, vtype: GGUFValueType, what: str):
        fmt, n = _SCALAR[vtype]
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.scalar(GGUFValueType.UINT32, what)

    def u64(self, what: str) -> int:
        return self.scalar(GGUFValueType.UINT64, what)

    def string(self, what: str, max_len: int | None = None) -> str:
        n = self.u64(f"{what} length")
        if max_len is not None and n > max_len:
            raise GGUFError(f"{what} is {n} bytes long (limit {max_len})")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", errors="replace")

    def skip_string(self, what: str) -> None:
        n = self.u64(f"{what} length")
        self.need(n, what)
        self.pos += n


def _value_type(code: int, what: str) -> GGUFValueType:
    t = _VALUE_TYPES.get(code)
    if t is None:
        raise GGUFError(f"{what} has unknown value type {code}")
    return t


def _read_value(cur: _Cursor, vtype: GGUFValueType, key: str, keep_arrays: int):
    if vtype in _SCALAR:
        return cur.scalar(vtype, f"value of {key!r}"), None
    if vtype == GGUFValueType.STRING:
        return cur.string(f"value of {key!r}"), None
    # ARRAY
    item_type = _value_type(cur.u32(f"array type of {key!r}"), f"array {key!r}")
    n = cur.u64(f"array length of {key!r}")
    if item_type == GGUFValueType.ARRAY:
        raise GGUFError(f"array {key!r} contains arrays (not supported by llama.cpp)")
    min_item = 8 if item_type == GGUFValueType.STRING else _SCALAR[item_type][1]
    if n > (cur.size - cur.pos) // min_item:
        raise GGUFError(f"array {key!r} claims {n} items, more than the file can hold")
    if item_type == GGUFValueType.STRING:
        if n > keep_arrays:
            for i in range(n):
                cur.skip_string(f"item {i} of {key!r}")
            return ArraySummary(item_type, n), item_type
        return [cur.string(f"item {i} of {key!r}") for i in range(n)], item_type
    size = _SCALAR[item_type][1] * n
    cur.need(size, f"array {key!r}")
    start = cur.pos
    cur.pos += size
    if n > keep_arrays:
        return ArraySummary(item_type, n), item_type
    arr = np.frombuffer(cur.buf, dtype=_NP_DTYPE[item_type], count=n, offset=start)
    if item_type == GGUFValueType.BOOL:
        return [bool(x) for x in arr], item_type
    return arr.tolist(), item_type


def parse_gguf(path: str | os.PathLike, *, keep_arrays: int = ARRAY_KEEP_DEFAULT) -> GGUFFile:
    """Parse and validate a GGUF file's header, metadata and tensor table. Raises GGUFError."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise GGUFError(f"{p}: no such file") from None
    except OSError as e:
        raise GGUFError(f"{p}: cannot read ({e.strerror or e})") from None
    if not p.is_file():
        raise GGUFError(f"{p}: not a regular file")
    size = st.st_size
    if size < 24:
        raise GGUFError(f"{p}: not a GGUF file ({size} bytes, too short for a GGUF header)")
    try:
        with open(p, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                return _parse(mm, size, str(p), keep_arrays)
            except GGUFError as e:
                raise GGUFError(f"{p}: {e}") from None
            except (struct.error, ValueError, OverflowError, MemoryError) as e:  # belt and braces
                raise GGUFError(f"{p}: malformed GGUF ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise GGUFError(f"{p}: cannot read ({e.strerror or e})") from None


def _parse(buf, size: int, path: str, keep_arrays: int) -> GGUFFile:
    """The header in file order: magic and counts, metadata, tensor infos, then the data section's checks."""
    cur = _Cursor(buf, size)
    version, n_tensors, n_kv = _read_counts(cur, buf, size)
    gf = GGUFFile(path=path, file_size=size, version=version, alignment=DEFAULT_ALIGNMENT, data_offset=0)
    _read_metadata(cur, gf, n_kv, keep_arrays)
    raw = _read_tensor_infos(cur, n_tensors)
    pad = cur.pos % gf.alignment
    gf.data_offset = cur.pos + (gf.alignment - pad if pad else 0)
    if gf.data_offset > size and n_tensors:
        raise GGUFError("truncated file: no room for tensor data after the header")
    _check_tensor_data(gf, raw, size)
    return gf


def _read_counts(cur: _Cursor, buf, size: int) -> tuple[int, int, int]:
    magic = bytes(buf[0:4])
    if magic != GGUF_MAGIC:
        raise GGUFError("not a GGUF file (bad magic: expected b'GGUF')")   # never echo the bytes: /api/create takes paths
    cur.pos = 4
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 16) in SUPPORTED_VERSIONS + (1,):
            raise GGUFError("big-endian GGUF: only little-endian files are supported")
        raise GGUFError(f"unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata key count")
    # each tensor entry needs >= 8 (name len) + 4 (n_dims) + 8 (ne0) + 4 (type) + 8 (offset) bytes,
    # each key >= 8 (key len) + 4 (type) + 1 (value)
    if n_tensors > MAX_COUNT or n_tensors * 32 > size:
        raise GGUFError(f"header claims {n_tensors} tensors, absurd for a {size}-byte file")
    if n_kv > MAX_COUNT or n_kv * 13 > size:
        raise GGUFError(f"header claims {n_kv} metadata keys, absurd for a {size}-byte file")
    return version, n_tensors, n_kv


def _read_metadata(cur: _Cursor, gf: GGUFFile, n_kv: int, keep_arrays: int) -> None:
    for i in range(n_kv):
        key = cur.string(f"key #{i}", max_len=MAX_KEY_LEN)
        if key in gf.kv:
            raise GGUFError(f"duplicate metadata key {key!r}")
        vtype = _value_type(cur.u32(f"type of {key!r}"), f"key {key!r}")
        value, item_type = _read_value(cur, vtype, key, keep_arrays)
        gf.kv[key] = KeyValue(key, vtype, value, item_type)
    align_kv = gf.kv.get("general.alignment")
    if align_kv is not None:
        a = align_kv.value
        if align_kv.vtype != GGUFValueType.UINT32 or a == 0 or a & (a - 1):
            raise GGUFError(f"general.alignment must be a non-zero power of two (uint32), got {a!r}")
        gf.alignment = a


def _read_tensor_infos(cur: _Cursor, n_tensors: int) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType, int]]:
    seen: set[str] = set()
    raw: list[tuple[str, tuple[int, ...], GGMLQuantizationType, int]] = []
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        if not name:
            raise GGUFError(f"tensor #{i} has an empty name")
        if len(name.encode()) > MAX_TENSOR_NAME:
            raise GGUFError(f"tensor name {name[:80]!r} is longer than {MAX_TENSOR_NAME} bytes")
        if name in seen:
            raise GGUFError(f"duplicate tensor name {name!r}")
        seen.add(name)
        n_dims = cur.u32(f"n_dims of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"tensor {name!r} has {n_dims} dimensions (1..{MAX_DIMS} allowed)")
        ne = tuple(cur.scalar(GGUFValueType.INT64, f"shape of {name!r}") for _ in range(n_dims))
        if any(d < 0 for d in ne):
            raise GGUFError(f"tensor {name!r} has a negative dimension {ne}")
        code = cur.u32(f"type of {name!r}")
        gtype = _GGML_TYPES.get(code)
        if gtype is None:
            raise GGUFError(f"tensor {name!r} has unknown ggml type {code}")
        block, _ = GGML_QUANT_SIZES[gtype]
        if ne[0] % block:
            raise GGUFError(f"tensor {name!r}: first dimension {ne[0]} is not a multiple of the "
                            f"{gtype.name} block size {block}")
        off = cur.u64(f"offset of {name!r}")
        raw.append((name, ne, gtype, off))
    return raw


def _check_tensor_data(gf: GGUFFile, raw, size: int) -> None:
    data_size = size - gf.data_offset
    expected = 0
    for name, ne, gtype, off in raw:
        n_el = 1
        for d in ne:
            n_el *= d
        if n_el >= 1 << 62:
            raise GGUFError(f"tensor {name!r} claims {n_el} elements")
        block, type_size = GGML_QUANT_SIZES[gtype]
        n_bytes = n_el // block * type_size
        # llama.cpp (gguf.cpp) requires the tensors packed in order, each padded to the alignment
        if off != expected:
            raise GGUFError(f"tensor {name!r} has data offset {off}, expected {expected} "
                            f"(tensors must be consecutive and {gf.alignment}-byte aligned)")
        if off + n_bytes > data_size:
            raise GGUFError(f"truncated file: tensor {name!r} needs bytes {gf.data_offset + off}.."
                            f"{gf.data_offset + off + n_bytes} but the file ends at {size}")
        expected = off + n_bytes
        rem = expected % gf.alignment
        if rem:
            expected += gf.alignment - rem
        gf.tensors.append(RawTensor(name, ne, gtype, off, n_el, n_bytes))
