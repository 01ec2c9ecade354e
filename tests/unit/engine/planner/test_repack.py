"""Weight repacking by llama.cpp's CPU backend in the memory model: which tensors (repack.cpp's rules), when
(no GPU host buffer in `devices`), how the planner shows it (weights["repack"], `mapped`, no double counting),
the buffer-line parser, and the CPU features discovery records. The real loads are in test_verify_layout.py."""
from __future__ import annotations

import pytest

from app.discovery.simulated import inventory_from_dict
from app.ggml import alloc_report
from app.discovery.cpu_features import cpuinfo_features
from app.engine.planner import repack
from app.engine.planner.search import plan
from app.engine.layout.types import Layout, PlanOptions
from app.engine.gguf.model_info import read_model_info
from app.engine.planner.verify import predicted_of

AVX2 = ["SSE3", "AVX", "AVX2", "FMA", "REPACK"]


def _inv(features, gpus=()):
    return inventory_from_dict({"devices": list(gpus), "host_ram_total": "16 GiB", "cpu_cores": 4,
                                "cpu_features": list(features)})


@pytest.fixture(scope="session")
def q4_0_dense(synthetic_dir):
    from gguf_factory import write_dense_llama

    return read_model_info(write_dense_llama(synthetic_dir / "dense-q4_0-256.gguf", n_layer=3, n_embd=256,
                                             n_head=4, n_head_kv=2, n_ff=512, qtype="Q4_0"))


@pytest.fixture(scope="session")
def q4_0_tied(synthetic_dir):
    from gguf_factory import write_dense_llama

    return read_model_info(write_dense_llama(synthetic_dir / "dense-q4_0-256-tied.gguf", n_layer=3, n_embd=256,
                                             n_head=4, n_head_kv=2, n_ff=512, qtype="Q4_0", tie_output=True))


def test_rules_follow_repack_cpp():
    assert repack.type_repacks("Q4_0", 4096, AVX2)
    assert repack.type_repacks("Q4_K", 4096, AVX2) and repack.type_repacks("IQ4_NL", 4096, AVX2)
    assert not repack.type_repacks("Q4_0", 4100, AVX2)                 # AVX2 needs ne[1] % 8 == 0
    assert repack.type_repacks("Q4_0", 4100, ["NEON", "DOTPROD", "REPACK"])   # NEON: % 4
    assert not repack.type_repacks("Q8_0", 4096, AVX2)                 # Q8_0: ARM only
    assert repack.type_repacks("Q8_0", 4096, ["NEON", "MATMUL_INT8", "REPACK"])
    assert not repack.type_repacks("Q2_K", 4096, AVX2) and repack.type_repacks("Q2_K", 4096, AVX2 + ["AVX512"])
    assert not repack.type_repacks("Q4_0", 4096, ["AVX2"])             # built without the repack buffer
    assert not repack.type_repacks("Q4_1", 4096, AVX2) and not repack.type_repacks("F16", 4096, AVX2)


def test_only_matmul_weights_repack():
    assert repack.tensor_repacks("blk.0.attn_q.weight", (256, 256), "Q4_0", AVX2)
    assert repack.tensor_repacks("blk.0.ffn_up_exps.weight", (256, 512, 8), "Q4_0", AVX2)
    assert not repack.tensor_repacks("token_embd.weight", (256, 49152), "Q4_0", AVX2)      # GET_ROWS
    assert not repack.tensor_repacks("blk.0.ffn_up_exps.weight", (256, 512, 1), "Q4_0", AVX2)  # 2-D for ggml
    assert not repack.tensor_repacks("blk.0.attn_q.bias", (256, 8), "Q4_0", AVX2)
    assert repack.output_copy_repacks((256, 49152), "Q4_0", AVX2)


def test_repack_active_only_without_a_gpu_host_buffer():
    assert repack.repack_active(AVX2, ())
    assert not repack.repack_active(AVX2, ("CUDA",)) and not repack.repack_active(AVX2, ("Vulkan", "Metal"))
    assert repack.repack_active(AVX2, ("Metal",))                     # Metal has no host buffer type
    assert not repack.repack_active(["AVX2"], ())


def test_cpu_plan_splits_repack_without_double_counting(q4_0_dense):
    info = q4_0_dense
    plain = plan(info, _inv([]), PlanOptions(num_ctx=512))
    lay = plan(info, _inv(AVX2), PlanOptions(num_ctx=512))
    cpu0, cpu = plain.devices[0], lay.devices[0]
    assert "repack" not in cpu0.weights
    # every matrix but token_embd is repacked: the repack class holds them, their classes lose them
    expect = sum(repack.pad(t.n_bytes) for t in info.tensors if t.ggml_type == "Q4_0" and t.name != "token_embd.weight")
    assert cpu.weights["repack"] == expect
    assert cpu.weights["token_embd"] == info.token_embd_bytes and "output" not in cpu.weights
    assert cpu.weights.get("attention", 0) == 0 and cpu.weights["norm"] > 0
    # real memory: each weight once (the mapped originals are droppable page cache, in `mapped`, not in total)
    assert abs(cpu.weights_total - cpu0.weights_total) <= 32 * len(info.tensors)
    assert cpu.total - cpu0.total == cpu.weights_total - cpu0.weights_total
    # llama.cpp maps from the first to the last tensor it did not repack, over repacked originals in between
    kept = [t for t in info.tensors if t.ggml_type != "Q4_0" or t.name == "token_embd.weight"]
    span = max(t.offset + t.n_bytes for t in kept) - min(t.offset for t in kept)
    assert cpu.mapped == span - sum(t.n_bytes for t in kept) > 0
    # what llama.cpp reports: the mapping still spans the originals, plus the repack buffer
    p = predicted_of(lay)["CPU"]
    assert p["repack"] == expect and p["model"] == cpu.weights_total - expect + cpu.mapped
    assert any("repacks" in r for r in lay.reasons)
    assert Layout.from_dict(lay.to_dict()) == lay


def test_tied_output_on_cpu_is_an_extra_repacked_copy(q4_0_tied):
    info = q4_0_tied
    plain = plan(info, _inv([]), PlanOptions(num_ctx=512)).devices[0]
    cpu = plan(info, _inv(AVX2), PlanOptions(num_ctx=512)).devices[0]
    assert cpu.weights["token_embd"] == info.token_embd_bytes               # still there for GET_ROWS
    assert cpu.weights_total - plain.weights_total >= info.token_embd_bytes  # and again as the output matrix


def test_gpu_layouts_repack_only_without_host_buffer(q4_0_dense):
    info = q4_0_dense
    opts = PlanOptions(num_ctx=512, num_gpu=2)                 # one block on the CPU
    cuda = plan(info, _inv(AVX2, [{"id": "CUDA0", "total": "8 GiB", "backend": "CUDA"}]), opts).devices[0]
    metal = plan(info, _inv(AVX2, [{"id": "MTL0", "total": "8 GiB", "backend": "Metal"}]), opts).devices[0]
    assert cuda.layers == metal.layers == (0, 1)
    assert "repack" not in cuda.weights and cuda.weights["attention"] > 0
    assert metal.weights["repack"] > 0 and metal.weights.get("attention", 0) == 0
    # with CUDA the mapping runs from token_embd to block 1's last tensor, over the GPU's output matrix (written
    # between them in this file): llama.cpp's CPU_Mapped figure includes it, the CPU's real need does not
    on_cpu = [t for t in info.tensors if t.name == "token_embd.weight" or t.layer in (0, 1)]
    span = max(t.offset + t.n_bytes for t in on_cpu) - min(t.offset for t in on_cpu)
    out = next(t for t in info.tensors if t.name == "output.weight")
    assert cuda.mapped == span - sum(t.n_bytes for t in on_cpu) >= out.n_bytes


def test_parser_puts_extra_buffers_in_repack():
    lines = ["load_tensors:   CPU_Mapped model buffer size =    38.24 MiB",
             "load_tensors:   CPU_REPACK model buffer size =    34.59 MiB",
             "load_tensors:          AMX model buffer size =     1.00 MiB",
             "load_tensors:        CUDA0 model buffer size =    10.00 MiB",
             "llama_kv_cache:        CPU KV buffer size =    90.00 MiB"]
    r = alloc_report.parse_buffer_lines(lines, ["CUDA0"])
    assert r["CPU"]["model"] == round(38.24 * 2**20) and r["CPU"]["repack"] == round(35.59 * 2**20)
    assert r["CUDA0"]["model"] == 10 * 2**20 and r["CUDA0"]["repack"] == 0


def test_simulated_inventory_features():
    assert _inv(["AVX2", "REPACK"]).cpu_features == ("AVX2", "REPACK")
    assert inventory_from_dict({"devices": [], "host_ram_total": "1 GiB", "cpu_cores": 1}).cpu_features == ()
    for bad in ("AVX2", ["AVX2", 3], [""]):
        with pytest.raises(ValueError, match="cpu_features"):
            inventory_from_dict({"devices": [], "host_ram_total": "1 GiB", "cpu_cores": 1, "cpu_features": bad})


def test_discovery_records_this_cpus_features(tmp_path):
    from app.discovery import discover

    feats = discover().cpu_features
    assert "REPACK" in feats                                      # llama.cpp's default build has the repack buffer
    flags = open("/proc/cpuinfo").read().split() if __import__("os").path.exists("/proc/cpuinfo") else []
    if "avx2" in flags:
        assert "AVX2" in feats
    # the /proc/cpuinfo fallback names the same flags
    (tmp_path / "cpuinfo").write_text("processor: 0\nflags\t: fpu sse avx2 avx512f\n")
    assert cpuinfo_features(str(tmp_path / "cpuinfo")) == ("AVX2", "AVX512", "REPACK")
    (tmp_path / "arm").write_text("Features\t: fp asimd asimddp i8mm\n")
    assert cpuinfo_features(str(tmp_path / "arm")) == ("DOTPROD", "MATMUL_INT8", "NEON", "REPACK")
