"""suggestions(): what would fit when a plan does not, called directly on real GGUF metadata (synthetic files from
gguf_factory: a dense_info llama with head size 16, so no quantized KV cache, and a qwen3moe with head size 32) and
simulated machines. Each suggestion is checked against the planner itself: applied to the options, it validates and
fits, and the number it names is the largest that does."""
from __future__ import annotations

from dataclasses import replace

import pytest

from app.discovery.simulated import inventory_from_dict
from app.engine.layout.types import PlanOptions
from app.engine.planner.placement import place
from app.engine.planner.suggest import CTX_STEP, _largest, suggestions
from app.engine.planner.validate import validate

MiB = 1024 ** 2


def cpu(ram: str):
    return inventory_from_dict({"devices": [], "host_ram_total": ram, "cpu_cores": 2})


def fits(info, inv, o: PlanOptions) -> bool:
    validate(info, inv, o)
    return place(info, inv, o, None).fits


def applied(o: PlanOptions, suggestion: str) -> PlanOptions | None:
    """The options a suggestion stands for (its `key=value, ...:` prefix applied to o); None for a note."""
    head, sep, _ = suggestion.partition(": ")
    if not sep or "=" not in head or " " in head.replace(", ", ","):
        return None
    conv = {"num_ctx": int, "num_parallel": int, "kv_type": str, "flash_attn": lambda v: v == "true",
            "num_gpu": lambda v: None if v == "auto" else int(v)}
    changes = dict(kv.split("=", 1) for kv in head.split(", "))
    assert set(changes) <= set(conv), suggestion
    return replace(o, **{k: conv[k](v) for k, v in changes.items()})


def test_largest_is_a_binary_search_for_the_last_true():
    for edge in range(1, 40):
        assert _largest(1, 39, lambda x: x <= edge) == edge
    assert _largest(1, 39, lambda x: x <= 100) == 39
    assert _largest(5, 39, lambda x: x <= 4) is None          # not even the smallest
    assert _largest(3, 2, lambda x: True) is None              # an empty range


GRID = [(ram, o) for ram in ("150 MiB", "200 MiB", "300 MiB")
        for o in (PlanOptions(num_ctx=65536, num_parallel=4, margin=0),
                  PlanOptions(num_ctx=16384, num_parallel=64, margin=0),
                  PlanOptions(num_ctx=1 << 20, num_parallel=256, margin=0))]


@pytest.mark.parametrize("model", ["dense_info", "moe_info"])
@pytest.mark.parametrize("ram,o", GRID)
def test_every_change_offered_fits_and_is_the_largest(request, model, ram, o):
    info, inv = request.getfixturevalue(model), cpu(ram)
    assert not fits(info, inv, o)
    out = suggestions(info, inv, o, None)
    changes = [(s, applied(o, s)) for s in out if applied(o, s) is not None]
    assert changes, out
    for s, new in changes:
        assert fits(info, inv, new), s
        assert new.num_ctx % CTX_STEP == 0 and new.num_ctx <= o.num_ctx and new.num_parallel <= o.num_parallel, s
        if new.num_ctx != o.num_ctx:
            assert not fits(info, inv, replace(new, num_ctx=new.num_ctx + CTX_STEP)), f"not the largest: {s}"
        if new.num_parallel not in (o.num_parallel, 1):
            assert not fits(info, inv, replace(new, num_parallel=new.num_parallel + 1)), f"not the largest: {s}"
    # the changes come first, in the order a user would try them, and only then the notes
    kinds = [s.partition("=")[0] for s, _ in changes]
    order = ["num_ctx", "kv_type", "num_parallel"]
    assert [k for k in order if k in kinds] == [k for k in kinds if k in order], out
    assert [s for s in out if applied(o, s) is not None] == list(out[:len(changes)]), out


def test_the_head_size_note_replaces_the_kv_suggestion(dense_info, moe_info):
    o = PlanOptions(num_ctx=65536, num_parallel=4, margin=0)
    out = suggestions(dense_info, cpu("300 MiB"), o, None)
    assert not any(s.startswith("kv_type=") for s in out)
    assert out[-1] == ("a q8_0 KV cache is not possible: llama.cpp needs head sizes that are multiples of 32 "
                       "(this model: 16/16)")
    assert any(s.startswith("kv_type=q8_0") for s in suggestions(moe_info, cpu("300 MiB"), o, None))


def test_only_lighter_kv_types_are_offered(moe_info):
    inv = cpu("300 MiB")
    o8 = PlanOptions(num_ctx=65536, num_parallel=4, margin=0, kv_type="q8_0")
    kv = [s for s in suggestions(moe_info, inv, o8, None) if s.startswith("kv_type=")]
    assert kv and all(s.startswith("kv_type=q4_0") for s in kv), kv
    o4 = replace(o8, kv_type="q4_0", num_ctx=1 << 20)
    assert not fits(moe_info, inv, o4)
    assert not any(s.startswith("kv_type=") for s in suggestions(moe_info, inv, o4, None))


def test_a_quantized_cache_turns_flash_attention_on(moe_info):
    o = PlanOptions(num_ctx=65536, num_parallel=4, margin=0, flash_attn=False)
    (kv,) = [s for s in suggestions(moe_info, cpu("300 MiB"), o, None) if s.startswith("kv_type=")]
    assert kv.startswith("kv_type=q8_0, flash_attn=true") and "so it is turned on" in kv, kv
    assert fits(moe_info, cpu("300 MiB"), applied(o, kv))


def test_one_combination_when_no_single_change_fits(moe_info):
    inv, o = cpu("150 MiB"), PlanOptions(num_ctx=65536, num_parallel=4, margin=0)
    (s,) = suggestions(moe_info, inv, o, None)
    assert "nothing fits with one change" in s, s
    new = applied(o, s)
    assert new.num_parallel == 1 and fits(moe_info, inv, new)
    # and indeed no single change would have done
    assert not fits(moe_info, inv, replace(o, num_ctx=CTX_STEP))
    assert not fits(moe_info, inv, replace(o, num_parallel=1))
    assert not fits(moe_info, inv, replace(o, kv_type="q4_0"))


def test_nothing_fits_names_the_need_and_the_budget(dense_info):
    inv, o = cpu("100 MiB"), PlanOptions(num_ctx=65536, num_parallel=4, margin=0)
    out = suggestions(dense_info, inv, o, None)
    assert out[0].startswith("use a smaller quantization or a smaller model: even num_ctx=256 with one sequence"), out
    assert "the planner's budget is 100 MiB" in out[0] and "the weights alone 24 MiB" in out[0], out
    assert not fits(dense_info, inv, PlanOptions(num_ctx=CTX_STEP, num_parallel=1, margin=0))
    assert all(applied(o, s) is None for s in out)


def test_a_fixed_num_gpu_that_does_not_fit_gets_auto(dense_info):
    """All 4 layers forced onto a GPU too small for them: leaving num_gpu to the planner fits (fewer layers there)."""
    inv = inventory_from_dict({"devices": [{"id": "CUDA0", "total": "40 MiB", "free": "40 MiB", "backend": "CUDA"}],
                               "host_ram_total": "4 GiB", "cpu_cores": 2})
    o = PlanOptions(num_ctx=2048, num_gpu=4, margin=0)
    assert not fits(dense_info, inv, o)
    out = suggestions(dense_info, inv, o, None)
    auto = [s for s in out if s.startswith("num_gpu=auto: ")]
    assert auto, out
    assert fits(dense_info, inv, applied(o, auto[0]))
