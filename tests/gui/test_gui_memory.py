"""Memory visualizer: the numbers behind the picture (pure) and the painted widgets (pixels, tooltips)."""
from __future__ import annotations

import pytest

from app.discovery.inventory import Device, Inventory
from app.engine.layout.types import DevicePlan, Layout, PlanOptions
from app.gui.memory.memory_data import (
    COMPUTE, FREE, KV, MAPPED, OTHERS, OVER, SEGMENT_COLORS, WEIGHTS, device_colors, device_columns, format_bytes,
    layer_cells, predicted_kinds_of, predicted_vs_actual,
)

GiB = 1 << 30
MiB = 1 << 20


def make_inventory(gpu_total=8 * GiB, gpu_free=6 * GiB) -> Inventory:
    return Inventory(
        devices=(Device("CUDA0", "RTX Test", "gpu", "SIM", gpu_total, gpu_free),),
        host_ram_total=32 * GiB, host_ram_available=20 * GiB, cpu_cores=8, cpu_name="Test CPU", simulated=True)


def make_layout(n_layers=8, on_gpu=6, moe=False, fits=True, gpu_weights=3 * GiB, kv=512 * MiB) -> Layout:
    """Blocks 0..n-on_gpu-1 on the CPU, the rest on CUDA0; with moe, the GPU layers' experts stay on the CPU."""
    layer_device = tuple("CPU" if i < n_layers - on_gpu else "CUDA0" for i in range(n_layers))
    expert_device = tuple("CPU" for _ in range(n_layers)) if moe else tuple("" for _ in range(n_layers))
    cpu = DevicePlan("CPU", "CPU", tuple(i for i, d in enumerate(layer_device) if d == "CPU"),
                     tuple(range(n_layers)) if moe else (), {"attention": 200 * MiB, "ffn": 300 * MiB,
                                                              "token_embd": 100 * MiB}, kv=64 * MiB, compute=32 * MiB,
                     output=1 * MiB)
    gpu = DevicePlan("CUDA0", "RTX Test", tuple(i for i, d in enumerate(layer_device) if d == "CUDA0"), (),
                     {"attention": gpu_weights // 2, "ffn": gpu_weights - gpu_weights // 2}, kv=kv,
                     compute=256 * MiB)
    return Layout(model_path="/m.gguf", options=PlanOptions(num_ctx=4096), devices=(cpu, gpu),
                  layer_device=layer_device, expert_device=expert_device, n_gpu_layers=on_gpu, split_mode=1,
                  main_gpu=0, tensor_split=(1.0,), gpu_devices=("CUDA0",), tensor_buft_overrides=(), op_offload=True,
                  n_ctx=4096, n_parallel=1, n_batch=512, n_ubatch=512, type_k="f16", type_v="f16", flash_attn=None,
                  fits=fits, suggestions=() if fits else ("use num_ctx 2048",))


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


def repack_layout(mapped=40 * MiB):
    """make_layout with a CPU that repacks 50 MiB of its weights and maps `mapped` bytes of file pages beyond
    what it reads from the mapping (as the planner writes them: DevicePlan.weights["repack"], DevicePlan.mapped)."""
    from dataclasses import replace

    lay = make_layout()
    cpu = lay.devices[0]
    w = dict(cpu.weights, ffn=250 * MiB, repack=50 * MiB)
    return replace(lay, devices=(replace(cpu, weights=w, mapped=mapped), *lay.devices[1:]))


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


# widgets --------------------------------------------------------------------------------------------------------

def _color_at(widget, x, y):
    img = widget.grab().toImage()
    dpr = img.devicePixelRatio()
    return img.pixelColor(int(x * dpr), int(y * dpr)).name()


def test_bars_paint_each_segment_in_its_colour(qtbot):
    from app.gui.memory.memory_view import MemoryBars

    bars = MemoryBars()
    qtbot.addWidget(bars)
    bars.resize(400, 360)
    bars.set_columns(device_columns(make_inventory().to_dict(), make_layout().to_dict()))
    rects = {kind: r for kind, _b, r in bars.segment_rects(1)}
    assert set(rects) == {WEIGHTS, KV, COMPUTE, OTHERS, FREE}
    # stacking order bottom to top: weights under KV under compute under others under free
    assert rects[WEIGHTS].bottom() > rects[KV].bottom() > rects[COMPUTE].bottom() > rects[OTHERS].bottom()
    for kind in (WEIGHTS, KV, OTHERS, FREE):
        c = rects[kind].center()
        assert _color_at(bars, c.x(), c.y()) == SEGMENT_COLORS[kind], kind
    # heights are proportional: weights are 3/8 of the 8 GiB bar
    bar = bars.column_rect(1)
    assert rects[WEIGHTS].height() == pytest.approx(bar.height() * 3 / 8, rel=1e-6)
    # tooltips carry exact bytes
    hit = bars.hit(rects[KV].center().x(), rects[KV].center().y())
    assert hit == (1, KV, 512 * MiB)
    assert "536,870,912 bytes" in bars.tooltip_text(*hit)


def test_bars_show_mapped_pages_as_a_light_segment(qtbot):
    from app.gui.memory.memory_view import MemoryBars

    bars = MemoryBars()
    qtbot.addWidget(bars)
    bars.resize(400, 360)
    bars.set_columns(device_columns(make_inventory().to_dict(), repack_layout(mapped=4 * GiB).to_dict()))
    rects = {kind: r for kind, _b, r in bars.segment_rects(0)}
    assert rects[WEIGHTS].bottom() > rects[MAPPED].bottom() > rects[KV].bottom(), "next to the weights"
    c = rects[MAPPED].center()
    assert _color_at(bars, c.x(), c.y()) == SEGMENT_COLORS[MAPPED]
    hit = bars.hit(c.x(), c.y())
    assert hit == (0, MAPPED, 4 * GiB)
    assert "reclaimable" in bars.tooltip_text(*hit)
    w = rects[WEIGHTS].center()
    assert "mapped file pages" in bars.tooltip_text(*bars.hit(w.x(), w.y()))


def test_layer_strip_colours_layers_by_device_and_splits_moe(qtbot):
    from app.gui.memory.memory_view import LayerStrip

    strip = LayerStrip()
    qtbot.addWidget(strip)
    strip.resize(400, 40)
    lay = make_layout(moe=True).to_dict()
    colors = device_colors(["CPU", "CUDA0"])
    strip.set_cells(layer_cells(lay), colors)
    cpu_cell, gpu_cell = strip.cell_rect(0), strip.cell_rect(7)
    assert _color_at(strip, cpu_cell.center().x(), cpu_cell.center().y() - 5) == colors["CPU"]
    # split MoE cell: attention device on top, experts' device at the bottom
    assert _color_at(strip, gpu_cell.center().x(), gpu_cell.top() + 3) == colors["CUDA0"]
    assert _color_at(strip, gpu_cell.center().x(), gpu_cell.bottom() - 3) == colors["CPU"]
    assert strip.cell_at(gpu_cell.center().x()).index == 7


def test_bars_mark_what_lies_above_capacity(qtbot):
    from app.gui.memory.memory_view import MemoryBars

    bars = MemoryBars()
    qtbot.addWidget(bars)
    bars.resize(400, 360)
    bars.set_columns(device_columns(make_inventory().to_dict(), make_layout(gpu_weights=7 * GiB).to_dict()))
    over = bars.over_rect(1)
    assert over is not None and bars.over_rect(0) is None
    assert over.top() == bars.column_rect(1).top()
    assert over.height() == pytest.approx(bars.column_rect(1).height() * bars.columns[1].over / bars.columns[1].total)
    kind = bars.hit(over.center().x(), over.center().y())[1]
    assert kind == OVER
    # hatched red over whatever segment lies there: the pixel is reddish
    c = bars.grab().toImage().pixelColor(int(over.center().x()), int(over.center().y() + 2))
    assert c.red() > c.blue()


def test_layout_view_summary_says_when_it_will_not_fit(qtbot):
    from app.gui.memory.memory_view import LayoutView

    view = LayoutView()
    qtbot.addWidget(view)
    view.show_layout(make_inventory().to_dict(), make_layout(fits=False, gpu_weights=7 * GiB).to_dict())
    assert view.summary.text().startswith("Will not fit.")
    assert not view.bars.columns[1].fits
    assert len(view.strip.cells) == 8


def test_zoom_shows_only_the_model_on_one_scale(qtbot):
    from app.gui.memory.memory_view import MemoryBars

    bars = MemoryBars()
    qtbot.addWidget(bars)
    bars.resize(400, 360)
    bars.set_columns(device_columns(make_inventory().to_dict(), make_layout().to_dict()))
    bars.set_zoom(True)
    kinds = [k for k, _b, _r in bars.segment_rects(1)]
    assert kinds == [WEIGHTS, KV, COMPUTE]
    # the GPU holds the bigger footprint: it fills its bar exactly; the CPU's is drawn on the same scale
    gpu_h = sum(r.height() for _k, _b, r in bars.segment_rects(1))
    cpu_h = sum(r.height() for _k, _b, r in bars.segment_rects(0))
    assert gpu_h == pytest.approx(bars.column_rect(1).height())
    assert cpu_h == pytest.approx(gpu_h * (697 * MiB) / (3 * GiB + 768 * MiB), rel=1e-6)


def test_the_prompt_cache_is_its_own_kind_on_the_cpu_column(qtbot):
    """/api/ps "strata.prompt_cache.bytes": host RAM the loaded model's runner holds for evicted prompts."""
    from app.gui.memory.memory_data import PROMPT_CACHE, SEGMENT_LABELS
    from app.gui.memory.memory_view import MemoryBars

    inv, lay = make_inventory().to_dict(), make_layout().to_dict()
    plain = device_columns(inv, lay, resident=True)
    cached = device_columns(inv, lay, resident=True, prompt_cache=300 * MiB)
    cpu, gpu = cached
    assert cpu.get(PROMPT_CACHE) == 300 * MiB and gpu.get(PROMPT_CACHE) == 0
    assert cpu.get(OTHERS) == plain[0].get(OTHERS) - 300 * MiB      # it was counted as others' memory before
    assert sum(s.bytes for s in cpu.segments) == cpu.capacity
    assert SEGMENT_LABELS[PROMPT_CACHE] == "Prompt cache"
    bars = MemoryBars()
    qtbot.addWidget(bars)
    bars.resize(400, 400)
    bars.set_columns(cached)
    bars.set_zoom(True)
    assert PROMPT_CACHE in bars.visible_kinds()
    assert bars.scale_of(0) >= cpu.get(PROMPT_CACHE) + cpu.get(WEIGHTS)
    [(kind, b, rect)] = [x for x in bars.segment_rects(0) if x[0] == PROMPT_CACHE]
    assert b == 300 * MiB and rect.height() > 0
    assert "prompt cache" in bars.tooltip_text(0, PROMPT_CACHE, b)


def test_prompt_cache_line_in_the_live_status():
    from app.gui.memory.memory_window import prompt_cache_text

    assert prompt_cache_text({"bytes": 12 * MiB, "limit": 400 * MiB, "entries": 3}) == \
        ", prompt cache 12.0 MiB of 400.0 MiB (3 prompts)"
    assert prompt_cache_text({"bytes": 0, "limit": 0, "entries": 0}) == ", prompt cache off"
    assert prompt_cache_text({}) == ""
    assert prompt_cache_text({"bytes": 0, "limit": 0, "entries": 0, "checkpoint_bytes": 5 * MiB,
                              "checkpoint_limit": 64 * MiB, "checkpoints": 9}) == \
        ", prompt cache off, checkpoints 5.0 MiB of 64.0 MiB (9)"
    assert prompt_cache_text({"bytes": 0, "limit": 0, "entries": 0,                 # the prompt cache on disk
                              "disk": {"bytes": 380 * MiB, "entries": 2, "limit": 4096 * MiB}}) == \
        ", prompt cache off, on disk 380.0 MiB (2 prompts)"


def test_summary_counts_rpc_workers_apart_from_local_gpus(qtbot):
    """Blocks on a `strata worker` cross the network: the memory view and the what-if table say how many."""
    from app.gui.memory.memory_view import LayoutView
    from app.gui.memory.whatif_data import plan_facts

    lay = {"n_ctx": 8192, "n_parallel": 4, "type_k": "f16", "type_v": "f16", "options": {"num_ctx": 2048},
           "layer_device": ["CPU", "CUDA0", "CUDA0", "RPC0[10.0.0.2:50052]", "RPC1[10.0.0.3:50052]"], "devices": []}
    assert LayoutView.describe(lay).endswith("KV f16, 2 of 5 layers on GPU, 2 on RPC workers.")
    assert plan_facts({"layout": lay})["Layers on GPU"] == "2 of 5 (+2 on RPC workers)"
    local = dict(lay, layer_device=["CPU", "CUDA0"])
    assert LayoutView.describe(local).endswith("1 of 2 layers on GPU.")
    assert plan_facts({"layout": local})["Layers on GPU"] == "1 of 2"
