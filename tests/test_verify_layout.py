"""Verify after load: what the planner predicts per device and kind against what a real llama.cpp load allocates
(the non-zero `model/KV/compute/output buffer size` lines), for SmolLM2 and the synthetic dense and MoE models at
num_ctx 512/2048/8192, 1 and 4 parallel sequences, KV f16 and q8_0. One child process per model runs its whole
matrix (app.engine.verify)."""
from __future__ import annotations

import pytest

from app.engine.verify import KINDS, compare, format_table, run_verify

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


@pytest.mark.parametrize("model", ["smollm2", "dense", "moe"])
def test_predicted_matches_actual(model, request):
    path = request.getfixturevalue({"smollm2": "smollm2_path", "dense": "dense_hd32_gguf", "moe": "moe_gguf"}[model])
    rows = run_verify(str(path), COMBOS)
    print()
    print(format_table(model, rows))
    assert len(rows) == len(COMBOS)
    for r in rows:
        assert "error" not in r, r
        assert set(r["predicted"]) == set(r["actual"]), r
        for dev, c in compare(r).items():
            assert abs(c["total_err"]) <= 0.02, (model, r["num_ctx"], r["parallel"], r["kv"], dev, c)
            p, a = r["predicted"][dev], r["actual"][dev]
            for k in KINDS:
                assert abs(p[k] - a[k]) <= max(0.05 * a[k], ROUNDING), (model, r["num_ctx"], r["parallel"], r["kv"], dev, k, p[k], a[k])
    # the matrix really exercises the cache: q8_0 is smaller than f16, and KV grows with context x sequences
    kv = {(r["num_ctx"], r["parallel"], r["kv"]): r["actual"]["CPU"]["kv"] for r in rows}
    assert kv[(8192, 4, "q8_0")] < kv[(8192, 4, "f16")]
    assert abs(kv[(8192, 4, "f16")] - 64 * kv[(512, 1, "f16")]) <= 64 * ROUNDING


def test_quantized_kv_with_head_size_llama_refuses(dense_gguf):
    """head size 16 with a q8_0 cache: llama.cpp would refuse the context; the planner says so first."""
    from app.discovery.simulated import inventory_from_dict
    from app.engine.layout import plan
    from app.engine.layout_types import PlanOptions
    from app.engine.model_info import read_model_info

    inv = inventory_from_dict({"devices": [], "host_ram_total": "8 GiB", "cpu_cores": 2})
    with pytest.raises(ValueError, match="kv_type: q8_0 needs head sizes"):
        plan(read_model_info(dense_gguf), inv, PlanOptions(kv_type="q8_0"))
