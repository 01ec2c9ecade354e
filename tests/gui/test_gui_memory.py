"""The memory view's painted widgets (pixels, tooltips): bars per device, the layer strip, the plan's summary, the
prompt cache's segment; the numbers behind them are tests/unit/gui/test_memory_data.py's."""
from __future__ import annotations

import pytest

from app.gui.memory.memory_data import (
    COMPUTE, FREE, KV, MAPPED, OTHERS, OVER, SEGMENT_COLORS, WEIGHTS, device_colors, device_columns, layer_cells,
)
from memory_layouts import GiB, MiB, make_inventory, make_layout, repack_layout


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
