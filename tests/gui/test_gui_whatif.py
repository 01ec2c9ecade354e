"""The what-if planner without JSON: devices picked from a list (this machine, common GPUs, N of a kind, a custom
size), two plans side by side with a table of what differs; the JSON editor as the advanced option. Driven by
clicks and typing, planned by the real service (`POST /api/layout`, SmolLM2)."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QPushButton

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import SHORT, WAIT, choose, click, press, type_into


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return live_service(n_threads=2, num_parallel=1, num_ctx=2048)


@pytest.fixture
def whatif(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=1000)
    qtbot.addWidget(d.chat)
    d.open_chat()
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names() and d.state.inventory is not None, timeout=WAIT)
    press(qtbot, d.chat, Qt.Key_M, Qt.ControlModifier)
    mem = d.memory
    qtbot.waitUntil(mem.isVisible, timeout=SHORT)
    bar = mem.tabs.tabBar()
    QTest.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(1).center())
    w = mem.whatif
    assert mem.tabs.currentWidget() is w
    qtbot.waitUntil(lambda: w.model_combo.currentText() == MODEL, timeout=SHORT)
    yield w
    d.shutdown()


def add_gpus(qtbot, picker, label: str, count: int, custom_gib: float | None = None) -> None:
    choose(qtbot, picker.preset, label)
    if custom_gib is not None:
        assert picker.custom_size.isVisible()
        type_into(picker.custom_size, f"{custom_gib:g}")
    type_into(picker.count, str(count))
    click(qtbot, picker.panel.findChild(QPushButton, "addGpu"))


def plan(qtbot, w) -> None:
    done = []
    w.planned.connect(lambda: done.append(1))
    click(qtbot, w.plan_button)
    qtbot.waitUntil(lambda: bool(done), timeout=WAIT)


def columns(result) -> list[str]:
    return [c.device_id for c in result.view.bars.columns]


def test_a_described_machine_with_two_gpus_of_a_kind(qtbot, whatif):
    w = whatif
    picker = w.form_a.picker
    assert not picker.panel.isEnabled()                 # "this machine" first: nothing to describe
    click(qtbot, picker.described)
    assert picker.panel.isEnabled()
    click(qtbot, picker.panel.findChild(QPushButton, "resetGpus"))
    n = picker.gpu_list.count()
    add_gpus(qtbot, picker, "NVIDIA GeForce RTX 4090 (24 GB)", 2)
    add_gpus(qtbot, picker, "Custom size…", 1, custom_gib=6)
    assert [picker.gpu_list.item(i).text() for i in range(n, n + 3)] == [
        "NVIDIA GeForce RTX 4090 — 24 GiB", "NVIDIA GeForce RTX 4090 — 24 GiB", "Custom GPU (6 GiB) — 6 GiB"]
    item = picker.gpu_list.item(n + 2)                   # the custom one goes again
    QTest.mouseClick(picker.gpu_list.viewport(), Qt.LeftButton,
                     pos=picker.gpu_list.visualItemRect(item).center())
    click(qtbot, picker.panel.findChild(QPushButton, "removeGpu"))
    assert picker.gpu_list.count() == n + 2
    plan(qtbot, w)
    assert w.last_result["fits"] is True
    sent = w.last_result["inventory"]
    assert [d["name"] for d in sent["devices"]][-2:] == ["NVIDIA GeForce RTX 4090"] * 2
    assert all(d["total"] == 24 << 30 for d in sent["devices"][-2:])
    assert columns(w.result_a)[-2:] == [d["id"] for d in sent["devices"][-2:]]
    assert "30 of 30 layers on GPU" in w.view.summary.text()
    assert "RTX 4090" in w.result_a.title.text()


def test_two_plans_side_by_side_q8_0_kv_against_f16(qtbot, whatif):
    w = whatif
    assert not w.result_b.isVisible() and not w.tabs.isTabEnabled(1)
    click(qtbot, w.compare)
    assert w.tabs.isTabEnabled(1) and w.tabs.currentIndex() == 1
    choose(qtbot, w.form_b.kv_type, "q8_0")
    plan(qtbot, w)
    assert w.result_a.result is not None and w.result_b.result is not None, w.result_b.warning.text()
    assert w.result_b.isVisible() and w.diff.isVisible()
    rows = {w.diff.item(i, 0).text(): (w.diff.item(i, 1).text(), w.diff.item(i, 2).text())
            for i in range(w.diff.rowCount())}
    assert rows["KV cache type"] == ("f16/f16", "q8_0/q8_0")
    kv_a, kv_b = (float(x.split()[0]) for x in rows["KV cache"])
    assert kv_b < kv_a                                   # q8_0 takes about half the bytes of f16
    assert w.diff.item(list(rows).index("KV cache type"), 2).font().bold()      # what differs stands out
    assert rows["Fits"] == ("yes", "yes")


def test_one_gpu_against_two(qtbot, whatif):
    """Small GPUs (0.9 GiB, a 512 MiB margin kept free on each): SmolLM2 does not fit on one, it does on two."""
    w = whatif
    click(qtbot, w.form_a.picker.described)
    click(qtbot, w.form_a.picker.panel.findChild(QPushButton, "resetGpus"))
    add_gpus(qtbot, w.form_a.picker, "Custom size…", 1, custom_gib=0.9)
    click(qtbot, w.compare)
    click(qtbot, w.tabs.widget(1).findChild(QPushButton, "copyAToB"))
    add_gpus(qtbot, w.form_b.picker, "Custom size…", 1, custom_gib=0.9)
    assert w.form_b.picker.gpu_list.count() == w.form_a.picker.gpu_list.count() + 1
    plan(qtbot, w)
    a_ids, b_ids = columns(w.result_a), columns(w.result_b)
    assert len(b_ids) == len(a_ids) + 1
    rows = {w.diff.item(i, 0).text(): (w.diff.item(i, 1).text(), w.diff.item(i, 2).text())
            for i in range(w.diff.rowCount())}
    a_layers, b_layers = (int(x.split()[0]) for x in rows["Layers on GPU"])
    assert a_layers < b_layers, rows
    assert any(a == "—" and b != "—" for k, (a, b) in rows.items() if k.startswith("On ")), rows   # B's 2nd GPU


def test_the_json_editor_is_the_advanced_option(qtbot, whatif):
    w = whatif
    picker = w.form_a.picker
    assert not picker.json.isVisible()
    click(qtbot, picker.advanced)
    assert picker.json.isVisible() and not picker.panel.isEnabled()
    assert json.loads(picker.json.toPlainText())["simulated"] is True      # starts from the picks
    picker.json.setFocus()
    picker.json.selectAll()
    QTest.keyClicks(picker.json, "{not json")
    click(qtbot, w.plan_button)
    assert "not valid JSON" in w.warning.text() and w.warning.isVisible()
    picker.json.selectAll()
    QTest.keyClicks(picker.json, json.dumps({"devices": [], "host_ram_total": 1 << 30,
                                             "host_ram_available": 200 << 20, "cpu_cores": 2}))
    type_into(w.num_ctx, "8192")
    plan(qtbot, w)
    assert w.last_result["fits"] is False and "will not fit" in w.warning.text()
