"""The model manager window, driven as a person does: buttons clicked, rows clicked, dialogs answered by typing,
a .gguf dropped on the window. Against the real service (its own store) and real GGUF files."""
from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request

import pytest
from PySide6.QtCore import QMimeData, QPoint, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QFileDialog, QLineEdit, QMessageBox

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import SHORT, WAIT, answer_box, answer_text, click, click_menu, dialog_of, open_menu_bar


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return live_service(n_threads=2, num_parallel=1, num_ctx=1024, keep_alive="10m")


def api(url, path, body=None, method=None):
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read() or b"{}")


def names(url) -> list[str]:
    return [m["name"] for m in api(url, "/api/tags")["models"]]


def deletes_answered(url) -> int:
    """How many /api/delete requests the service has answered (its /metrics), whatever their status."""
    with urllib.request.urlopen(url + "/metrics", timeout=300) as r:
        lines = r.read().decode().splitlines()
    return sum(int(float(ln.rsplit(" ", 1)[1])) for ln in lines
               if ln.startswith("strata_http_requests_total{") and 'route="/api/delete"' in ln)


@pytest.fixture
def manager(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names(), timeout=WAIT)
    m = d.open_models()
    m.desk = d
    yield m
    d.shutdown()


def row_texts(m, name) -> list[str]:
    t = m.table_model
    r = t.row_of(name)
    assert r >= 0, f"{name} not listed: {[x.name for x in t.rows]}"
    return [t.data(t.index(r, c)) for c in range(t.columnCount())]


def click_row(qtbot, m, name) -> None:
    qtbot.waitUntil(lambda: m.table_model.row_of(name) >= 0, timeout=WAIT)
    idx = m.table_model.index(m.table_model.row_of(name), 0)
    m.table.scrollTo(idx)
    QTest.mouseClick(m.table.viewport(), Qt.LeftButton, pos=m.table.visualRect(idx).center())
    qtbot.waitUntil(lambda: m.selected_name() == name, timeout=SHORT)


def import_by_dialog(qtbot, m, path) -> None:
    click(qtbot, m.buttons["import"])
    dlg = dialog_of(qtbot, m, "importDialog")
    assert isinstance(dlg, QFileDialog)
    # the whole path in the file name box (set, not typed key by key: the box's completer pops up while typing
    # and, on a loaded machine, swallows the click on Open), then Open
    dlg.findChild(QLineEdit, "fileNameEdit").setText(str(path))
    click(qtbot, dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Open))
    qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=SHORT)


def test_every_model_is_listed_with_its_facts(qtbot, manager, tmp_path):
    m = manager
    qtbot.waitUntil(lambda: MODEL in m.shown, timeout=WAIT)        # capabilities come from /api/show
    name, size, quant, arch, params, caps, source, state = row_texts(m, MODEL)[:8]
    assert (name, quant, arch, params, source) == (MODEL, "Q4_1", "llama", "134.52M", "Built-in")
    assert size.endswith("MiB") and "completion" in caps and state in ("not loaded", "loaded")
    click_row(qtbot, m, MODEL)
    assert "built-in model" in m.detail.text() and "parameters" in m.detail.text()
    assert m.buttons["delete"].toolTip().startswith(f"{MODEL} is the built-in model")


def test_models_from_other_apps_are_listed_read_only_and_say_why(qtbot, live_service, service, tmp_path):
    """An LM Studio model in the (sandboxed) home: listed with its source; rename and delete explain why not;
    copy gives it a name of one's own."""
    from app.gui.desktop import Desktop
    from app.service.store.model_store import ModelStore
    from gguf_factory import write_dense_llama

    lm = tmp_path / "user-home" / ".lmstudio" / "models" / "pub" / "repo"
    lm.mkdir(parents=True)
    write_dense_llama(lm / "tiny-lm.gguf")
    home = tmp_path / "svc"
    svc = live_service(n_threads=1, home=home, store=lambda: ModelStore(db_path=home / "strata.db",
                                                                         models_dir=home / "models",
                                                                         discover_external=True))
    d = Desktop(svc.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    try:
        m = d.open_models()
        qtbot.waitUntil(lambda: m.table_model.row_of("tiny-lm:latest") >= 0, timeout=WAIT)
        assert row_texts(m, "tiny-lm:latest")[6] == "LM Studio (read-only)"
        click_row(qtbot, m, "tiny-lm:latest")
        for button in ("delete", "rename"):
            click(qtbot, m.buttons[button])
            box = dialog_of(qtbot, m, "explainDialog")
            assert "belongs to LM Studio" in box.text() and "Remove it with LM Studio" in box.text()
            answer_box(qtbot, box, QMessageBox.Ok)
        assert (lm / "tiny-lm.gguf").is_file()
        click(qtbot, m.buttons["copy"])
        answer_text(qtbot, dialog_of(qtbot, m, "copyDialog"), "mine:tiny")
        qtbot.waitUntil(lambda: m.table_model.row_of("mine:tiny") >= 0, timeout=WAIT)
        assert row_texts(m, "mine:tiny")[6] == "Strata store"
        qtbot.waitUntil(lambda: m.selected_name() == "mine:tiny", timeout=WAIT)
        # the built-in model says why too
        click_row(qtbot, m, MODEL)
        click(qtbot, m.buttons["delete"])
        box = dialog_of(qtbot, m, "explainDialog")
        assert "built-in model" in box.text()
        answer_box(qtbot, box, QMessageBox.Ok)
    finally:
        d.shutdown()
        svc.stop()


def test_import_from_the_file_dialog(qtbot, manager, service, dense_gguf):
    m = manager
    values = []
    m.import_panel.bar.valueChanged.connect(values.append)
    import_by_dialog(qtbot, m, dense_gguf)
    # the import's answer and the list's refresh come separately: the row may show before the import has ended
    qtbot.waitUntil(lambda: not m.import_panel.busy and m.table_model.row_of("dense-llama:latest") >= 0,
                    timeout=WAIT)
    assert "Imported" in m.import_panel.label.text() and values and values[-1] == 100
    assert "dense-llama:latest" in names(service.url)
    qtbot.waitUntil(lambda: m.selected_name() == "dense-llama:latest", timeout=WAIT)
    assert row_texts(m, "dense-llama:latest")[3] == "llama"


def test_import_by_dropping_a_gguf_on_the_window(qtbot, manager, service, dense_q8_gguf, tmp_path):
    m = manager
    m.show()
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(dense_q8_gguf))])
    pos = QPoint(m.width() // 2, m.height() // 3)
    enter = QDragEnterEvent(pos, Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(m, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(m, QDropEvent(pos, Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))
    qtbot.waitUntil(lambda: m.table_model.row_of("dense-llama-q8_0:latest") >= 0, timeout=WAIT)
    assert row_texts(m, "dense-llama-q8_0:latest")[2] == "Q8_0"
    # something that is not a .gguf is refused at the door
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    mime2 = QMimeData()
    mime2.setUrls([QUrl.fromLocalFile(str(other))])
    enter = QDragEnterEvent(pos, Qt.CopyAction, mime2, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(m, enter)
    assert not enter.isAccepted()


def test_cancel_an_import_leaves_nothing_behind(qtbot, manager, service, smollm2_path, tmp_path, monkeypatch):
    from app.service.store import blobs

    def hash_until_cancelled(whole):
        """The store's hashing (the service runs in this process), held after its first MiB until the import is
        cancelled (the import's progress callback raises then), as a file too big to finish before the click
        would be: the click can never come too late, however fast the machine hashes."""
        def hashing(*args):
            *_, progress, total = args
            if progress is not None:
                deadline = time.monotonic() + 600
                while time.monotonic() < deadline:
                    progress("hashing", blobs.CHUNK, total)
                    time.sleep(0.01)
            return whole(*args)
        return hashing

    m = manager
    monkeypatch.setattr(blobs, "sha256_file", hash_until_cancelled(blobs.sha256_file))
    monkeypatch.setattr(blobs, "_copy_and_hash", hash_until_cancelled(blobs._copy_and_hash))
    big = tmp_path / "huge.gguf"
    shutil.copyfile(smollm2_path, big)
    before = sorted(os.listdir(service.home / "models"))
    import_by_dialog(qtbot, m, big)
    qtbot.waitUntil(lambda: m.import_panel.progress.completed > 0, timeout=WAIT)
    assert m.import_panel.bar.isVisible() and "huge.gguf" in m.import_panel.label.text()
    click(qtbot, m.import_panel.cancel_button)
    qtbot.waitUntil(lambda: not m.import_panel.busy, timeout=WAIT)
    assert "cancelled; nothing was kept" in m.import_panel.label.text()
    qtbot.waitUntil(lambda: sorted(os.listdir(service.home / "models")) == before, timeout=WAIT)
    assert "huge:latest" not in names(service.url)


def test_copy_rename_and_delete_with_confirmation(qtbot, manager, service, dense_gguf):
    m = manager
    api(service.url, "/api/import", {"path": str(dense_gguf), "model": "work:v1", "stream": False})
    m.state.refresh()
    click_row(qtbot, m, "work:v1")
    click(qtbot, m.buttons["copy"])
    dlg = dialog_of(qtbot, m, "copyDialog")
    assert dlg.textValue() == "work-copy:v1"            # a suggestion to start from
    answer_text(qtbot, dlg, "work:v2")
    qtbot.waitUntil(lambda: m.table_model.row_of("work:v2") >= 0, timeout=WAIT)
    qtbot.waitUntil(lambda: m.selected_name() == "work:v2", timeout=WAIT)
    click(qtbot, m.buttons["rename"])
    answer_text(qtbot, dialog_of(qtbot, m, "renameDialog"), "renamed:v2")
    qtbot.waitUntil(lambda: m.table_model.row_of("renamed:v2") >= 0 and m.table_model.row_of("work:v2") < 0,
                    timeout=WAIT)
    assert {"work:v1", "renamed:v2"} <= set(names(service.url)) and "work:v2" not in names(service.url)
    # delete asks first; No keeps it
    click_row(qtbot, m, "renamed:v2")
    click(qtbot, m.buttons["delete"])
    box = dialog_of(qtbot, m, "deleteDialog")
    assert "Delete renamed:v2?" in box.text()
    deletes = deletes_answered(service.url)
    answer_box(qtbot, box, QMessageBox.No)
    assert "renamed:v2" in names(service.url)
    click(qtbot, m.buttons["delete"])
    answer_box(qtbot, dialog_of(qtbot, m, "deleteDialog"), QMessageBox.Yes)
    qtbot.waitUntil(lambda: m.table_model.row_of("renamed:v2") < 0, timeout=WAIT)
    assert "renamed:v2" not in names(service.url) and "work:v1" in names(service.url)
    assert deletes_answered(service.url) == deletes + 1          # the Yes sent the only DELETE, the No none
    # a refused request is said, not swallowed: a bad name
    click_row(qtbot, m, "work:v1")
    click(qtbot, m.buttons["copy"])
    answer_text(qtbot, dialog_of(qtbot, m, "copyDialog"), "../escape")
    box = dialog_of(qtbot, m, "explainDialog")
    assert "400" in box.text() and "name" in box.text()
    answer_box(qtbot, box, QMessageBox.Ok)


def test_load_unload_and_plan_on_this_machine(qtbot, manager, service):
    m = manager
    click_row(qtbot, m, MODEL)
    if row_texts(m, MODEL)[7] == "loaded":          # a previous test's load: start from unloaded
        click(qtbot, m.buttons["unload"])
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[7] == "not loaded", timeout=WAIT)
    click(qtbot, m.buttons["load"])
    qtbot.waitUntil(lambda: row_texts(m, MODEL)[7] == "loaded", timeout=WAIT)
    assert [x["name"] for x in api(service.url, "/api/ps")["models"]] == [MODEL]
    assert m.buttons["unload"].isEnabled() and not m.buttons["load"].isEnabled()
    click(qtbot, m.buttons["unload"])
    qtbot.waitUntil(lambda: row_texts(m, MODEL)[7] == "not loaded", timeout=WAIT)
    assert api(service.url, "/api/ps")["models"] == []
    # plan on this machine: the memory window's what-if, planned for this model on the real inventory
    click(qtbot, m.buttons["plan"])
    mem = m.desk.memory
    qtbot.waitUntil(lambda: mem is not None and mem.isVisible(), timeout=SHORT)
    w = mem.whatif
    assert mem.tabs.currentWidget() is w and w.model_combo.currentText() == MODEL
    qtbot.waitUntil(lambda: w.last_result is not None, timeout=WAIT)
    assert w.last_result["model"] == MODEL and w.last_result["fits"] is True
    assert "this machine" in w.result_a.title.text()
    assert len(w.view.strip.cells) == 30


@pytest.fixture
def registry():
    from registry_fixture import Registry

    reg = Registry().start()
    yield reg
    reg.stop()


def pull_by_name(qtbot, m, ref: str) -> None:
    """Models > Pull a model…, tick plain http (the test registry is on loopback), type the name, Enter."""
    click_menu(qtbot, open_menu_bar(qtbot, m.desk.chat, "modelsMenu"), "pullModel")
    panel = m.pull_panel
    qtbot.waitUntil(panel.name.hasFocus, timeout=SHORT)
    if not panel.insecure.isChecked():
        click(qtbot, panel.insecure)
    panel.name.selectAll()
    QTest.keyClicks(panel.name, ref)
    QTest.keyClick(panel.name, Qt.Key_Return)


def test_pull_from_a_registry_a_bar_per_file(qtbot, manager, service, registry, tmp_path):
    """The real /api/pull against a registry served on loopback: a bar per layer of the manifest, then the
    model in the list."""
    from gguf_factory import write_dense_llama

    m = manager
    gguf = write_dense_llama(tmp_path / "pulled.gguf", seed=21).read_bytes()
    manifest = registry.add_model("library/tiny", "latest", gguf, system="You are terse.", license="MIT")
    pulled = []
    m.pull_panel.pulled.connect(pulled.append)
    pull_by_name(qtbot, m, f"{registry.host}/library/tiny")
    qtbot.waitUntil(lambda: not m.pull_panel.busy, timeout=WAIT)
    panel = m.pull_panel
    assert panel.status.text().startswith("Pulled "), panel.status.text()
    digests = [x["digest"] for x in manifest["layers"]] + [manifest["config"]["digest"]]
    assert list(panel.bars) == digests                      # one bar per file, in the stream's order
    assert all(b.value() == b.maximum() for b in panel.bars.values())
    assert panel.progress.files[digests[0]].total == len(gguf)
    qtbot.waitUntil(lambda: m.table_model.row_of(f"{registry.host}/library/tiny:latest") >= 0, timeout=WAIT)
    qtbot.waitUntil(lambda: m.selected_name() == f"{registry.host}/library/tiny:latest", timeout=WAIT)
    assert f"{registry.host}/library/tiny:latest" in names(service.url)


def test_cancel_a_pull(qtbot, manager, service, registry, tmp_path):
    from gguf_factory import write_dense_llama

    m = manager
    gguf = write_dense_llama(tmp_path / "stalls.gguf", seed=22).read_bytes()
    manifest = registry.add_model("library/stalls", "latest", gguf)
    model = manifest["layers"][0]["digest"]
    registry.faults.stall_after[model] = 1 << 20           # the download stops after 1 MiB until the client leaves
    pull_by_name(qtbot, m, f"{registry.host}/library/stalls")
    panel = m.pull_panel
    qtbot.waitUntil(lambda: registry.stalled.is_set() and model in panel.bars, timeout=WAIT)
    click(qtbot, panel.cancel_button)
    qtbot.waitUntil(lambda: not panel.busy, timeout=WAIT)        # the cancel goes through the loop thread
    assert panel.status.text() == f"Pull of {registry.host}/library/stalls cancelled."
    assert registry.stall_released.wait(120)                # the service stopped downloading
    assert panel.bars[model].value() < panel.bars[model].maximum()
    assert f"{registry.host}/library/stalls:latest" not in names(service.url)


def test_a_failed_pull_says_why(qtbot, manager, registry):
    m = manager
    pull_by_name(qtbot, m, f"{registry.host}/library/absent")
    qtbot.waitUntil(lambda: not m.pull_panel.busy, timeout=WAIT)
    text = m.pull_panel.status.text()
    assert text.startswith(f"Could not pull {registry.host}/library/absent:") and len(text) > 60, text
    assert m.pull_panel.pull_button.isEnabled() and not m.pull_panel.cancel_button.isEnabled()


def test_pickers_double_click_and_the_live_tab(qtbot, manager, service, dense_gguf):
    """The chat's model picker and the live memory tab's controls, used by clicking; a double-click on a row in
    the manager loads that model."""
    from gui_util import choose, double_click, press

    m = manager
    api(service.url, "/api/import", {"path": str(dense_gguf), "model": "picked:v1", "stream": False})
    chat = m.desk.open_chat()
    qtbot.waitUntil(lambda: chat.models.row_of("picked:v1") >= 0, timeout=WAIT)
    click(qtbot, chat.new_button)
    choose(qtbot, chat.model_picker, chat.models.describe(chat.models.rows[chat.models.row_of("picked:v1")]))
    assert chat.selected_model() == "picked:v1" and m.desk.history.get(chat.conversation.id).model == "picked:v1"
    # double-click a row: that model loads
    for name in [x["name"] for x in api(service.url, "/api/ps")["models"]]:
        api(service.url, "/api/generate", {"model": name, "keep_alive": 0})
    m.state.refresh()
    qtbot.waitUntil(lambda: row_texts(m, MODEL)[7] == "not loaded", timeout=WAIT)
    idx = m.table_model.index(m.table_model.row_of(MODEL), 0)
    double_click(m.table, idx)
    qtbot.waitUntil(lambda: [x["name"] for x in api(service.url, "/api/ps")["models"]] == [MODEL], timeout=WAIT)
    qtbot.waitUntil(lambda: row_texts(m, MODEL)[7] == "loaded", timeout=WAIT)
    # the live tab shows it; its zoom box zooms the bars
    press(qtbot, chat, Qt.Key_M, Qt.ControlModifier)
    live = m.desk.memory.live
    qtbot.waitUntil(lambda: live.model_combo.findText(MODEL) >= 0, timeout=WAIT)
    choose(qtbot, live.model_combo, MODEL)
    qtbot.waitUntil(lambda: len(live.view.strip.cells) == 30, timeout=WAIT)
    click(qtbot, live.view.zoom)
    assert live.view.bars.zoom is True
    click(qtbot, live.view.zoom)
    assert live.view.bars.zoom is False


def test_pins_keep_alive_and_the_memory_cap_are_shown_and_set(qtbot, live_service, tmp_path, smollm2_path):
    """Pin a model and give it its own keep-alive from the manager's buttons (and see a pin set from the API
    appear); the memory cap (STRATA_MAX_MEMORY) and the loaded, pinned models below the list; a model's sampling
    defaults from its GGUF and Modelfile in its detail line."""
    from app.gui.desktop import Desktop
    from gguf_variants import write_llama

    svc = live_service(n_threads=1, num_parallel=1, num_ctx=512, keep_alive="10m", max_memory=3 << 30)
    d = Desktop(svc.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    try:
        m = d.open_models()
        qtbot.waitUntil(lambda: m.table_model.row_of(MODEL) >= 0, timeout=WAIT)
        qtbot.waitUntil(lambda: "Memory cap 3.0 GiB" in m.cap_label.text(), timeout=WAIT)
        assert row_texts(m, MODEL)[8:10] == ["", "server default"]
        click_row(qtbot, m, MODEL)
        assert m.buttons["pin"].text() == "Pin"
        click(qtbot, m.buttons["pin"])
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[8] == "pinned", timeout=WAIT)
        assert api(svc.url, "/api/pin")["models"] == [{"name": MODEL, "pinned": True, "keep_alive": None}]
        qtbot.waitUntil(lambda: m.buttons["pin"].text() == "Unpin", timeout=SHORT)
        assert "Pinned: stays loaded" in m.detail.text()
        click(qtbot, m.buttons["keepalive"])
        answer_text(qtbot, dialog_of(qtbot, m, "keepAliveDialog"), "1h")
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[9] == "1h", timeout=WAIT)
        # loaded, a pinned model unloads never, and the cap line names it
        click(qtbot, m.buttons["load"])
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[7] == "loaded", timeout=WAIT)
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[10] == "Forever", timeout=WAIT)
        qtbot.waitUntil(lambda: f"pinned: {MODEL}" in m.cap_label.text() and "left" in m.cap_label.text(),
                        timeout=WAIT)
        ps = api(svc.url, "/api/ps")["models"][0]
        assert ps["strata"]["pinned"] is True and ps["expires_at"].startswith("2318")
        mem = d.open_memory()                               # the memory view names the pin and the cap too
        qtbot.waitUntil(lambda: f"{MODEL}: loaded, pinned" in mem.live.status.text()
                        and "Memory cap 3.0 GiB" in mem.live.status.text(), timeout=WAIT)
        assert "Memory cap 3.0 GiB" in m.cap_label.text()  # after the load's memory event as before it
        # unpinned from the API (strata pin --off does this): the window follows, the model's 1h applies
        api(svc.url, "/api/pin", {"model": MODEL, "pinned": False})
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[8] == "" and row_texts(m, MODEL)[10].startswith("in "),
                        timeout=WAIT)
        assert m.buttons["pin"].text() == "Pin"
        click(qtbot, m.buttons["keepalive"])
        answer_text(qtbot, dialog_of(qtbot, m, "keepAliveDialog"), "")          # empty: the server's again
        qtbot.waitUntil(lambda: row_texts(m, MODEL)[9] == "server default", timeout=WAIT)
        assert api(svc.url, "/api/pin")["models"] == []
        # a GGUF with its publisher's sampling defaults: the detail line says them and where they come from
        path = write_llama(tmp_path / "pub.gguf", n_layer=1, sampling={"temp": 0.25, "top_k": 7})
        api(svc.url, "/api/create", {"model": "pub:test", "from": str(path), "stream": False,
                                     "parameters": {"top_k": 3}})
        click_row(qtbot, m, "pub:test")
        qtbot.waitUntil(lambda: "Sampling: temperature 0.25 (from the GGUF), top_k 3 (Modelfile)" in m.detail.text(),
                        timeout=WAIT)
    finally:
        d.shutdown()
        svc.stop()
