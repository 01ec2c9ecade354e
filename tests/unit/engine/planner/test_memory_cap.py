"""Strata's memory cap (STRATA_MAX_MEMORY / Settings: Inventory.memory_cap) on simulated machines: the planner
honours it as it honours free memory. A plan never uses more than the cap in all devices together, a model the cap
cannot hold does not fit (with the reason), the default context shrinks to what the cap leaves, and what the
loaded models hold comes off the cap (`subtract`). Pure planning (estimates), no load."""
from __future__ import annotations

from dataclasses import replace

import model_shapes
from app.discovery.inventory import subtract, with_cap, within_cap
from app.discovery.simulated import load_simulated
from app.engine.planner.context import LIMIT_MEMORY, context_for
from app.engine.planner.options import plan_options
from app.engine.planner.placement import place
from repo_paths import SIM_DEVICES

GiB = 1 << 30
MiB = 1 << 20


def _total(layout) -> int:
    return sum(d.total for d in layout.devices)


def _options(info, num_ctx=8192):
    return plan_options({}, num_ctx_default=num_ctx, num_parallel=1, n_ctx_train=info.context_length)


def test_the_cap_bounds_a_plan_on_every_machine():
    info = model_shapes.dense_8b()                       # ~4.9 GB of weights
    o = _options(info)
    for machine in ("small_box", "one_8gb", "one_16gb", "two_24gb"):
        inv = load_simulated(SIM_DEVICES / f"{machine}.json")
        free = place(info, inv, o, None)
        for cap in (4 * GiB, 6 * GiB, 12 * GiB):
            lay = place(info, with_cap(inv, cap), o, None)
            if lay.fits:
                assert _total(lay) <= cap, (machine, cap, _total(lay))
            elif free.fits:                             # only the cap is in the way, and the plan says so
                assert any("memory cap" in r for r in lay.reasons), (machine, cap, lay.reasons)
        assert not place(info, with_cap(inv, 4 * GiB), o, None).fits       # the weights alone are more


def test_no_cap_and_a_large_cap_plan_alike():
    info = model_shapes.dense_8b()
    inv = load_simulated(SIM_DEVICES / "one_16gb.json")
    o = _options(info)
    assert with_cap(inv, 0).memory_cap is None
    a, b = place(info, inv, o, None), place(info, with_cap(inv, 1 << 50), o, None)
    assert (a.fits, a.n_gpu_layers, _total(a)) == (b.fits, b.n_gpu_layers, _total(b))


def test_within_cap_offers_no_device_more_than_the_cap():
    inv = with_cap(load_simulated(SIM_DEVICES / "two_24gb.json"), 10 * GiB)
    capped = within_cap(inv)
    assert all(d.free <= 10 * GiB for d in capped.devices) and capped.host_ram_available <= 10 * GiB
    # the margin the planner keeps free comes off free memory, not off the cap: budgets are at most the cap
    capped = within_cap(inv, 512 * MiB)
    assert all(d.free - 512 * MiB <= 10 * GiB for d in capped.devices)
    assert capped.host_ram_available - 512 * MiB == 10 * GiB


def test_a_cap_below_the_margin_still_plans_a_small_model():
    info = model_shapes.tiny()
    inv = load_simulated(SIM_DEVICES / "small_box.json")
    o = plan_options({}, num_ctx_default=512, num_parallel=1, n_ctx_train=info.context_length)
    need = _total(place(info, inv, o, None))
    assert need < 512 * MiB                             # smaller than the planner's margin
    lay = place(info, with_cap(inv, need + MiB), o, None)
    assert lay.fits and _total(lay) <= need + MiB
    lay = place(info, with_cap(inv, need - MiB), o, None)
    assert not lay.fits and any("memory cap" in r for r in lay.reasons)


def test_loaded_models_come_off_the_cap():
    inv = with_cap(load_simulated(SIM_DEVICES / "one_16gb.json"), 12 * GiB)
    left = subtract(inv, {"CUDA0": 5 * GiB, "CPU": 1 * GiB})
    assert left.memory_cap == 6 * GiB
    assert subtract(inv, {"CPU": 20 * GiB}).memory_cap == 0
    assert subtract(load_simulated(SIM_DEVICES / "one_16gb.json"), {"CPU": GiB}).memory_cap is None
    info = model_shapes.dense_8b()
    assert place(info, inv, _options(info), None).fits
    assert not place(info, left, _options(info), None).fits          # 6 GiB left of the cap: not enough for it


def test_the_default_context_shrinks_to_what_the_cap_leaves():
    info = model_shapes.dense_8b()
    inv = load_simulated(SIM_DEVICES / "two_24gb.json")
    o = plan_options({}, num_ctx_default=131072, num_parallel=1, n_ctx_train=info.context_length)
    free = context_for(info, inv, o, 131072, None)
    capped_inv = with_cap(inv, 8 * GiB)
    capped = context_for(info, capped_inv, o, 131072, None)
    assert capped.num_ctx < free.num_ctx and capped.limit == LIMIT_MEMORY
    lay = place(info, capped_inv, replace(o, num_ctx=capped.num_ctx), None)
    assert lay.fits and _total(lay) <= 8 * GiB
