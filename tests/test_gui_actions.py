"""Every menu action, shortcut and tray item of the desktop app, triggered the way a person does it (keys on the
shown window, clicks on the open menu), against the real service and SmolLM2, asserting what the person would
see: a window appears, a model loads or unloads, the app quits and its service stops.

The model manager, settings dialog and what-if picker have their own files (test_gui_manager.py,
test_gui_settings.py, test_gui_whatif.py); the chat's own buttons are in test_gui_chat_buttons.py.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import SHORT, WAIT, click_menu, open_menu_bar, open_popup, press
from service_util import store_factory


@pytest.fixture(scope="module")
def service(tmp_path_factory, smollm2_path):
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread

    home = tmp_path_factory.mktemp("gui-actions")
    svc = ServiceThread(ServiceConfig(host="127.0.0.1", port=0, n_threads=2, num_parallel=2, num_ctx=2048,
                                      keep_alive="10m"), store_factory=store_factory(home))
    svc.start()
    yield svc
    svc.stop()


def own_service(tmp_path):
    """A service of the test's own, for the tests that quit (the app stops the service it hosts)."""
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread

    svc = ServiceThread(ServiceConfig(host="127.0.0.1", port=0, n_threads=1), store_factory=store_factory(tmp_path))
    return svc.start()


def api(url, path, body=None):
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read() or b"{}")


def running(url) -> list[str]:
    return [m["name"] for m in api(url, "/api/ps")["models"]]


def answers(url) -> bool:
    try:
        api(url, "/api/version")
        return True
    except (urllib.error.URLError, ConnectionError):
        return False


def make_desk(qtbot, url, service=None, use_tray=False):
    from app.gui.desktop import Desktop

    d = Desktop(url, service=service, use_tray=use_tray, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.open_chat()
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names(), timeout=WAIT)
    return d


@pytest.fixture
def desk(qtbot, service):
    d = make_desk(qtbot, service.url)
    yield d
    d.shutdown()


def unload_all(url, desk) -> None:
    for name in running(url):
        api(url, "/api/generate", {"model": name, "keep_alive": 0})
    desk.state.refresh()


# ---- shortcuts ---------------------------------------------------------------------------------------------------

def test_shortcuts_open_every_window(qtbot, desk):
    chat = desk.chat
    press(qtbot, chat, Qt.Key_M, Qt.ControlModifier)                       # Ctrl+M: the memory view
    qtbot.waitUntil(lambda: desk.memory is not None and desk.memory.isVisible(), timeout=SHORT)
    assert desk.memory.windowTitle() == "Strata — Memory"
    press(qtbot, chat, Qt.Key_M, Qt.ControlModifier | Qt.ShiftModifier)     # Ctrl+Shift+M: the model manager
    qtbot.waitUntil(lambda: desk.models is not None and desk.models.isVisible(), timeout=SHORT)
    assert desk.models.windowTitle() == "Strata — Models"
    press(qtbot, chat, Qt.Key_Comma, Qt.ControlModifier)                   # Ctrl+,: settings
    qtbot.waitUntil(lambda: desk.settings is not None and desk.settings.isVisible(), timeout=SHORT)
    assert desk.settings.windowTitle() == "Strata — Settings"
    n = len(desk.history.conversations())
    press(qtbot, chat, Qt.Key_N, Qt.ControlModifier)                       # Ctrl+N: a new chat, selected
    assert len(desk.history.conversations()) == n + 1
    assert chat.conversation.id == desk.history.conversations()[0].id
    assert chat.conv_view.currentIndex().row() == 0


@pytest.mark.parametrize("how", ["ctrl+q", "file menu", "tray"])
def test_quit_ends_the_app_and_stops_its_service(qtbot, tmp_path, how):
    svc = own_service(tmp_path)
    assert answers(svc.url)
    d = make_desk(qtbot, svc.url, service=svc, use_tray=(how == "tray"))
    if how == "ctrl+q":
        press(qtbot, d.chat, Qt.Key_Q, Qt.ControlModifier)
    elif how == "file menu":
        click_menu(qtbot, open_menu_bar(qtbot, d.chat, "fileMenu"), "quit")
    else:
        click_menu(qtbot, open_popup(qtbot, d.tray.tray.contextMenu()), "quitApp")
    qtbot.waitUntil(lambda: not answers(svc.url), timeout=WAIT)     # the service it hosted is gone
    assert not svc._thread.is_alive()
    assert not d.chat.isVisible() and d.bridge.closed
    # (that the process itself exits is checked under a real X server: test_gui_xvfb.py)


# ---- the menu bar ----------------------------------------------------------------------------------------------

def test_file_menu_items(qtbot, desk):
    chat = desk.chat
    click_menu(qtbot, open_menu_bar(qtbot, chat, "fileMenu"), "memoryView")
    qtbot.waitUntil(lambda: desk.memory is not None and desk.memory.isVisible(), timeout=SHORT)
    click_menu(qtbot, open_menu_bar(qtbot, chat, "fileMenu"), "settings")
    qtbot.waitUntil(lambda: desk.settings is not None and desk.settings.isVisible(), timeout=SHORT)
    desk.settings.reject()
    n = len(desk.history.conversations())
    click_menu(qtbot, open_menu_bar(qtbot, chat, "fileMenu"), "newChat")
    assert len(desk.history.conversations()) == n + 1


def test_models_menu_items(qtbot, desk, service):
    chat = desk.chat
    unload_all(service.url, desk)
    qtbot.waitUntil(lambda: desk.state.ps == [], timeout=WAIT)
    click_menu(qtbot, open_menu_bar(qtbot, chat, "modelsMenu"), "manageModels")
    qtbot.waitUntil(lambda: desk.models is not None and desk.models.isVisible(), timeout=SHORT)
    desk.models.hide()
    click_menu(qtbot, open_menu_bar(qtbot, chat, "modelsMenu"), "pullModel")
    qtbot.waitUntil(lambda: desk.models.isVisible(), timeout=SHORT)
    qtbot.waitUntil(lambda: desk.models.pull_panel.name.hasFocus(), timeout=SHORT)
    # Load model ▸ smollm2 loads it; the menu then offers to unload it
    click_menu(qtbot, open_menu_bar(qtbot, chat, "modelsMenu"), "loadMenu", f"load:{MODEL}")
    qtbot.waitUntil(lambda: running(service.url) == [MODEL], timeout=WAIT)
    qtbot.waitUntil(lambda: desk.state.model_state(MODEL) == "loaded", timeout=WAIT)
    click_menu(qtbot, open_menu_bar(qtbot, chat, "modelsMenu"), f"unload:{MODEL}")
    qtbot.waitUntil(lambda: running(service.url) == [], timeout=WAIT)
    qtbot.waitUntil(lambda: desk.state.ps == [], timeout=WAIT)
    click_menu(qtbot, open_menu_bar(qtbot, chat, "modelsMenu"), "copyAddress")
    assert QGuiApplication.clipboard().text() == service.url
    assert service.url in chat.statusBar().currentMessage()


# ---- the tray --------------------------------------------------------------------------------------------------

def test_tray_menu_items(qtbot, service):
    d = make_desk(qtbot, service.url, use_tray=True)
    try:
        unload_all(service.url, d)
        qtbot.waitUntil(lambda: d.state.ps == [], timeout=WAIT)
        menu = d.tray.tray.contextMenu()
        click_menu(qtbot, open_popup(qtbot, menu), "manageModels")
        qtbot.waitUntil(lambda: d.models is not None and d.models.isVisible(), timeout=SHORT)
        d.models.hide()
        click_menu(qtbot, open_popup(qtbot, menu), "pullModel")
        qtbot.waitUntil(lambda: d.models.isVisible() and d.models.pull_panel.name.hasFocus(), timeout=SHORT)
        click_menu(qtbot, open_popup(qtbot, menu), "openMemory")
        qtbot.waitUntil(lambda: d.memory is not None and d.memory.isVisible(), timeout=SHORT)
        click_menu(qtbot, open_popup(qtbot, menu), "openSettings")
        qtbot.waitUntil(lambda: d.settings is not None and d.settings.isVisible(), timeout=SHORT)
        d.chat.hide()
        click_menu(qtbot, open_popup(qtbot, menu), "openChat")
        qtbot.waitUntil(d.chat.isVisible, timeout=SHORT)
        notes = []
        d.tray.notified.connect(lambda title, msg: notes.append((title, msg)))
        click_menu(qtbot, open_popup(qtbot, menu), "loadMenu", f"load:{MODEL}")
        qtbot.waitUntil(lambda: running(service.url) == [MODEL], timeout=WAIT)
        qtbot.waitUntil(lambda: ("Model loaded", f"{MODEL} is ready") in notes, timeout=WAIT)
        qtbot.waitUntil(lambda: d.state.model_state(MODEL) == "loaded", timeout=WAIT)
        click_menu(qtbot, open_popup(qtbot, menu), f"unload:{MODEL}")
        qtbot.waitUntil(lambda: running(service.url) == [], timeout=WAIT)
        click_menu(qtbot, open_popup(qtbot, menu), "copyAddress")
        assert QGuiApplication.clipboard().text() == service.url
        assert ("Server address copied", service.url) in notes
        # the window's Models menu has the model entries too (its own actions first)
        models_menu = open_menu_bar(qtbot, d.chat, "modelsMenu")
        names = [a.objectName() for a in models_menu.actions()]
        models_menu.hide()
        assert names[:2] == ["manageModels", "pullModel"] and "copyAddress" in names
    finally:
        d.shutdown()


def test_every_action_in_the_menus_is_one_this_file_triggers(qtbot, service):
    """A new menu entry must come with a test: the menus hold exactly the actions the tests above click."""
    d = make_desk(qtbot, service.url, use_tray=True)
    try:
        def names(menu) -> list[str]:     # "unload:NAME" entries come and go with loaded models
            return [a.objectName() for a in menu.actions() if a.objectName() and ":" not in a.objectName()]

        d.tray.populate()
        bar = {m.objectName(): names(m) for m in (a.menu() for a in d.chat.menuBar().actions()) if m is not None}
        tray = names(d.tray.tray.contextMenu())
    finally:
        d.shutdown()
    assert bar == {"fileMenu": ["newChat", "memoryView", "settings", "quit"],
                   "modelsMenu": ["manageModels", "pullModel", "loadMenu", "copyAddress"]}
    assert tray == ["manageModels", "pullModel", "loadMenu", "copyAddress", "openChat", "openMemory",
                    "openSettings", "quitApp"]
    shortcuts = {a.objectName(): a.shortcut().toString() for a in d.chat.findChildren(type(d.chat.action_new))
                 if a.objectName() and not a.shortcut().isEmpty()}
    assert shortcuts == {"newChat": "Ctrl+N", "memoryView": "Ctrl+M", "settings": "Ctrl+,", "quit": "Ctrl+Q",
                         "manageModels": "Ctrl+Shift+M"}
