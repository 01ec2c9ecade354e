"""validate(): plan options checked against a real GGUF's metadata (synthetic files from gguf_factory) and the
devices, before anything is computed: nonsense is a ValueError that starts with the option's name, and every
option a user may legitimately set passes."""
from __future__ import annotations

import pytest

from app.discovery.simulated import inventory_from_dict, load_simulated
from app.engine.layout.types import PlanOptions
from app.engine.planner.validate import validate
from repo_paths import SIM_DEVICES

MiB = 1024 ** 2


@pytest.fixture(scope="module")
def two_gpus():
    return load_simulated(SIM_DEVICES / "two_24gb.json")


@pytest.fixture(scope="module")
def cpu_only():
    return inventory_from_dict({"devices": [], "host_ram_total": "8 GiB", "cpu_cores": 2})


def _refused(info, inv, o: PlanOptions, name: str) -> str:
    with pytest.raises(ValueError) as e:
        validate(info, inv, o)
    msg = str(e.value)
    assert msg.startswith(f"{name}: "), msg     # the service turns this into a 400 naming the field
    return msg


def test_the_metadata_is_what_the_cases_below_assume(dense_info, moe_info):
    assert (dense_info.n_layer, dense_info.head_dim_k, dense_info.head_dim_v, dense_info.is_moe) == (3, 16, 16, False)
    assert (moe_info.n_layer, moe_info.head_dim_k, moe_info.is_moe) == (3, 32, True)


@pytest.mark.parametrize("o", [
    PlanOptions(),
    PlanOptions(num_ctx=1 << 24, num_parallel=256, num_batch=1, num_ubatch=1),
    PlanOptions(num_gpu=-1), PlanOptions(num_gpu=0), PlanOptions(num_gpu=4),     # n_layer + output layer
    PlanOptions(main_gpu=1), PlanOptions(tensor_split=(0, 1)), PlanOptions(tensor_split=(0.25, 0.75)),
    PlanOptions(margin=0), PlanOptions(flash_attn=False), PlanOptions(kv_type="f16", flash_attn=True),
])
def test_sensible_options_pass(dense_info, two_gpus, o):
    assert validate(dense_info, two_gpus, o) is None


@pytest.mark.parametrize("name", ["num_ctx", "num_parallel", "num_batch", "num_ubatch"])
@pytest.mark.parametrize("bad", [0, -3, True, 2.0, "4096", None])
def test_counts_must_be_positive_integers(dense_info, two_gpus, name, bad):
    if name == "num_batch" and bad is None:
        assert validate(dense_info, two_gpus, PlanOptions(num_batch=None)) is None     # the planner decides
        return
    msg = _refused(dense_info, two_gpus, PlanOptions(**{name: bad}), name)
    assert "positive integer" in msg and repr(bad) in msg


def test_upper_bounds(dense_info, two_gpus):
    assert "larger than any model" in _refused(dense_info, two_gpus, PlanOptions(num_ctx=(1 << 24) + 1), "num_ctx")
    assert "(256)" in _refused(dense_info, two_gpus, PlanOptions(num_parallel=257), "num_parallel")


def test_num_gpu_is_bounded_by_the_files_layer_count(dense_info, moe_info, two_gpus):
    msg = _refused(dense_info, two_gpus, PlanOptions(num_gpu=5), "num_gpu")
    assert "3 layers" in msg and "use -1 or 4" in msg
    _refused(dense_info, two_gpus, PlanOptions(num_gpu=-2), "num_gpu")
    _refused(dense_info, two_gpus, PlanOptions(num_gpu=True), "num_gpu")
    validate(moe_info, two_gpus, PlanOptions(num_gpu=4))


def test_main_gpu_must_exist(dense_info, two_gpus, cpu_only):
    assert "2 GPU(s)" in _refused(dense_info, two_gpus, PlanOptions(main_gpu=2), "main_gpu")
    _refused(dense_info, two_gpus, PlanOptions(main_gpu=-1), "main_gpu")
    _refused(dense_info, two_gpus, PlanOptions(main_gpu=False), "main_gpu")
    validate(dense_info, cpu_only, PlanOptions(main_gpu=0))          # llama.cpp's default, harmless without a GPU
    assert "0 GPU(s)" in _refused(dense_info, cpu_only, PlanOptions(main_gpu=1), "main_gpu")


@pytest.mark.parametrize("ts,why", [
    ((1.0,), "has 1 entries but there are 2"),
    ((1, 1, 1), "has 3 entries"),
    ((1.0, float("nan")), "non-negative numbers"),
    ((1.0, -0.5), "non-negative numbers"),
    ((True, 1), "non-negative numbers"),
    ((1, "2"), "non-negative numbers"),
    ((0, 0.0), "at least one entry"),
])
def test_tensor_split_has_one_weight_per_gpu(dense_info, two_gpus, ts, why):
    assert why in _refused(dense_info, two_gpus, PlanOptions(tensor_split=ts), "tensor_split")


def test_tensor_split_on_a_machine_without_gpus(dense_info, cpu_only):
    validate(dense_info, cpu_only, PlanOptions(tensor_split=()))
    assert "0 GPU(s)" in _refused(dense_info, cpu_only, PlanOptions(tensor_split=(1,)), "tensor_split")


def test_cpu_moe_needs_experts_and_a_layer_count(dense_info, moe_info, two_gpus):
    validate(moe_info, two_gpus, PlanOptions(cpu_moe=3))
    validate(dense_info, two_gpus, PlanOptions(cpu_moe=0))            # "none on the CPU" is fine on any model
    assert "not a mixture-of-experts" in _refused(dense_info, two_gpus, PlanOptions(cpu_moe=1), "cpu_moe")
    assert "between 0 and 3" in _refused(moe_info, two_gpus, PlanOptions(cpu_moe=4), "cpu_moe")
    _refused(moe_info, two_gpus, PlanOptions(cpu_moe=-1), "cpu_moe")


def test_kv_type_rules(dense_info, moe_info, two_gpus):
    assert "'bf16' is not one of f16, q8_0, q4_0" in _refused(moe_info, two_gpus, PlanOptions(kv_type="bf16"), "kv_type")
    msg = _refused(moe_info, two_gpus, PlanOptions(kv_type="q4_0", flash_attn=False), "kv_type")
    assert "flash attention" in msg
    validate(moe_info, two_gpus, PlanOptions(kv_type="q8_0"))          # head size 32: a q8_0 cache is possible
    validate(moe_info, two_gpus, PlanOptions(kv_type="q4_0", flash_attn=True))
    msg = _refused(dense_info, two_gpus, PlanOptions(kv_type="q8_0"), "kv_type")
    assert "multiples of 32" in msg and "16/16" in msg


@pytest.mark.parametrize("margin", [-1, 1.5, None])
def test_margin_is_a_byte_count(dense_info, two_gpus, margin):
    _refused(dense_info, two_gpus, PlanOptions(margin=margin), "margin")
