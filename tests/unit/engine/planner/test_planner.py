"""The layout planner against simulated devices: budgets kept, llama.cpp parameters that realise the plan exactly,
and no better layout under the same memory model (brute force)."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from app.discovery.simulated import inventory_from_dict, load_simulated
from app.engine.planner.placement import OP_OFFLOAD_MIN_BATCH_DENSE, OP_OFFLOAD_MIN_BATCH_MOE, op_offload_min_batch
from app.engine.planner.search import plan
from app.engine.layout.types import Layout, PlanOptions
from app.engine.gguf.model_info import read_model_info
from layout_oracle import BruteForce, realise, score_of
from model_shapes import build_info, dense_8b, huge_dense, qwen3_30b_a3b, tiny
from repo_paths import SIM_DEVICES

SIM = SIM_DEVICES
MiB = 1024 ** 2
GiB = 1024 ** 3
COMPUTE_GPU = 300 * MiB
COMPUTE = {"CPU": 300 * MiB, "*": COMPUTE_GPU}     # fixed compute figures so the brute force uses the same ones


def sim(name: str):
    return load_simulated(SIM / f"{name}.json")


def check_layout(info, inv, layout: Layout, brute_orders=None, fixed_k=None, fixed_m=None, optimal=True):
    """Budgets, exact realisation by llama.cpp's rules, optimality against brute force. Returns the score."""
    o = layout.options
    gpus = {d.id: d for d in inv.gpus}
    # 1. no device over its budget (free - margin)
    for d in layout.devices:
        if d.device_id == "CPU":
            assert d.budget == inv.host_ram_available - o.margin
        else:
            assert d.budget == gpus[d.device_id].free - o.margin
        if layout.fits:
            assert d.total <= d.budget, (d.device_id, d.total, d.budget)
    # 2. the llama.cpp parameters put exactly the planned bytes on each device
    where, wbytes, kvb = realise(info, layout)
    for d in layout.devices:
        assert d.weights_total == wbytes.get(d.device_id, 0), d.device_id
        assert d.kv == kvb.get(d.device_id, 0), d.device_id
    assert set(wbytes) <= {d.device_id for d in layout.devices}
    for i, dev in enumerate(layout.layer_device):
        assert where[f"blk.{i}.attn_q.weight"] == dev
    # 3. nothing better exists
    got = score_of(info, where)
    if layout.fits and optimal:
        budgets = {g.id: g.free - o.margin for g in inv.gpus}
        bf = BruteForce(info, o, budgets, COMPUTE_GPU)
        best = bf.best(fixed_k=fixed_k, fixed_m=fixed_m, orders=brute_orders)
        assert got == best, f"planner {got}, brute force {best}"
    return got


# ---- the cases the issue names ----------------------------------------------------------------------------------

def test_smollm2_one_6gb(smollm2_path):
    info = read_model_info(smollm2_path)
    inv = sim("one_6gb")
    lay = plan(info, inv, PlanOptions(num_ctx=8192, num_parallel=4), COMPUTE)
    assert lay.fits and lay.n_gpu_layers == info.n_layer + 1 and lay.gpu_devices == ("CUDA0",)
    assert check_layout(info, inv, lay) == (info.n_layer, info.n_layer)


def test_dense_8b_one_6gb_partial_offload():
    info = dense_8b()
    inv = sim("one_6gb")
    lay = plan(info, inv, PlanOptions(num_ctx=16384), COMPUTE)
    assert lay.fits
    k, full = check_layout(info, inv, lay)
    assert 0 < k < info.n_layer, "an 8B Q4_K_M with a 16k context cannot fit whole on 6 GB"
    cpu = lay.devices[0]
    assert cpu.device_id == "CPU" and cpu.layers, "the first layers stay on the CPU"
    assert max(cpu.layers) < min(lay.devices[1].layers), "GPU holds the LAST layers (back to front)"
    assert lay.devices[1].weights.get("output"), "the output layer goes with the last layer"
    assert lay.op_offload


@pytest.mark.parametrize("model", ["smollm2", "dense_8b"])
def test_two_24gb_fits_on_one(model, smollm2_path):
    info = read_model_info(smollm2_path) if model == "smollm2" else dense_8b()
    inv = sim("two_24gb")
    lay = plan(info, inv, PlanOptions(num_ctx=8192, num_parallel=2), COMPUTE)
    assert lay.fits and len(lay.gpu_devices) == 1, "fewest GPUs: the model fits on one"
    assert lay.n_gpu_layers == info.n_layer + 1
    assert check_layout(info, inv, lay) == (info.n_layer, info.n_layer)


def test_spread_evenly_when_one_gpu_is_not_enough():
    info = dense_8b()
    inv = inventory_from_dict({"devices": [{"id": "CUDA0", "total": "4 GiB"}, {"id": "CUDA1", "total": "4 GiB"}],
                               "host_ram_total": "32 GiB", "cpu_cores": 8})
    lay = plan(info, inv, PlanOptions(num_ctx=4096), COMPUTE)
    assert lay.fits and len(lay.gpu_devices) == 2 and lay.n_gpu_layers == info.n_layer + 1
    a, b = lay.tensor_split
    assert abs(a - b) <= 3, f"spread evenly, got {lay.tensor_split}"
    assert check_layout(info, inv, lay) == (info.n_layer, info.n_layer)


@pytest.mark.parametrize("inv_name", ["one_8gb", "one_16gb"])
def test_qwen3_30b_a3b_experts_on_cpu(inv_name):
    info = qwen3_30b_a3b()
    inv = sim(inv_name)
    lay = plan(info, inv, PlanOptions(num_ctx=8192), COMPUTE)
    assert lay.fits
    k, full = check_layout(info, inv, lay)
    assert k == info.n_layer, "every layer's attention fits on the GPU once experts go to the CPU"
    assert 0 < full < info.n_layer
    (pattern, dev), = [ov for ov in lay.tensor_buft_overrides if "exps" in ov[0]]
    assert dev == "CPU" and pattern.startswith(r"blk\.(0|1|")
    cpu = lay.devices[0]
    assert cpu.expert_layers == tuple(range(info.n_layer - full)), "experts of the FIRST layers go to the CPU"
    assert cpu.weights["experts"] > 0 and lay.devices[1].weights["experts"] > 0
    assert lay.op_offload


def test_op_offload_min_batch_follows_what_sits_on_the_cpu(smollm2_path):
    """GGML_OP_OFFLOAD_MIN_BATCH from the plan (docs/gpu-results.md, "op_offload"): 64 when a dense model's layers
    sit on the CPU (32-token batches lost there), llama.cpp's 32 when MoE experts do, unset when nothing is
    streamed (all on the GPU, or no GPU); the value and its reason are in the Layout's reasons and environment."""
    dense = plan(dense_8b(), sim("one_6gb"), PlanOptions(num_ctx=16384), COMPUTE)
    assert 0 < dense.n_gpu_layers <= dense_8b().n_layer and dense.op_offload_min_batch == 64
    assert dense.environment() == {"GGML_OP_OFFLOAD_MIN_BATCH": "64"}
    assert any("GGML_OP_OFFLOAD_MIN_BATCH=64" in r and "0.80-0.86x" in r for r in dense.reasons)
    moe = plan(qwen3_30b_a3b(), sim("one_8gb"), PlanOptions(num_ctx=8192), COMPUTE)
    assert moe.op_offload_min_batch == 32 and moe.environment() == {"GGML_OP_OFFLOAD_MIN_BATCH": "32"}
    assert any("GGML_OP_OFFLOAD_MIN_BATCH=32" in r for r in moe.reasons)
    whole = plan(read_model_info(smollm2_path), sim("one_6gb"), PlanOptions(num_ctx=8192), COMPUTE)
    assert whole.op_offload and whole.op_offload_min_batch == 0 and whole.environment() == {}
    cpu = plan(read_model_info(smollm2_path), inventory_from_dict({"devices": [], "host_ram_total": "16 GiB",
                                                                    "cpu_cores": 2}), PlanOptions(num_ctx=2048))
    assert cpu.op_offload_min_batch == 0 and cpu.environment() == {}
    assert Layout.from_dict(dense.to_dict()).op_offload_min_batch == 64


def test_logical_batch_follows_where_the_layers_are(smollm2_path):
    """num_batch left to the planner: 2048 (llama-server's) when every layer is on a GPU, 512 when weights sit on
    the CPU or the context is for embeddings; a value the user sets is kept. The chosen value is in the Layout's
    options, its n_batch (what the runner and the dry run load) and its reasons."""
    small = read_model_info(smollm2_path)
    whole = plan(small, sim("one_6gb"), PlanOptions(num_ctx=8192), COMPUTE)
    assert whole.n_gpu_layers == small.n_layer + 1 and not whole.tensor_buft_overrides
    assert whole.n_batch == whole.options.num_batch == 2048 and whole.n_ubatch == 512
    assert any(r.startswith("num_batch 2048: every layer on a GPU") for r in whole.reasons)
    assert Layout.from_dict(whole.to_dict()).n_batch == 2048

    partial = plan(dense_8b(), sim("one_6gb"), PlanOptions(num_ctx=16384), COMPUTE)
    assert 0 < partial.n_gpu_layers <= dense_8b().n_layer
    assert partial.n_batch == 512 and any(r.startswith("num_batch 512: weights on the CPU") for r in partial.reasons)
    moe = plan(qwen3_30b_a3b(), sim("one_8gb"), PlanOptions(num_ctx=8192), COMPUTE)
    assert moe.tensor_buft_overrides and moe.n_batch == 512
    cpu = plan(small, inventory_from_dict({"devices": [], "host_ram_total": "16 GiB", "cpu_cores": 2}),
               PlanOptions(num_ctx=2048))
    assert cpu.n_batch == 512
    emb = plan(small, sim("one_6gb"), PlanOptions(num_ctx=2048, embedding=True), COMPUTE)
    assert emb.n_gpu_layers == small.n_layer + 1 and emb.n_batch == 512
    assert any(r == "num_batch 512: an embedding context" for r in emb.reasons)

    asked = plan(small, sim("one_6gb"), PlanOptions(num_ctx=8192, num_batch=1024), COMPUTE)
    assert asked.n_batch == 1024 and not any(r.startswith("num_batch") for r in asked.reasons)
    many = plan(small, sim("one_6gb"), PlanOptions(num_ctx=1024, num_parallel=4, num_ubatch=4096), COMPUTE)
    assert many.n_batch == 2048 and many.n_ubatch == 2048     # the physical batch never exceeds the logical one


def test_op_offload_min_batch_rule():
    assert op_offload_min_batch(False, False) == (0, "") and op_offload_min_batch(False, True) == (0, "")
    assert op_offload_min_batch(True, False)[0] == OP_OFFLOAD_MIN_BATCH_DENSE == 64
    assert op_offload_min_batch(True, True)[0] == OP_OFFLOAD_MIN_BATCH_MOE == 32


def test_qwen3_more_memory_more_full_layers():
    info = qwen3_30b_a3b()
    s8 = score_of(info, realise(info, plan(info, sim("one_8gb"), PlanOptions(num_ctx=8192), COMPUTE))[0])
    s16 = score_of(info, realise(info, plan(info, sim("one_16gb"), PlanOptions(num_ctx=8192), COMPUTE))[0])
    assert s16[1] > s8[1] + 15


def test_too_big_is_refused_with_suggestions():
    info = huge_dense()
    inv = sim("small_box")
    lay = plan(info, inv, PlanOptions(num_ctx=4096), COMPUTE)
    assert not lay.fits
    assert any("system RAM" in r for r in lay.reasons)
    assert lay.suggestions and "smaller" in " ".join(lay.suggestions)
    # still a coherent layout: the GPU is within budget
    for d in lay.devices[1:]:
        assert d.total <= d.budget


def test_context_too_big_suggests_smaller_context():
    info = dense_8b()
    inv = sim("small_box")                           # 4 GB GPU, 6 GB RAM: weights fit, a 48k f16 context does not
    lay = plan(info, inv, PlanOptions(num_ctx=49152), COMPUTE)
    assert not lay.fits
    assert any(s.startswith("num_ctx=") for s in lay.suggestions), lay.suggestions
    assert any(s.startswith("kv_type=") for s in lay.suggestions), lay.suggestions


def _applied(o: PlanOptions, suggestion: str) -> PlanOptions:
    """The options a suggestion stands for: its `key=value, ...:` prefix applied to o."""
    head, sep, _ = suggestion.partition(": ")
    assert sep and "=" in head, f"suggestion does not start with the option changes: {suggestion!r}"
    conv = {"num_ctx": int, "num_parallel": int, "kv_type": str, "flash_attn": lambda v: v == "true",
            "num_gpu": lambda v: None if v == "auto" else int(v)}
    changes = dict(kv.split("=", 1) for kv in head.split(", "))
    return replace(o, **{k: conv[k](v) for k, v in changes.items()})


def _cpu_only(ram: str):
    return inventory_from_dict({"devices": [], "host_ram_total": ram, "cpu_cores": 2})


@pytest.mark.parametrize("ram,margin", [("712 MiB", 0), ("900 MiB", 512 * MiB), ("900 MiB", 0)])
def test_kv_bound_suggestions_are_concrete_and_each_fits(smollm2_path, ram, margin):
    """SmolLM2 at 8192 x 4 (720 MiB of f16 KV) on a small CPU-only machine: every suggestion is a concrete option
    change that the planner itself says fits; the context is the LARGEST multiple of 256 that fits; no "smaller
    model" while an option change fits."""
    info = read_model_info(smollm2_path)
    inv = _cpu_only(ram)
    o = PlanOptions(num_ctx=8192, num_parallel=4, margin=margin)
    lay = plan(info, inv, o)
    assert not lay.fits and lay.suggestions
    for s in lay.suggestions:
        assert plan(info, inv, _applied(o, s)).fits, s
    ctx = [s for s in lay.suggestions if s.startswith("num_ctx=")]
    assert len(ctx) == 1, lay.suggestions
    n = _applied(o, ctx[0]).num_ctx
    assert n % 256 == 0 and n < 8192
    assert not plan(info, inv, replace(o, num_ctx=n + 256)).fits, "the largest context that fits"
    assert any(s.startswith("kv_type=q8_0") for s in lay.suggestions), lay.suggestions
    assert not any("smaller model" in s for s in lay.suggestions)
    if margin == 0:        # here q8_0 holds the whole 8192 context, and fewer sequences fit too
        assert _applied(o, next(s for s in lay.suggestions if s.startswith("kv_type="))).num_ctx == 8192
        par = [s for s in lay.suggestions if s.startswith("num_parallel=")]
        p = _applied(o, par[0]).num_parallel
        assert 1 <= p < 4 and not plan(info, inv, replace(o, num_parallel=p + 1)).fits


def test_quantized_kv_suggestion_turns_flash_attention_on(smollm2_path):
    info = read_model_info(smollm2_path)
    inv = _cpu_only("712 MiB")
    o = PlanOptions(num_ctx=8192, num_parallel=4, flash_attn=False, margin=0)
    lay = plan(info, inv, o)
    kv = [s for s in lay.suggestions if s.startswith("kv_type=")]
    assert kv and kv[0].startswith("kv_type=q8_0, flash_attn=true"), lay.suggestions
    assert "flash attention" in kv[0]
    assert plan(info, inv, _applied(o, kv[0])).fits


def test_no_quantized_kv_suggestion_when_head_size_forbids_it():
    """llama.cpp refuses a q8_0/q4_0 KV cache when the head size is not a multiple of 32 (here 80)."""
    info = build_info(arch="llama", name="head-80", n_layer=8, n_embd=640, n_head=8, n_head_kv=8, head_dim=80,
                      n_ff=1024, n_vocab=4096, wtype="Q8_0", more_bits_type="Q8_0", out_type="Q8_0",
                      embd_type="Q8_0")
    inv = _cpu_only("2 GiB")
    o = PlanOptions(num_ctx=32768, num_parallel=4)
    lay = plan(info, inv, o)
    assert not lay.fits
    assert not any(s.startswith("kv_type=") for s in lay.suggestions), lay.suggestions
    assert any("multiples of 32" in s and "80/80" in s for s in lay.suggestions), lay.suggestions
    for s in lay.suggestions:
        if "=" in s.partition(": ")[0]:
            assert plan(info, inv, _applied(o, s)).fits, s


def test_nothing_fits_quotes_the_budget_after_the_margin(smollm2_path):
    """200 MiB of RAM with the 512 MiB margin leaves no budget: the text must say 0 MiB (not "0.2 GiB available",
    which reads as if the 0.1 GiB of weights should fit), that no model fits in that, and what the least
    demanding plan needs; with some budget but too little, a smaller model."""
    info = read_model_info(smollm2_path)
    inv = _cpu_only("200 MiB")
    lay = plan(info, inv, PlanOptions(num_ctx=8192, num_parallel=4))
    assert not lay.fits
    assert any("the budget is 0 MiB (200 MiB available minus a 512 MiB margin)" in r for r in lay.reasons), lay.reasons
    (s,) = lay.suggestions
    assert "no model fits" in s and "budget is 0 MiB" in s and "200 MiB available minus the 512 MiB margin" in s, s
    import re
    need = int(re.search(r"needs (\d+) MiB", s).group(1))
    assert need > 0
    assert not plan(info, inv, PlanOptions(num_ctx=256, num_parallel=1, kv_type="q4_0")).fits
    # 600 MiB available: an 88 MiB budget, below the 92 MiB of weights
    (s,) = plan(info, _cpu_only("600 MiB"), PlanOptions(num_ctx=8192, num_parallel=4)).suggestions
    assert s.startswith("use a smaller quantization or a smaller model") and "budget is 88 MiB" in s, s


# ---- the user's settings are kept --------------------------------------------------------------------------------

def test_num_gpu_respected():
    info = dense_8b()
    inv = sim("two_24gb")
    lay = plan(info, inv, PlanOptions(num_ctx=4096, num_gpu=10), COMPUTE)
    assert lay.n_gpu_layers == 10 and lay.fits
    assert check_layout(info, inv, lay, fixed_k=9)[0] == 9


def test_num_gpu_that_does_not_fit_is_kept_and_flagged():
    info = dense_8b()
    inv = sim("small_box")
    lay = plan(info, inv, PlanOptions(num_ctx=4096, num_gpu=33), COMPUTE)
    assert lay.n_gpu_layers == 33 and not lay.fits
    assert any("does not fit in GPU memory" in r for r in lay.reasons)
    assert any("num_gpu" in s for s in lay.suggestions)


def test_cpu_moe_respected():
    info = qwen3_30b_a3b()
    inv = sim("two_24gb")
    lay = plan(info, inv, PlanOptions(num_ctx=4096, cpu_moe=20), COMPUTE)
    assert lay.devices[0].expert_layers == tuple(range(20))
    assert lay.fits and lay.n_gpu_layers == info.n_layer + 1


def test_main_gpu_respected():
    info = dense_8b()
    inv = sim("two_24gb")
    lay = plan(info, inv, PlanOptions(num_ctx=4096, main_gpu=1), COMPUTE)
    assert lay.gpu_devices == ("CUDA1",)


def test_tensor_split_respected():
    info = dense_8b()
    inv = sim("two_24gb")
    lay = plan(info, inv, PlanOptions(num_ctx=4096, tensor_split=(1, 3)), COMPUTE)
    assert lay.gpu_devices == ("CUDA0", "CUDA1") and lay.fits
    where, wbytes, _ = realise(info, lay)
    n0 = sum(1 for i in range(info.n_layer) if where[f"blk.{i}.attn_q.weight"] == "CUDA0")
    n1 = sum(1 for i in range(info.n_layer) if where[f"blk.{i}.attn_q.weight"] == "CUDA1")
    assert (n0, n1) == (9, 23), "llama.cpp: positions p with p/33 < 1/4 (p = 0..8) go to the first GPU"
    check_layout(info, inv, lay, optimal=False)   # budgets and exact realisation (the split is the user's)


def test_a_cpu_only_plan_reads_its_weights_where_huge_pages_can_hold_them(smollm2_path):
    """Weights read into memory can sit in 2 MiB pages (CPU decoding ~1.15x as fast as from a mapped file's 4 KiB
    pages): a CPU-only plan reads them where the host offers huge pages and the plan fits its RAM, with no mapped
    slack and the reason in the Layout; without huge pages, with a GPU in the plan (its pinned host buffer would take
    the CPU's weights), or when the plan does not fit, llama.cpp maps the file as it does by default."""
    info = read_model_info(smollm2_path)
    host = {"devices": [], "host_ram_total": "16 GiB", "cpu_cores": 2, "cpu_features": ["AVX2", "REPACK"]}
    read = plan(info, inventory_from_dict({**host, "huge_pages": True}), PlanOptions(num_ctx=2048))
    mapped = plan(info, inventory_from_dict(host), PlanOptions(num_ctx=2048))
    assert read.fits and read.load_mode == "read" and read.devices[0].mapped == 0
    assert any("2 MiB pages" in r for r in read.reasons)
    assert mapped.load_mode == "mmap" and not any("2 MiB pages" in r for r in mapped.reasons)
    assert read.devices[0].weights == mapped.devices[0].weights       # the same tensors; only the backing differs
    assert Layout.from_dict(read.to_dict()).load_mode == "read"
    gpu = plan(info, replace(sim("one_6gb"), huge_pages=True), PlanOptions(num_ctx=2048), COMPUTE)
    assert gpu.gpu_devices and gpu.load_mode == "mmap"
    small = inventory_from_dict({**host, "host_ram_total": "600 MiB", "huge_pages": True})
    too_big = plan(info, small, PlanOptions(num_ctx=8192, num_parallel=4))
    assert not too_big.fits and too_big.load_mode == "mmap"
    # Ollama's use_mmap decides where the user set it
    asked = plan(info, inventory_from_dict({**host, "huge_pages": True}), PlanOptions(num_ctx=2048, use_mmap=True))
    assert asked.load_mode == "mmap" and asked.devices[0].mapped == mapped.devices[0].mapped
    assert any("use_mmap true" in r for r in asked.reasons)
    assert plan(info, inventory_from_dict(host), PlanOptions(num_ctx=2048, use_mmap=False)).load_mode == "read"


def test_layout_json_round_trip():
    info = qwen3_30b_a3b()
    lay = plan(info, sim("one_8gb"), PlanOptions(num_ctx=8192, tensor_split=None), COMPUTE)
    again = Layout.from_dict(json.loads(json.dumps(lay.to_dict())))
    assert again == lay


# ---- brute force over many small random cases --------------------------------------------------------------------

@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_brute_force_random_budgets(moe, tied):
    rng = random.Random(1234 + moe * 2 + tied)
    info = tiny(n_layer=5, moe=moe, tied=tied)
    total = info.weight_bytes
    checked = 0
    for trial in range(25):
        n_gpu = rng.choice([1, 1, 2])
        devs = [{"id": f"CUDA{i}", "total": int(rng.uniform(0.05, 0.9) * total) + COMPUTE_GPU + 64 * MiB}
                for i in range(n_gpu)]
        inv = inventory_from_dict({"devices": devs, "host_ram_total": "64 GiB", "cpu_cores": 4})
        o = PlanOptions(num_ctx=rng.choice([256, 1024, 4096]), num_parallel=rng.choice([1, 2]), margin=64 * MiB)
        lay = plan(info, inv, o, COMPUTE)
        check_layout(info, inv, lay)
        checked += 1
        # and with user-fixed settings
        if moe:
            m = rng.randrange(0, info.n_layer + 1)
            lay = plan(info, inv, replace(o, cpu_moe=m), COMPUTE)
            check_layout(info, inv, lay, fixed_m=m)
        k = rng.randrange(0, info.n_layer + 1)
        lay = plan(info, inv, replace(o, num_gpu=k + 1 if k else 0), COMPUTE)
        if k and lay.fits:
            check_layout(info, inv, lay, fixed_k=k)
    assert checked == 25


# ---- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("opts,name", [
    (PlanOptions(num_ctx=-1), "num_ctx"),
    (PlanOptions(num_ctx=0), "num_ctx"),
    (PlanOptions(num_parallel=0), "num_parallel"),
    (PlanOptions(num_gpu=40), "num_gpu"),
    (PlanOptions(num_gpu=-5), "num_gpu"),
    (PlanOptions(tensor_split=(1.0,)), "tensor_split"),
    (PlanOptions(tensor_split=(1.0, -1.0)), "tensor_split"),
    (PlanOptions(tensor_split=(0.0, 0.0)), "tensor_split"),
    (PlanOptions(main_gpu=2), "main_gpu"),
    (PlanOptions(cpu_moe=3), "cpu_moe"),
    (PlanOptions(kv_type="q3_k"), "kv_type"),
    (PlanOptions(kv_type="q8_0", flash_attn=False), "kv_type"),
])
def test_bad_options_name_the_option(opts, name):
    with pytest.raises(ValueError, match=name):
        plan(dense_8b(), sim("two_24gb"), opts)


def test_cpu_moe_above_layer_count():
    with pytest.raises(ValueError, match="cpu_moe"):
        plan(qwen3_30b_a3b(), sim("one_8gb"), PlanOptions(cpu_moe=49))


def test_cpu_only_inventory_puts_everything_on_cpu(smollm2_path):
    info = read_model_info(smollm2_path)
    inv = inventory_from_dict({"devices": [], "host_ram_total": "16 GiB", "cpu_cores": 2})
    lay = plan(info, inv, PlanOptions(num_ctx=2048, num_gpu=5))
    assert lay.fits and lay.n_gpu_layers == 0 and lay.gpu_devices == () and not lay.op_offload
    assert lay.devices[0].layers == tuple(range(info.n_layer))
    assert any("num_gpu=5 ignored" in r for r in lay.reasons)


def test_brute_force_sweep_with_user_settings():
    """300 random small cases: 1-3 GPUs, dense/MoE, tied or not, with and without num_gpu / cpu_moe set."""
    for seed in range(300):
        rng = random.Random(seed)
        moe, tied = rng.random() < 0.5, rng.random() < 0.5
        info = tiny(n_layer=rng.choice([3, 4, 5, 6]), moe=moe, tied=tied)
        devs = [{"id": f"CUDA{i}", "total": int(rng.uniform(0.02, 0.9) * info.weight_bytes) + COMPUTE_GPU + 64 * MiB}
                for i in range(rng.choice([1, 2, 2, 3]))]
        inv = inventory_from_dict({"devices": devs, "host_ram_total": "64 GiB", "cpu_cores": 4})
        o = PlanOptions(num_ctx=rng.choice([256, 1024, 4096, 16384]), num_parallel=rng.choice([1, 2, 4]),
                        margin=64 * MiB)
        fixed_m = fixed_k = None
        if moe and rng.random() < 0.3:
            fixed_m = rng.randrange(0, info.n_layer + 1)
            o = replace(o, cpu_moe=fixed_m)
        if rng.random() < 0.3:
            fixed_k = rng.randrange(1, info.n_layer + 1)
            o = replace(o, num_gpu=fixed_k + 1)
        lay = plan(info, inv, o, COMPUTE)
        check_layout(info, inv, lay, fixed_k=fixed_k, fixed_m=fixed_m)


def test_gpu_too_small_for_any_block_is_not_in_the_plan():
    """A GPU whose budget holds no block (nor its compute buffer): everything on the CPU, and the plan lists no GPU
    device. Before, it listed the GPU with a compute buffer llama.cpp never allocates (an empty `devices` list
    allocates nothing there): the predicted-vs-actual check on a GPU flagged it (docs/gpu-results.md)."""
    info = dense_8b()
    inv = inventory_from_dict({"devices": [{"id": "CUDA0", "total": "8 GiB", "free": "600 MiB", "backend": "CUDA"}],
                               "host_ram_total": "64 GiB", "cpu_cores": 8})
    lay = plan(info, inv, PlanOptions(num_ctx=2048))
    assert lay.n_gpu_layers == 0 and lay.gpu_devices == () and lay.fits, lay.reasons
    assert [d.device_id for d in lay.devices] == ["CPU"], lay.devices
