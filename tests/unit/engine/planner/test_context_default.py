"""The default context from memory (planner.context.context_for) on simulated machines of several sizes: the
largest multiple of 256 up to the training context and the STRATA_NUM_CTX bound whose plan fits, that keeps every
weight the smallest context keeps on the GPUs, and the limit that decided it. Pure planning (estimates), no load."""
from __future__ import annotations

from dataclasses import replace

import pytest

import model_shapes
from app.discovery.simulated import inventory_from_dict, load_simulated
from app.engine.gguf.model_info import read_model_info
from app.engine.planner.context import (CTX_STEP, LIMIT_MEMORY, LIMIT_REQUEST, LIMIT_SETTING, LIMIT_TRAINING,
                                        context_for)
from app.engine.planner.options import plan_options
from app.engine.planner.placement import place
from repo_paths import SIM_DEVICES

SIM = SIM_DEVICES
MACHINES = ["small_box", "one_6gb", "one_8gb", "one_16gb", "two_24gb"]      # ascending GPU memory


def _gpu_bytes(layout) -> int:
    return sum(d.weights_total for d in layout.devices if d.device_id != "CPU")


def _options(info, cap, parallel=4):
    return plan_options({}, num_ctx_default=cap, num_parallel=parallel, n_ctx_train=info.context_length)


def _check_largest(info, inv, o, cap):
    """The choice fits, and one step more would not fit or would move weights off a GPU (or is past the top)."""
    c = context_for(info, inv, o, cap, None)
    top = min(cap, info.context_length)
    assert c.num_ctx % CTX_STEP == 0 and 2048 <= c.num_ctx <= top
    chosen = place(info, inv, replace(o, num_ctx=c.num_ctx), None)
    floor = place(info, inv, replace(o, num_ctx=2048), None)
    if not floor.fits:                                 # nothing fits: the floor, and the load's 507 says why
        assert (c.num_ctx, c.limit) == (2048, LIMIT_MEMORY) and "does not fit" in c.reason
        return c
    assert chosen.fits and _gpu_bytes(chosen) >= _gpu_bytes(floor)
    if c.num_ctx < top:
        assert c.limit == LIMIT_MEMORY and "memory" in c.reason
        more = place(info, inv, replace(o, num_ctx=c.num_ctx + CTX_STEP), None)
        assert not more.fits or _gpu_bytes(more) < _gpu_bytes(floor)
    else:
        assert c.limit in (LIMIT_TRAINING, LIMIT_SETTING)
    return c


def test_8b_on_machines_of_several_sizes_gets_what_memory_holds():
    info = model_shapes.dense_8b()                     # trained for 131072
    o = _options(info, 32768)
    got = {m: _check_largest(info, load_simulated(SIM / f"{m}.json"), o, 32768) for m in MACHINES}
    ctx = [got[m].num_ctx for m in MACHINES]
    assert ctx == sorted(ctx)                          # more GPU memory, never a smaller default
    assert got["small_box"].limit == LIMIT_MEMORY and got["small_box"].num_ctx == 2048   # layers would leave the GPU
    assert got["one_16gb"].limit == LIMIT_MEMORY and 4096 < got["one_16gb"].num_ctx < 32768
    assert got["two_24gb"].num_ctx == 32768 and got["two_24gb"].limit == LIMIT_SETTING


def test_fewer_sequences_leave_room_for_a_longer_context():
    info = model_shapes.dense_8b()
    inv = load_simulated(SIM / "one_16gb.json")
    four = _check_largest(info, inv, _options(info, 131072, 4), 131072)
    one = _check_largest(info, inv, _options(info, 131072, 1), 131072)
    assert one.num_ctx > four.num_ctx


def test_smollm2_gets_its_training_context_or_the_bound(smollm2_path):
    info = read_model_info(smollm2_path)               # trained for 8192
    for m in MACHINES:
        inv = load_simulated(SIM / f"{m}.json")
        c = _check_largest(info, inv, _options(info, 32768), 32768)
        assert (c.num_ctx, c.limit) == (8192, LIMIT_TRAINING)
        c = _check_largest(info, inv, _options(info, 4096), 4096)
        assert (c.num_ctx, c.limit) == (4096, LIMIT_SETTING) and "STRATA_NUM_CTX" in c.reason
    tiny = inventory_from_dict({"devices": [], "host_ram_total": "2 GiB", "host_ram_available": "1 GiB",
                                "cpu_cores": 2})
    c = _check_largest(info, tiny, _options(info, 32768), 32768)
    assert c.limit == LIMIT_MEMORY and 2048 <= c.num_ctx < 8192


def test_an_asked_context_is_the_request_s(smollm2_path):
    info = read_model_info(smollm2_path)
    inv = load_simulated(SIM / "one_6gb.json")
    o = plan_options({"num_ctx": 1024}, num_ctx_default=32768, num_parallel=4, n_ctx_train=info.context_length)
    c = context_for(info, inv, o, 32768, 1024)
    assert (c.num_ctx, c.limit) == (1024, LIMIT_REQUEST)
    o = plan_options({"num_ctx": 100000}, num_ctx_default=32768, num_parallel=4, n_ctx_train=info.context_length)
    c = context_for(info, inv, o, 32768, 100000)
    assert (c.num_ctx, c.limit) == (8192, LIMIT_TRAINING) and "clamped" in c.reason


@pytest.mark.parametrize("machine", MACHINES)
def test_moe_default_keeps_the_gpu_share(machine):
    info = model_shapes.qwen3_30b_a3b()                # trained for 40960
    _check_largest(info, load_simulated(SIM / f"{machine}.json"), _options(info, 32768), 32768)


def test_memory_view_says_what_decided_the_context():
    from app.gui.memory.memory_data import layout_summary

    lay = {"n_ctx": 32768, "n_parallel": 4, "options": {"num_ctx": 8192}, "type_k": "f16", "layer_device": ["CPU"],
           "context": {"num_ctx": 8192, "limit": "training context",
                       "reason": "num_ctx 8192: the model's training context; fits the free memory with 4 sequences"}}
    assert layout_summary(lay).endswith("Context set by training context: num_ctx 8192: the model's training "
                                        "context; fits the free memory with 4 sequences.")
