"""The numbers behind the memory view (app/gui/memory/memory_data.py, no Qt): each device's column stacked from
the inventory and a plan, a plan that does not fit, the layer cells, predicted vs actual by kind."""
from __future__ import annotations

from app.gui.memory.memory_data import (
    COMPUTE, FREE, KV, MAPPED, OTHERS, OVER, WEIGHTS, device_columns, format_bytes, layer_cells, predicted_kinds_of,
    predicted_vs_actual,
)
from memory_layouts import GiB, MiB, make_inventory, make_layout, repack_layout


def test_columns_for_a_plan_stack_ours_on_top_of_what_is_used():
    inv, lay = make_inventory().to_dict(), make_layout().to_dict()
    cols = device_columns(inv, lay, resident=False)
    assert [c.device_id for c in cols] == ["CPU", "CUDA0"]
    gpu = cols[1]
    assert gpu.get(WEIGHTS) == 3 * GiB
    assert gpu.get(KV) == 512 * MiB
    assert gpu.get(COMPUTE) == 256 * MiB
    assert gpu.get(OTHERS) == 2 * GiB                       # 8 total - 6 free, before our load
    assert gpu.get(FREE) == 6 * GiB - (3 * GiB + 768 * MiB)
    assert gpu.over == 0 and gpu.fits
    assert sum(s.bytes for s in gpu.segments) == gpu.total == gpu.capacity == 8 * GiB
    cpu = cols[0]
    assert cpu.get(COMPUTE) == 33 * MiB                      # compute + host output buffer
    assert cpu.get(WEIGHTS) == 600 * MiB


def test_resident_columns_do_not_count_our_model_twice():
    # After the load the inventory's free memory already excludes the model: others = used - ours.
    lay = make_layout().to_dict()
    ours = 3 * GiB + 768 * MiB
    inv = make_inventory(gpu_free=6 * GiB - ours).to_dict()
    gpu = device_columns(inv, lay, resident=True)[1]
    assert gpu.get(OTHERS) == 2 * GiB
    assert gpu.get(FREE) == 6 * GiB - ours
    assert sum(s.bytes for s in gpu.segments) == 8 * GiB


def test_a_plan_that_does_not_fit_shows_the_overflow():
    lay = make_layout(gpu_weights=7 * GiB, fits=False).to_dict()
    gpu = device_columns(make_inventory().to_dict(), lay)[1]
    assert not gpu.fits
    assert gpu.over == gpu.get(OVER) == 7 * GiB + 768 * MiB - 6 * GiB
    assert gpu.get(FREE) == 0
    assert gpu.total == 2 * GiB + 7 * GiB + 768 * MiB     # the bar grows to hold it; capacity stays 8 GiB
    assert gpu.capacity == 8 * GiB


def test_layer_cells_and_moe_split():
    dense = layer_cells(make_layout().to_dict())
    assert [c.device for c in dense] == ["CPU", "CPU"] + ["CUDA0"] * 6
    assert not any(c.split for c in dense)
    moe = layer_cells(make_layout(moe=True).to_dict())
    assert [c.split for c in moe] == [False, False] + [True] * 6
    assert moe[5].describe() == "Layer 5: attention on CUDA0, experts on CPU"


def test_predicted_vs_actual_rows():
    rows = predicted_vs_actual({"CPU": 100, "CUDA0": 1000},
                               {"CUDA0": {"model": 700, "kv": 200, "compute": 150, "output": 0}})
    assert [(r.device_id, r.predicted, r.actual, r.diff) for r in rows] == [
        ("CPU", 100, None, None), ("CUDA0", 1000, 1050, 50)]
    # no "predicted" field: taken from the layout's device plans
    lay = make_layout().to_dict()
    rows = predicted_vs_actual(None, None, lay)
    assert rows[1].predicted == 3 * GiB + 768 * MiB


def test_predicted_vs_actual_compares_like_with_like():
    """llama.cpp reports the CPU weights as CPU_Mapped (the mapping, mapped file pages included) + CPU_REPACK: the
    prediction is put in the same kinds, so a load that went exactly as planned shows no difference."""
    from app.engine.planner.verify import predicted_of

    lay = repack_layout()
    d = lay.to_dict()
    kinds = predicted_kinds_of(d)
    assert kinds == predicted_of(lay), "the GUI and verify / the service use one rule"
    cpu_total = lay.devices[0].total
    assert kinds["CPU"] == {"model": 550 * MiB + 40 * MiB, "repack": 50 * MiB, "kv": 64 * MiB,
                            "compute": 32 * MiB, "output": 1 * MiB}
    actual = {dev: dict(k) for dev, k in kinds.items()}         # llama.cpp's lines for a load that went as planned
    for predicted in (None, {"CPU": cpu_total, "CUDA0": lay.devices[1].total}):   # old field present or not
        cpu, gpu = predicted_vs_actual(predicted, actual, d)
        assert (cpu.device_id, cpu.predicted, cpu.actual, cpu.diff) == ("CPU", cpu_total + 40 * MiB,
                                                                       cpu_total + 40 * MiB, 0)
        assert cpu.mapped == 40 * MiB and "reclaimable" in cpu.tooltip(1)
        assert [(p.kind, p.predicted, p.diff) for p in cpu.parts] == [
            ("model", 590 * MiB, 0), ("repack", 50 * MiB, 0), ("kv", 64 * MiB, 0), ("compute", 32 * MiB, 0),
            ("output", 1 * MiB, 0)]
        assert cpu.parts[0].mapped == 40 * MiB and cpu.parts[1].mapped == 0
        assert gpu.diff == 0 and [p.kind for p in gpu.parts] == ["model", "kv", "compute"]
    # /api/ps "predicted_kinds" wins over the layout (the service computed it from the same plan)
    rows = predicted_vs_actual(None, actual, d, {"CPU": dict(kinds["CPU"], kv=60 * MiB)})
    assert rows[0].parts[2].diff == 4 * MiB and rows[0].diff == 4 * MiB
    # a kind llama.cpp reported that the plan did not predict still shows
    rows = predicted_vs_actual(None, {"CPU": dict(kinds["CPU"], repack=0)}, make_layout().to_dict())
    assert rows[0].parts[0].kind == "model" and all(p.kind != "repack" for p in rows[0].parts)


def test_mapped_pages_take_free_room_not_the_budget():
    inv = make_inventory().to_dict()
    plain = device_columns(inv, make_layout().to_dict())[0]
    col = device_columns(inv, repack_layout().to_dict())[0]
    assert col.mapped == 40 * MiB and col.get(MAPPED) == 40 * MiB
    assert col.get(FREE) == plain.get(FREE) - 40 * MiB, "carved out of the free part"
    assert col.get(WEIGHTS) == plain.get(WEIGHTS) and col.over == 0
    assert sum(sg.bytes for sg in col.segments) == col.capacity
    # a plan with no free room left: the mapped pages never push it over
    tight = device_columns(dict(inv, host_ram_available=100 * MiB), repack_layout().to_dict())[0]
    assert tight.get(MAPPED) == 0 and tight.mapped == 40 * MiB
    assert tight.over == device_columns(dict(inv, host_ram_available=100 * MiB), make_layout().to_dict())[0].over


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536 * MiB) == "1.5 GiB"
