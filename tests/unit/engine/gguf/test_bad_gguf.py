"""Hostile and broken GGUF files: each is refused with a GGUFError that names the problem, quickly, and never
with any other exception (a file llama.cpp would abort on must not get past read_model_info)."""
from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter

from app.engine.gguf.model_info import GGUFError, read_model_info

U32, I32, F32, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10


def s(text: str | bytes) -> bytes:
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def kv_str(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", STR) + s(value)


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<I", U32) + struct.pack("<I", value)


def tensor_info(name: str, ne: tuple[int, ...], ggml_type: int = 0, offset: int = 0) -> bytes:
    return (s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
            + struct.pack("<Iq", ggml_type, offset))


GOOD_KV = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1),
           kv_u32("llama.embedding_length", 32), kv_u32("llama.attention.head_count", 4)]


def build(kvs=None, tensors=None, data=None, *, version=3, n_tensors=None, n_kv=None, magic=b"GGUF",
          align=32) -> bytes:
    kvs = GOOD_KV if kvs is None else kvs
    tensors = [tensor_info("token_embd.weight", (32, 4))] if tensors is None else tensors
    head = (magic + struct.pack("<I", version)
            + struct.pack("<Q", len(tensors) if n_tensors is None else n_tensors)
            + struct.pack("<Q", len(kvs) if n_kv is None else n_kv))
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % align)
    return body + (bytes(32 * 4 * 4) if data is None else data)


def write(tmp_path, content: bytes, name: str = "bad.gguf"):
    p = tmp_path / name
    p.write_bytes(content)
    return p


def test_builder_makes_a_valid_file(tmp_path):
    info = read_model_info(write(tmp_path, build()))
    assert info.n_layer == 1 and len(info.tensors) == 1 and info.tensors[0].n_bytes == 512


@pytest.mark.parametrize("case,content,reason", [
    ("text file", b"this is not a model, just some text\n" * 4, "not a GGUF file"),
    ("empty", b"", "too short"),
    ("zip", b"PK\x03\x04" + bytes(100), "not a GGUF file"),
    ("version 1", build(version=1), "unsupported GGUF version 1"),
    ("version 99", build(version=99), "unsupported GGUF version 99"),
    ("big-endian", build(version=3 << 16), "big-endian"),
    ("absurd tensor count", build(n_tensors=1 << 60), "absurd"),
    ("absurd key count", build(n_kv=1 << 62), "absurd"),
    ("key count past the end", build(n_kv=len(GOOD_KV) + 1, tensors=[], data=b"", align=1), "truncated"),
    ("huge key length", build(kvs=[struct.pack("<Q", 1 << 40) + b"x"]), "limit"),
    ("string past the end", build(kvs=GOOD_KV + [s("general.name") + struct.pack("<IQ", STR, 1 << 50)]),
     "truncated"),
    ("absurd array length", build(kvs=GOOD_KV + [s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 1 << 61)]),
     "more than the file can hold"),
    ("nested array", build(kvs=GOOD_KV + [s("x.y") + struct.pack("<IIQ", ARR, ARR, 1)]), "contains arrays"),
    ("unknown value type", build(kvs=GOOD_KV + [s("x.y") + struct.pack("<I", 77) + bytes(8)]), "unknown value type 77"),
    ("duplicate key", build(kvs=GOOD_KV + [kv_u32("llama.block_count", 2)]), "duplicate metadata key"),
    ("alignment zero", build(kvs=GOOD_KV + [kv_u32("general.alignment", 0)]), "power of two"),
    ("alignment three", build(kvs=GOOD_KV + [kv_u32("general.alignment", 3)]), "power of two"),
    ("unknown ggml type", build(tensors=[tensor_info("token_embd.weight", (32, 4), ggml_type=99)]),
     "unknown ggml type 99"),
    ("removed ggml type Q4_2", build(tensors=[tensor_info("token_embd.weight", (32, 4), ggml_type=4)]),
     "unknown ggml type 4"),
    ("zero dims", build(tensors=[s("token_embd.weight") + struct.pack("<IIq", 0, 0, 0)]), "0 dimensions"),
    ("five dims", build(tensors=[tensor_info("token_embd.weight", (32, 1, 1, 1, 4))]), "5 dimensions"),
    ("negative dim", build(tensors=[tensor_info("token_embd.weight", (32, -4))]), "negative dimension"),
    ("absurd element count", build(tensors=[tensor_info("token_embd.weight", (1 << 40, 1 << 40))]), "elements"),
    ("block size", build(tensors=[tensor_info("token_embd.weight", (33, 4), ggml_type=2)]), "block size 32"),
    ("empty tensor name", build(tensors=[tensor_info("", (32, 4))]), "empty name"),
    ("long tensor name", build(tensors=[tensor_info("blk.0." + "x" * 70, (32, 4))]), "longer than 63"),
    ("duplicate tensor", build(tensors=[tensor_info("a.weight", (32,)), tensor_info("a.weight", (32,), offset=128)]),
     "duplicate tensor name"),
    ("misaligned offset", build(tensors=[tensor_info("token_embd.weight", (32, 4), offset=8)]), "offset 8"),
    ("overlapping tensors", build(tensors=[tensor_info("a.weight", (32, 4)), tensor_info("b.weight", (32,), offset=0)]),
     "expected 512"),
    ("data past the end", build(data=bytes(100)), "truncated"),
    ("tensor far past the end", build(tensors=[tensor_info("token_embd.weight", (1 << 30, 1 << 10))]), "truncated"),
    ("no architecture", build(kvs=GOOD_KV[1:]), "no general.architecture"),
    ("no block count", build(kvs=[GOOD_KV[0]] + GOOD_KV[2:]), "not a language model"),
    ("absurd block count", build(kvs=[GOOD_KV[0], kv_u32("llama.block_count", 1 << 30)] + GOOD_KV[2:]),
     "not a plausible layer count"),
    ("no embedding length", build(kvs=GOOD_KV[:2]), "embedding_length"),
    ("no tensors", build(tensors=[], data=b""), "no tensors"),
    ("kv heads do not divide heads", build(kvs=GOOD_KV + [kv_u32("llama.attention.head_count_kv", 3)]),
     "KV heads must divide"),
    ("more kv heads than heads", build(kvs=GOOD_KV + [kv_u32("llama.attention.head_count_kv", 8)]),
     "KV heads must divide"),
    ("more experts used than exist", build(kvs=GOOD_KV + [kv_u32("llama.expert_count", 4),
                                                           kv_u32("llama.expert_used_count", 8)]),
     "8 experts used per token but only 4"),
    ("experts but none used", build(kvs=GOOD_KV + [kv_u32("llama.expert_count", 4)]), "expert_used_count is 0"),
    ("too many experts", build(kvs=GOOD_KV + [kv_u32("llama.expert_count", 5000),
                                               kv_u32("llama.expert_used_count", 2)]), "at most 1024"),
    ("rope dims differ from head size", build(kvs=GOOD_KV + [kv_u32("llama.rope.dimension_count", 7)]),
     "rope.dimension_count 7 differs from the head size 8"),
    ("513 layers", build(kvs=[GOOD_KV[0], kv_u32("llama.block_count", 513)] + GOOD_KV[2:]), "1..512"),
    ("split part", build(kvs=GOOD_KV + [s("split.count") + struct.pack("<IH", 2, 3)]), "split GGUF (3 files)"),
])
def test_refused_with_reason(tmp_path, case, content, reason):
    p = write(tmp_path, content)
    with pytest.raises(GGUFError) as e:
        read_model_info(p)
    assert reason in str(e.value), f"{case}: {e.value}"
    assert str(p) in str(e.value)       # the message says which file


def test_not_a_file(tmp_path):
    with pytest.raises(GGUFError, match="not a regular file"):
        read_model_info(tmp_path)
    with pytest.raises(GGUFError, match="no such file"):
        read_model_info(tmp_path / "missing.gguf")


@pytest.mark.parametrize("keep", [24, 1000, 1_700_000, 30_000_000, 98_000_000])
def test_truncated_smollm2(tmp_path, smollm2_path, keep):
    """Cut inside the header, the vocabulary, the tensor table and the weights."""
    with open(smollm2_path, "rb") as f:
        p = write(tmp_path, f.read(keep))
    with pytest.raises(GGUFError, match="truncated"):
        read_model_info(p)


def _tiny_valid(path) -> bytes:
    w = GGUFWriter(str(path), "llama")
    for k, v in (("block_count", 2), ("embedding_length", 32), ("attention.head_count", 4)):
        w.add_key_value(f"llama.{k}", v, GGUFValueType.UINT32)
    w.add_key_value("tokenizer.ggml.tokens", ["a", "b", "c"], GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)
    w.add_tensor("token_embd.weight", np.ones((3, 32), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.ones((32, 32), dtype=np.float32))
    w.add_tensor("blk.1.attn_norm.weight", np.ones(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def test_random_corruption_never_escapes_as_another_exception(tmp_path):
    """Flip bytes of a valid file all over its header (seeded): the result either reads or is a GGUFError."""
    good = _tiny_valid(tmp_path / "good.gguf")
    info = read_model_info(tmp_path / "good.gguf")
    header_end = info.data_offset
    rng = random.Random(1234)
    refused = 0
    for i in range(400):
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(header_end)
            b[pos] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        p = write(tmp_path, bytes(b), f"fuzz{i}.gguf")
        try:
            read_model_info(p)
        except GGUFError:
            refused += 1
    assert refused > 100     # most corruptions of a small header are caught


def test_every_key_retyped_is_read_or_refused(tmp_path):
    """Change each metadata key's declared type to every other type: a GGUFError or a clean read, nothing else
    (e.g. a string where a layer count should be)."""
    w = GGUFWriter(str(tmp_path / "base.gguf"), "qwen3moe")
    for k, v in (("block_count", 2), ("embedding_length", 32), ("attention.head_count", 4),
                 ("attention.head_count_kv", 2), ("context_length", 512), ("expert_count", 4),
                 ("expert_used_count", 2), ("attention.key_length", 8), ("rope.dimension_count", 8),
                 ("attention.sliding_window", 64), ("pooling_type", 1), ("vocab_size", 3)):
        w.add_key_value(f"qwen3moe.{k}", v, GGUFValueType.UINT32)
    w.add_key_value("qwen3moe.attention.sliding_window_pattern", [True, False], GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.BOOL)
    w.add_key_value("tokenizer.ggml.tokens", ["a", "b", "c"], GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING)
    w.add_key_value("tokenizer.ggml.model", "gpt2", GGUFValueType.STRING)
    w.add_key_value("tokenizer.chat_template", "{{ x }}", GGUFValueType.STRING)
    w.add_tensor("token_embd.weight", np.ones((3, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    good = (tmp_path / "base.gguf").read_bytes()
    assert read_model_info(tmp_path / "base.gguf").n_expert == 4
    keys = [b"general.architecture"] + [k for k in (b"qwen3moe.block_count", b"qwen3moe.embedding_length",
            b"qwen3moe.attention.head_count", b"qwen3moe.attention.head_count_kv", b"qwen3moe.context_length",
            b"qwen3moe.expert_count", b"qwen3moe.expert_used_count", b"qwen3moe.attention.key_length",
            b"qwen3moe.rope.dimension_count", b"qwen3moe.attention.sliding_window", b"qwen3moe.pooling_type",
            b"qwen3moe.vocab_size", b"qwen3moe.attention.sliding_window_pattern", b"tokenizer.ggml.tokens",
            b"tokenizer.ggml.model", b"tokenizer.chat_template")]
    outcomes = {"read": 0, "refused": 0}
    for key in keys:
        at = good.index(s(key)) + 8 + len(key)          # the 4-byte value type after the key
        for vtype in range(13):
            b = bytearray(good)
            b[at:at + 4] = struct.pack("<I", vtype)
            p = write(tmp_path, bytes(b), "retyped.gguf")
            try:
                read_model_info(p)
                outcomes["read"] += 1
            except GGUFError:
                outcomes["refused"] += 1
    assert outcomes["refused"] > len(keys) * 6
