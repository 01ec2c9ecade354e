"""read_model_info on the real SmolLM2 GGUF and on synthetic models, against numbers worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFValueType, GGUFWriter

from app.engine.gguf.model_info import GGUFError, WEIGHT_CLASSES, classify_tensor, read_model_info


def q(n_elements: int, block: int, block_bytes: int) -> int:
    return n_elements // block * block_bytes


Q4_1 = lambda n: q(n, 32, 20)   # noqa: E731
Q8_0 = lambda n: q(n, 32, 34)   # noqa: E731


def test_smollm2_hyperparameters(smollm2_path):
    info = read_model_info(smollm2_path)
    assert info.architecture == "llama"
    assert info.n_layer == 30
    assert info.n_embd == 576
    assert info.n_head == 9
    assert info.n_head_kv == (3,) * 30
    assert info.head_dim_k == info.head_dim_v == 64
    assert info.n_vocab == 49152
    assert info.context_length == 8192
    assert info.quantization == "Q4_1"
    assert info.tokenizer_model == "gpt2"
    assert "<|im_start|>" in info.chat_template
    assert info.n_expert == 0 and not info.is_moe
    assert info.sliding_window == 0 and info.swa_layers == (False,) * 30
    assert not info.is_embedding and info.pooling_type is None
    assert 134_000_000 < info.n_params < 136_000_000      # "135M"
    assert info.n_params == sum(int(np.prod(t.shape)) for t in info.tensors)


def test_smollm2_tensor_bytes_add_up_to_the_data_section(smollm2_path):
    info = read_model_info(smollm2_path)
    assert len(info.tensors) == 272
    data = info.file_size - info.data_offset
    # every tensor is padded to the 32-byte alignment except possibly the last one
    assert 0 <= data - info.weight_bytes < 32 * len(info.tensors)
    assert info.weight_bytes == 96_576_768 == data
    per_layer = sum(layer.total for layer in info.layers)
    assert per_layer + info.token_embd_bytes + info.output_bytes + info.other_bytes == info.weight_bytes
    # tied output: no output.weight; output_norm is the only "other" top-level tensor
    assert info.output_bytes == 0
    assert info.other_bytes == 576 * 4
    assert info.token_embd_bytes == q(49152 * 576, 32, 34)    # Q8_0 embedding
    # offsets are absolute, inside the file, in order
    offs = [t.offset for t in info.tensors]
    assert offs == sorted(offs) and offs[0] == info.data_offset
    last = info.tensors[-1]
    assert last.offset + last.n_bytes <= info.file_size


def test_smollm2_layer_classes_by_hand(smollm2_path):
    info = read_model_info(smollm2_path)
    attention = 2 * Q4_1(576 * 576) + 2 * Q4_1(576 * 192)     # q, output; k, v (3 kv heads * 64)
    ffn = 3 * Q4_1(576 * 1536)
    norm = 2 * 576 * 4
    for layer in info.layers:
        assert layer.bytes_by_class == {"attention": attention, "ffn": ffn, "experts": 0, "norm": norm, "other": 0}
    by_name = {t.name: t for t in info.tensors}
    t = by_name["blk.7.attn_k.weight"]
    assert (t.shape, t.ggml_type, t.layer, t.weight_class) == ((576, 192), "Q4_1", 7, "attention")
    assert by_name["token_embd.weight"].weight_class == "token_embd"
    assert by_name["output_norm.weight"].layer is None


def test_tensor_table_matches_gguf_reader(smollm2_path):
    """An independent oracle: the gguf package's own reader agrees on every tensor."""
    from gguf import GGUFReader

    info = read_model_info(smollm2_path)
    r = GGUFReader(smollm2_path)
    assert r.data_offset == info.data_offset
    ours = [(t.name, t.shape, t.ggml_type, t.n_bytes, t.offset) for t in info.tensors]
    theirs = [(t.name, tuple(int(x) for x in t.shape), t.tensor_type.name, int(t.n_bytes), int(t.data_offset))
              for t in r.tensors]
    assert ours == theirs


def test_dense_synthetic(dense_gguf, dense_q8_gguf):
    info = read_model_info(dense_gguf)
    assert (info.architecture, info.n_layer, info.n_embd, info.n_head, info.n_head_kv) == ("llama", 3, 64, 4, (2, 2, 2))
    assert info.head_dim_k == 16 and info.quantization == "F32" and info.context_length == 2048
    assert info.n_vocab == 49152 and info.tokenizer_model == "gpt2"
    attention = 4 * (64 * 64 + 64 * 32 + 64 * 32 + 64 * 64)
    for layer in info.layers:
        assert layer.bytes_by_class == {"attention": attention, "ffn": 4 * 3 * 64 * 128, "experts": 0,
                                        "norm": 2 * 64 * 4, "other": 0}
    assert info.output_bytes == info.token_embd_bytes == 49152 * 64 * 4

    q8 = read_model_info(dense_q8_gguf)
    assert q8.quantization == "Q8_0"
    assert q8.layers[0].bytes_by_class["attention"] == 2 * Q8_0(64 * 64) + 2 * Q8_0(64 * 32)
    assert q8.layers[0].bytes_by_class["norm"] == 2 * 64 * 4       # norms stay F32
    assert q8.weight_bytes == q8.file_size - q8.data_offset


def test_moe_synthetic(moe_gguf):
    info = read_model_info(moe_gguf)
    assert info.architecture == "qwen3moe" and info.is_moe
    assert (info.n_expert, info.n_expert_used) == (4, 2)
    assert info.head_dim_k == info.head_dim_v == 32
    for layer in info.layers:
        b = layer.bytes_by_class
        assert b["experts"] == 4 * 3 * 4 * 64 * 64            # gate/up/down, 4 experts, 64x64, f32
        assert b["other"] == 4 * 64 * 4                       # router ffn_gate_inp
        assert b["ffn"] == 0
        # q (128x64), k/v (64x64), output (64x128), q_norm/k_norm (32 each)
        assert b["attention"] == 4 * (128 * 64 + 2 * 64 * 64 + 64 * 128 + 2 * 32)
    assert sum(t.n_bytes for t in info.tensors if t.weight_class == "experts") == 3 * 4 * 3 * 4 * 64 * 64


def test_embedding_synthetic(embed_gguf):
    info = read_model_info(embed_gguf)
    assert info.pooling_type == 3 and info.is_embedding


@pytest.mark.parametrize("name,expected", [
    ("token_embd.weight", (None, "token_embd")),
    ("output.weight", (None, "output")),
    ("output_norm.weight", (None, "other")),
    ("rope_freqs.weight", (None, "other")),
    ("blk.0.attn_norm.weight", (0, "norm")),
    ("blk.12.ffn_norm.weight", (12, "norm")),
    ("blk.3.post_attention_norm.weight", (3, "norm")),
    ("blk.1.attn_q.weight", (1, "attention")),
    ("blk.1.attn_q.bias", (1, "attention")),
    ("blk.1.attn_qkv.weight", (1, "attention")),
    ("blk.1.attn_output.weight", (1, "attention")),
    ("blk.1.attn_q_norm.weight", (1, "attention")),
    ("blk.1.attn_k_norm.weight", (1, "attention")),
    ("blk.1.attn_kv_a_mqa.weight", (1, "attention")),
    ("blk.2.ffn_up.weight", (2, "ffn")),
    ("blk.2.ffn_gate.weight", (2, "ffn")),
    ("blk.2.ffn_down.weight", (2, "ffn")),
    ("blk.2.ffn_up_shexp.weight", (2, "ffn")),
    ("blk.2.ffn_down_shexp.weight", (2, "ffn")),
    ("blk.2.ffn_gate_inp_shexp.weight", (2, "ffn")),
    ("blk.2.ffn_gate_exps.weight", (2, "experts")),
    ("blk.2.ffn_down_exps.weight", (2, "experts")),
    ("blk.2.ffn_gate_up_exps.weight", (2, "experts")),
    ("blk.2.ffn_gate_inp.weight", (2, "other")),
    ("blk.2.exp_probs_b.bias", (2, "other")),
    ("blk.2.ssm_in.weight", (2, "other")),
])
def test_classify_tensor(name, expected):
    assert classify_tensor(name) == expected
    assert expected[1] in WEIGHT_CLASSES + ("token_embd", "output")


def _write_tiny(path, arch: str, n_layer: int, extra: dict) -> None:
    """A minimal (not loadable) GGUF with one tensor: enough for the metadata side of read_model_info."""
    w = GGUFWriter(str(path), arch)
    w.add_key_value(f"{arch}.block_count", n_layer, GGUFValueType.UINT32)
    w.add_key_value(f"{arch}.embedding_length", 64, GGUFValueType.UINT32)
    w.add_key_value(f"{arch}.attention.head_count", 4, GGUFValueType.UINT32)
    for k, (v, t, sub) in extra.items():
        w.add_key_value(f"{arch}.{k}", v, t, sub_type=sub)
    w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_sliding_window_patterns(tmp_path):
    # gemma3 has no pattern key: llama.cpp's built-in pattern 6 (5 sliding, 1 full)
    _write_tiny(tmp_path / "g3.gguf", "gemma3", 12,
                {"attention.sliding_window": (512, GGUFValueType.UINT32, None)})
    info = read_model_info(tmp_path / "g3.gguf")
    assert info.sliding_window == 512
    assert info.swa_layers == (True,) * 5 + (False,) + (True,) * 5 + (False,)
    # explicit per-layer bool array wins
    pattern = [True, False, True, False]
    _write_tiny(tmp_path / "arr.gguf", "gpt-oss", 4, {
        "attention.sliding_window": (128, GGUFValueType.UINT32, None),
        "attention.sliding_window_pattern": (pattern, GGUFValueType.ARRAY, GGUFValueType.BOOL)})
    assert read_model_info(tmp_path / "arr.gguf").swa_layers == tuple(pattern)
    # per-layer KV head counts
    _write_tiny(tmp_path / "kv.gguf", "llama", 3, {
        "attention.head_count_kv": ([1, 2, 4], GGUFValueType.ARRAY, GGUFValueType.INT32)})
    info = read_model_info(tmp_path / "kv.gguf")
    assert info.n_head_kv == (1, 2, 4) and info.n_head == 4 and info.head_dim_k == 16
    assert info.name == "kv"     # no general.name: file stem


def test_cached_until_the_file_changes(tmp_path):
    import os
    import time

    p = tmp_path / "m.gguf"
    _write_tiny(p, "llama", 2, {})
    assert read_model_info(p) is not read_model_info(p)    # just written: not cached (mtime may be coarse)
    old = time.time() - 60
    os.utime(p, (old, old))
    a = read_model_info(p)
    assert read_model_info(p) is a                          # settled file: cached
    _write_tiny(p, "llama", 5, {})                          # same size, new content
    assert read_model_info(p).n_layer == 5


def test_missing_file_is_a_gguf_error(tmp_path):
    with pytest.raises(GGUFError, match="no such file"):
        read_model_info(tmp_path / "nope.gguf")
