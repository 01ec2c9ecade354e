"""The memory model: weight parts from the tensor table, KV bytes as llama.cpp sizes them, output buffer."""
from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.planner.memory import (MiB, block_parts, context_shape, kv_bytes_per_layer, memory_model,
                               output_buffer_bytes, row_size)
from app.engine.gguf.model_info import read_model_info
from model_shapes import build_info, dense_8b, qwen3_30b_a3b


def _parts_total(info):
    mm = memory_model(info, 4096, 1)
    blocks = sum(mm.part_bytes(i, p) for i in range(info.n_layer) for p in ("attn", "ffn", "experts"))
    return blocks + info.token_embd_bytes + info.output_bytes + info.other_bytes


def test_every_tensor_is_counted_once(smollm2_path):
    for info in (read_model_info(smollm2_path), qwen3_30b_a3b(), dense_8b()):
        assert _parts_total(info) == info.weight_bytes, info.name


def test_smollm2_kv_matches_llama_cpp_figures(smollm2_path):
    info = read_model_info(smollm2_path)
    # figures printed by llama.cpp for this model (docs/architecture.md, llama.cpp facts 3 and a q8_0 load)
    assert sum(kv_bytes_per_layer(info, 1024, 4, "f16")) == 90 * MiB          # n_ctx 4096, 4 seqs: 90.00 MiB
    assert sum(kv_bytes_per_layer(info, 2048, 4, "q8_0")) == int(95.625 * MiB)  # n_ctx 8192, q8_0: 95.62 MiB
    assert output_buffer_bytes(info, 4) == int(0.75 * MiB)


def test_tied_output_is_a_copy_only_on_a_gpu(smollm2_path):
    info = read_model_info(smollm2_path)
    assert info.output_bytes == 0
    mm = memory_model(info, 2048, 1)
    assert mm.output_bytes(on_gpu=False) == info.other_bytes
    assert mm.output_bytes(on_gpu=True) == info.token_embd_bytes + info.other_bytes


def test_context_padding_like_llama_cpp():
    assert context_shape(100, 1).n_ctx == 256
    cs = context_shape(1000, 3)                 # 3000 -> 3072 total, 1024 per sequence
    assert (cs.n_ctx, cs.n_ctx_seq, cs.n_seq) == (3072, 1024, 3)
    cs = context_shape(300, 4)                  # 1200 -> 1280 / 4 = 320 -> 512 per sequence -> 2048
    assert (cs.n_ctx, cs.n_ctx_seq) == (2048, 512)
    assert context_shape(128, 1).n_ubatch == 128     # n_batch is clamped to the requested context


def test_sliding_window_layers_sized_by_window():
    swa = tuple(i % 2 == 0 for i in range(4))
    info = build_info(arch="gemma2", name="swa", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64,
                      n_ff=512, n_vocab=1024, wtype="Q8_0", more_bits_type="Q8_0", out_type="Q8_0",
                      embd_type="Q8_0", sliding_window=128, swa_layers=swa)
    kv = kv_bytes_per_layer(info, 4096, 2, "f16")
    per_cell = 2 * 2 * 64 * 2          # K and V, 2 KV heads of 64, f16
    assert kv[1] == 4096 * 2 * per_cell                   # full layer: n_ctx_seq cells per sequence
    assert kv[0] == 768 * 2 * per_cell                    # PAD(min(4096, 128 + 512), 256) = 768 per sequence
    assert kv[0] == kv[2] and kv[1] == kv[3]
    small = kv_bytes_per_layer(info, 256, 1, "f16")
    assert small[0] == small[1]                           # window larger than the context: same size


def test_quantized_kv_row_sizes():
    assert row_size("q8_0", 128) == 4 * 34
    assert row_size("q4_0", 128) == 4 * 18
    assert row_size("f16", 128) == 256
    with pytest.raises(ValueError, match="kv_type"):
        row_size("q3_k", 128)


def test_moe_experts_are_the_bulk():
    info = qwen3_30b_a3b()
    parts = block_parts(info)
    experts = sum(p.bytes("experts") for p in parts)
    assert experts > 0.9 * info.weight_bytes
    assert all(p.bytes("experts") > 20 * p.bytes("attn") for p in parts)
    assert abs(info.weight_bytes - 18.6e9) / 18.6e9 < 0.02      # the published Q4_K_M file is 18.6 GB
    assert abs(dense_8b().weight_bytes - 4.92e9) / 4.92e9 < 0.02  # Llama-3.1-8B Q4_K_M: 4.92 GB


def test_output_reserve_plans_the_embedding_growth():
    """An embedding request makes every token of its batch an output, and llama.cpp grows the host output
    buffer to logits + embeddings for all of them: a generative model embeds in chunks sized to keep that near
    32 MiB, an embedding model decodes a whole input (up to a ubatch) at once. The plan counts it on the CPU."""
    from app.discovery.simulated import inventory_from_dict
    from app.engine.layout.context_rules import embed_chunk_tokens
    from app.engine.planner.memory import memory_model
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions

    info = build_info(arch="llama", name="gen", n_layer=2, n_embd=576, n_head=9, n_head_kv=3, head_dim=64,
                      n_ff=1536, n_vocab=49152, wtype="Q8_0", more_bits_type="Q8_0", out_type="Q8_0", embd_type="Q8_0")
    chunk = embed_chunk_tokens(49152, 576, 512)
    assert chunk == 168 and chunk * (49152 + 576) * 4 <= 32 << 20
    mm = memory_model(info, 4096, 4)
    assert mm.output_buffer == 49152 * 4 * 4
    assert mm.output_buffer + mm.output_reserve == chunk * (49152 + 576) * 4
    embed = replace(info, is_embedding=True)
    mm_e = memory_model(embed, 4096, 1)
    assert mm_e.output_buffer + mm_e.output_reserve == 512 * (49152 + 576) * 4      # a whole ubatch of outputs
    inv = inventory_from_dict({"devices": [], "host_ram_total": "64 GiB", "cpu_cores": 4})
    cpu = plan(info, inv, PlanOptions(num_ctx=4096, num_parallel=4)).devices[0]
    assert cpu.output_reserve == mm.output_reserve and cpu.total == (cpu.weights_total + cpu.kv + cpu.compute
                                                                      + cpu.output + cpu.output_reserve)
