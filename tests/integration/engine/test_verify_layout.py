"""Verify after load: what the planner predicts per device and kind against what a real llama.cpp load allocates
(the non-zero `model/KV/compute/output buffer size` lines), for SmolLM2 and the synthetic dense and MoE models at
num_ctx 512/2048/8192, 1 and 4 parallel sequences, KV f16 and q8_0; and for weight types the CPU backend repacks
on this CPU (Q4_0 MoE, Q4_K dense with a tied output: CPU_Mapped + CPU_REPACK lines) at a few option sets.
One child process per model runs its whole matrix (app.engine.planner.verify)."""
from __future__ import annotations

import pytest

from app.engine.planner.verify import KINDS, compare, format_table, run_verify

COMBOS = [(c, p, k) for c in (512, 2048, 8192) for p in (1, 4) for k in ("f16", "q8_0")]
# the log prints MiB with two decimals: a kind under ~1 MiB can be off by up to 0.005 MiB from rounding alone
ROUNDING = int(0.005 * 1024 * 1024) + 1


@pytest.fixture(scope="session")
def dense_hd32_gguf(synthetic_dir):
    """The dense synthetic llama with head size 32 (a q8_0 KV cache needs head sizes divisible by 32; the shared
    dense fixture has 16, which llama.cpp refuses for q8_0) and Q8_0 weights."""
    from gguf_factory import write_dense_llama

    return write_dense_llama(synthetic_dir / "dense-llama-hd32-q8_0.gguf", n_embd=128, n_head=4, n_head_kv=2,
                             n_ff=256, qtype="Q8_0")


@pytest.fixture(scope="session")
def moe_q4_0_gguf(synthetic_dir):
    """The lead's Q4_0 qwen3moe: every matrix but token_embd is repacked on AVX2 (q4_0_8x8), experts included."""
    from gguf_factory import write_moe_qwen3

    return write_moe_qwen3(synthetic_dir / "moe-qwen3-8L-32E-q4_0.gguf", n_layer=8, n_expert=32, n_expert_used=4,
                           n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff_exp=256, qtype="Q4_0")


@pytest.fixture(scope="session")
def dense_q4_k_tied_gguf(synthetic_dir):
    """A Q4_K dense llama without output.weight: the output layer on the CPU is a repacked copy of token_embd."""
    from gguf_factory import write_dense_llama

    return write_dense_llama(synthetic_dir / "dense-llama-q4_k-tied.gguf", n_layer=4, n_embd=256, n_head=4,
                             n_head_kv=2, n_ff=512, qtype="Q4_K", tie_output=True)


def _assert_within_bounds(model: str, rows: list[dict]) -> None:
    for r in rows:
        assert "error" not in r, r
        assert set(r["predicted"]) == set(r["actual"]), r
        for dev, c in compare(r).items():
            assert abs(c["total_err"]) <= 0.02, (model, r["num_ctx"], r["parallel"], r["kv"], dev, c)
            p, a = r["predicted"][dev], r["actual"][dev]
            for k in KINDS:
                assert abs(p[k] - a[k]) <= max(0.05 * a[k], ROUNDING), (model, r["num_ctx"], r["parallel"], r["kv"], dev, k, p[k], a[k])


@pytest.mark.parametrize("model", ["smollm2", "dense", "moe"])
def test_predicted_matches_actual(model, request):
    path = request.getfixturevalue({"smollm2": "smollm2_path", "dense": "dense_hd32_gguf", "moe": "moe_gguf"}[model])
    rows = run_verify(str(path), COMBOS)
    print()
    print(format_table(model, rows))
    assert len(rows) == len(COMBOS)
    _assert_within_bounds(model, rows)
    # the matrix really exercises the cache: q8_0 is smaller than f16, and KV grows with context x sequences
    kv = {(r["num_ctx"], r["parallel"], r["kv"]): r["actual"]["CPU"]["kv"] for r in rows}
    assert kv[(8192, 4, "q8_0")] < kv[(8192, 4, "f16")]
    assert abs(kv[(8192, 4, "f16")] - 64 * kv[(512, 1, "f16")]) <= 64 * ROUNDING


REPACK_COMBOS = [(512, 1, "f16"), (2048, 4, "q8_0"), (4096, 2, "f16")]


@pytest.mark.parametrize("model", ["moe_q4_0", "dense_q4_k_tied"])
def test_repacked_weights_predicted(model, request):
    """CPU_REPACK is real: on a CPU that repacks these types (AVX2, NEON...) the prediction has it as its own kind
    and llama.cpp's CPU_Mapped figure (which still spans the originals) as "model"; both within the bounds."""
    from app.discovery import discover

    path = request.getfixturevalue(model + "_gguf")
    features = discover().cpu_features
    if "REPACK" not in features or not any(f in features for f in ("AVX2", "NEON")):
        pytest.skip("this CPU/build does not repack Q4_0/Q4_K weights")
    rows = run_verify(str(path), REPACK_COMBOS)
    print()
    print(format_table(model, rows))
    assert len(rows) == len(REPACK_COMBOS)
    _assert_within_bounds(model, rows)
    for r in rows:
        cpu = r["actual"]["CPU"]
        assert cpu["repack"] > cpu["model"] * 0.5, cpu      # most weights are repacked: the case is exercised


def test_quantized_kv_with_head_size_llama_refuses(dense_gguf):

    """head size 16 with a q8_0 cache: llama.cpp would refuse the context; the planner says so first."""
    from app.discovery.simulated import inventory_from_dict
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions
    from app.engine.gguf.model_info import read_model_info

    inv = inventory_from_dict({"devices": [], "host_ram_total": "8 GiB", "cpu_cores": 2})
    with pytest.raises(ValueError, match="kv_type: q8_0 needs head sizes"):
        plan(read_model_info(dense_gguf), inv, PlanOptions(kv_type="q8_0"))


def test_dry_run_measures_and_caches(smollm2_path, strata_home):
    """plan_measured: a no_alloc dry run in a child gives the compute buffer; the second call hits the disk cache;
    GPU options with a simulated inventory do not disturb the CPU-only measurement."""
    from app.discovery.simulated import inventory_from_dict
    from app.engine.planner.dryrun import measure_compute, plan_measured
    from app.engine.layout.types import PlanOptions
    from app.engine.gguf.model_info import read_model_info

    info = read_model_info(smollm2_path)
    inv = inventory_from_dict({"devices": [{"id": "CUDA0", "total": "6 GiB"}, {"id": "CUDA1", "total": "6 GiB"}],
                               "host_ram_total": "16 GiB", "cpu_cores": 4})
    opts = PlanOptions(num_ctx=1024, num_parallel=4, tensor_split=(1, 1))
    c = measure_compute(info, inv, opts)
    assert c["CPU"] == round(98.25 * 1024 * 1024) and c["*"] == c["CPU"]     # llama.cpp's figure for this model
    cached = list((strata_home / "cache" / "dryrun").glob("*.json"))
    assert len(cached) == 1
    lay = plan_measured(info, inv, opts)
    assert lay.fits and lay.gpu_devices == ("CUDA0", "CUDA1")
    assert all(d.compute == c["CPU"] for d in lay.devices)
    assert any("measured" in r for r in lay.reasons)
    assert len(list((strata_home / "cache" / "dryrun").glob("*.json"))) == 1, "same measurement reused"
