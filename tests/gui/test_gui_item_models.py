"""The Qt item models the views bind to: the chat's conversations (over the history in SQLite) and its model
picker, the memory window's device and predicted-vs-actual tables; and a token's tooltip in the chat."""
from __future__ import annotations

from app.gui.chat.history import ChatHistory


def test_conversation_list_model_renames_through_set_data(qtbot):
    from PySide6.QtCore import Qt

    from app.gui.chat.chat_lists import ConversationListModel

    h = ChatHistory()
    h.create(title="first")
    m = ConversationListModel(h)
    idx = m.index(0)
    assert m.data(idx) == "first"
    assert m.flags(idx) & Qt.ItemIsEditable
    assert m.setData(idx, "second")
    assert h.conversations()[0].title == "second"
    assert not m.setData(idx, "")           # an empty title is refused, the old one kept
    assert m.data(idx) == "second"


def test_model_list_model_joins_tags_and_ps(qtbot):
    from app.gui.chat.chat_lists import ModelListModel
    from app.gui.common.item_models import StateRole

    m = ModelListModel()
    tags = [{"name": "a:latest", "size": 100 * 1024 * 1024}, {"name": "b:latest", "size": 2048}]
    ps = [{"name": "a:latest", "strata": {"state": "loaded"}}]
    m.set_models(tags, ps, {"b:latest": 0.5})
    assert m.rowCount() == 2
    assert m.data(m.index(0)) == "a:latest · 100.0 MiB · loaded"
    assert m.data(m.index(1)) == "b:latest · 2.0 KiB · loading 50%"
    assert m.data(m.index(1), StateRole) == "loading"


def test_token_tooltip_lists_alternatives():
    from app.gui.chat.chat_view import token_tooltip

    lp = {"token": " Paris", "logprob": -0.1,
          "top_logprobs": [{"token": " Paris", "logprob": -0.1}, {"token": " Lyon", "logprob": -2.5}]}
    html = token_tooltip(lp)
    assert "Paris" in html and "Lyon" in html and "90.5%" in html and "8.2%" in html


def test_device_and_comparison_table_models(qtbot):
    from PySide6.QtCore import Qt

    from app.gui.memory.memory_data import predicted_vs_actual
    from app.gui.memory.memory_tables import ComparisonTableModel, DeviceTableModel

    inv = {"devices": [{"id": "CUDA0", "name": "RTX", "kind": "gpu", "total": 8 << 30, "free": 6 << 30}],
           "host_ram_total": 32 << 30, "host_ram_available": 20 << 30}
    m = DeviceTableModel()
    m.set_inventory(inv)
    assert (m.rowCount(), m.columnCount()) == (2, 4)
    assert m.data(m.index(0, 0)) == "System RAM"
    assert m.data(m.index(1, 0)) == "CUDA0: RTX"
    assert m.data(m.index(1, 2)) == "8.0 GiB"
    assert m.data(m.index(1, 3), Qt.ToolTipRole) == f"{6 << 30:,} bytes"
    c = ComparisonTableModel()
    c.set_rows(predicted_vs_actual({"CUDA0": 1000}, {"CUDA0": {"model": 900, "kv": 200}}))
    assert [c.data(c.index(0, i)) for i in range(4)] == ["CUDA0", "1000 B", "1.1 KiB", "+100 B"]
    assert c.rowCount() == 1, "an older service's totals: no kinds to compare"
    # with the plan: each device's total, then its kinds as llama.cpp reports them (mapped file pages in "model")
    layout = {"devices": [{"device_id": "CPU", "weights": {"ffn": 800, "repack": 100}, "kv": 200, "compute": 50,
                           "output": 0, "mapped": 100}]}
    c.set_rows(predicted_vs_actual(None, {"CPU": {"model": 900, "repack": 100, "kv": 200, "compute": 60,
                                                  "output": 0}}, layout))
    table = [[c.data(c.index(r, i)) for i in range(4)] for r in range(c.rowCount())]
    assert table == [["CPU", "1.2 KiB", "1.2 KiB", "+10 B"], ["  model (file mapping)", "900 B", "900 B", "0 B"],
                     ["  repacked weights", "100 B", "100 B", "0 B"], ["  KV cache", "200 B", "200 B", "0 B"],
                     ["  compute graph", "50 B", "60 B", "+10 B"]]
    assert "100 B" in c.data(c.index(1, 1), Qt.ToolTipRole) and "reclaimable" in c.data(c.index(1, 1), Qt.ToolTipRole)
    assert c.data(c.index(0, 0), Qt.ForegroundRole) is None and c.data(c.index(1, 0), Qt.ForegroundRole) is not None
