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
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox

from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME as MODEL
from gui_util import (
    ENDLESS, SHORT, WAIT, answer_box, answer_text, click_menu, dialog_of, open_menu_bar, open_popup, press,
)


@pytest.fixture(scope="module")
def service(live_service, smollm2_path):
    return live_service(n_threads=2, num_parallel=2, num_ctx=2048, keep_alive="10m")


def own_service(live_service, tmp_path):
    """A service of the test's own, for the tests that quit (the app stops the service it hosts)."""
    svc = live_service(n_threads=1, home=tmp_path)
    return svc


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
    # the model listed, and the event stream connected: the loads the tests trigger are announced to the app
    qtbot.waitUntil(lambda: MODEL in d.state.installed_names() and d.state.connected, timeout=WAIT)
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

WINDOWS = ("chat", "memory", "server", "models", "settings")


def window_of(desk, name: str):
    """The window by name, opened the way its shortcut opens it (the chat is always there)."""
    opener = {"chat": desk.open_chat, "memory": desk.open_memory, "server": desk.open_server,
              "models": desk.open_models, "settings": desk.open_settings}
    return opener[name]()


def shown_and_active(window) -> bool:
    return window is not None and window.isVisible() and window.isActiveWindow()


@pytest.mark.parametrize("start", WINDOWS)
def test_application_shortcuts_work_from_every_window(qtbot, desk, start):
    """Ctrl+M, Ctrl+Shift+S, Ctrl+Shift+M, Ctrl+, and Ctrl+0 bring up their window from whichever window has the
    keyboard; Ctrl+N starts a new chat in the chat window, from that window too."""
    for keys, target in (((Qt.Key_M, Qt.ControlModifier), "memory"),
                         ((Qt.Key_S, Qt.ControlModifier | Qt.ShiftModifier), "server"),
                         ((Qt.Key_M, Qt.ControlModifier | Qt.ShiftModifier), "models"),
                         ((Qt.Key_Comma, Qt.ControlModifier), "settings"),
                         ((Qt.Key_0, Qt.ControlModifier), "chat")):
        if target == start:
            continue
        source = window_of(desk, start)
        press(qtbot, source, *keys)
        qtbot.waitUntil(lambda: shown_and_active(getattr(desk, target)), timeout=SHORT)
    n = len(desk.history.conversations())
    press(qtbot, window_of(desk, start), Qt.Key_N, Qt.ControlModifier)
    qtbot.waitUntil(lambda: shown_and_active(desk.chat), timeout=SHORT)
    assert len(desk.history.conversations()) == n + 1
    assert desk.chat.conversation.id == desk.history.conversations()[0].id
    assert desk.chat.conv_view.currentIndex().row() == 0
    qtbot.waitUntil(desk.chat.input.hasFocus, timeout=SHORT)      # ready to type


@pytest.mark.parametrize("name", ["memory", "server", "models", "settings"])
def test_ctrl_w_closes_a_secondary_window_and_esc_a_dialog(qtbot, desk, name):
    win = window_of(desk, name)
    press(qtbot, win, Qt.Key_W, Qt.ControlModifier)
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=SHORT)
    assert desk.chat.isVisible()                      # the app goes on
    if name == "settings":                            # a dialog: Esc too (its Cancel)
        win = window_of(desk, name)
        press(qtbot, win, Qt.Key_Escape)
        qtbot.waitUntil(lambda: not win.isVisible(), timeout=SHORT)
    if name != "settings":                            # its File menu's entry does the same
        win = window_of(desk, name)
        click_menu(qtbot, open_menu_bar(qtbot, win, "fileMenu"), "closeWindow")
        qtbot.waitUntil(lambda: not win.isVisible(), timeout=SHORT)


def test_chat_window_has_no_ctrl_w(qtbot, desk):
    """The chat is the main window: Ctrl+W there leaves it open (Quit is Ctrl+Q)."""
    assert not any(a.shortcut().toString() == "Ctrl+W" for a in desk.chat.findChildren(QAction))


def test_chat_menu_keys(qtbot, desk):
    """The chat's own keys: Ctrl+L puts the cursor in the message box, Esc stops a reply (and only then is
    bound), Ctrl+R asks again, Del on the chat list deletes the chat after asking; Rename from the menu."""
    chat = desk.chat
    chat.extra_options = ENDLESS            # Esc must find the reply still running
    chat.new_chat()
    chat.conv_view.setFocus()
    press(qtbot, chat, Qt.Key_L, Qt.ControlModifier)
    qtbot.waitUntil(chat.input.hasFocus, timeout=SHORT)
    assert not chat.action_stop.isEnabled()
    QTest.keyClicks(chat.input, "Tell me a long story about mountains.")
    QTest.keyClick(chat.input, Qt.Key_Return)
    assert chat.busy and chat.action_stop.isEnabled()
    qtbot.waitUntil(lambda: chat.pending is not None and bool(chat.pending.text), timeout=WAIT)
    press(qtbot, chat, Qt.Key_Escape)
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    [reply] = [m for m in desk.history.messages(chat.conversation.id) if m.role == "assistant"]
    assert reply.stats.get("stopped") is True
    chat.extra_options = {"num_predict": 4}
    press(qtbot, chat, Qt.Key_R, Qt.ControlModifier)
    assert chat.busy
    qtbot.waitUntil(lambda: not chat.busy, timeout=WAIT)
    [again] = [m for m in desk.history.messages(chat.conversation.id) if m.role == "assistant"]
    assert again.id != reply.id and not again.stats.get("stopped")
    click_menu(qtbot, open_menu_bar(qtbot, chat, "chatMenu"), "renameChat")
    answer_text(qtbot, dialog_of(qtbot, chat, "renameChatDialog"), "Mountains")
    assert desk.history.get(chat.conversation.id).title == "Mountains"
    cid = chat.conversation.id
    chat.activateWindow()
    qtbot.waitUntil(chat.isActiveWindow, timeout=SHORT)
    chat.conv_view.setFocus()
    qtbot.waitUntil(chat.conv_view.hasFocus, timeout=SHORT)
    QTest.keyClick(chat.conv_view, Qt.Key_Delete)
    answer_box(qtbot, dialog_of(qtbot, chat, "deleteChatDialog"), QMessageBox.Yes)
    qtbot.waitUntil(lambda: cid not in [c.id for c in desk.history.conversations()], timeout=SHORT)


def test_chat_keys_for_files_search_and_options(qtbot, desk):
    """Ctrl+Shift+A opens the attach dialog (Esc closes it), Ctrl+F puts the cursor in the search box,
    Ctrl+Shift+O shows and hides the chat's options; the export and import entries open their dialogs."""
    chat = desk.chat
    press(qtbot, chat, Qt.Key_A, Qt.ControlModifier | Qt.ShiftModifier)
    dlg = dialog_of(qtbot, chat, "attachDialog")
    QTest.keyClick(dlg, Qt.Key_Escape)
    qtbot.waitUntil(lambda: chat.dialog is None, timeout=SHORT)
    press(qtbot, chat, Qt.Key_F, Qt.ControlModifier)
    qtbot.waitUntil(chat.search_box.hasFocus, timeout=SHORT)
    press(qtbot, chat, Qt.Key_O, Qt.ControlModifier | Qt.ShiftModifier)
    qtbot.waitUntil(chat.options.isVisible, timeout=SHORT)
    press(qtbot, chat, Qt.Key_O, Qt.ControlModifier | Qt.ShiftModifier)
    qtbot.waitUntil(lambda: not chat.options.isVisible(), timeout=SHORT)
    chat.new_chat()
    for name, dialog in (("exportMarkdown", "exportDialog"), ("exportJson", "exportDialog"),
                         ("importChat", "importChatDialog"), ("attachFiles", "attachDialog")):
        click_menu(qtbot, open_menu_bar(qtbot, chat, "chatMenu"), name)
        dlg = dialog_of(qtbot, chat, dialog)
        dlg.reject()
        qtbot.waitUntil(lambda: chat.dialog is None, timeout=SHORT)


def test_buttons_name_their_keys_and_tab_walks_the_window(qtbot, desk):
    chat = desk.chat
    assert chat.new_button.toolTip() == "Start a new chat (Ctrl+N)"
    assert chat.send_button.toolTip() == "Send the message (Enter)"
    assert chat.stop_button.toolTip() == "Stop the reply (Esc)"
    assert chat.regen_button.toolTip() == "Ask for the last reply again (Ctrl+R)"
    assert "Del" in chat.delete_button.toolTip()
    # Tab from the message box goes to Send; Shift+Tab from the chat list does not leave the window
    chat.new_chat()
    qtbot.waitUntil(chat.input.hasFocus, timeout=SHORT)
    chat.input.setTabChangesFocus(True)
    QTest.keyClick(chat.input, Qt.Key_Tab)
    qtbot.waitUntil(chat.send_button.hasFocus, timeout=SHORT)
    order, w = [], chat.conv_view
    for _ in range(20):
        order.append(w)
        w = w.nextInFocusChain()
        while not (w.focusPolicy() & Qt.TabFocus) or not w.isVisible() or not w.isEnabled():
            w = w.nextInFocusChain()
    names = [chat.conv_view, chat.new_button, chat.model_picker, chat.system_prompt, chat.input, chat.send_button]
    positions = [order.index(x) for x in names]
    assert positions == sorted(positions), [x.objectName() or type(x).__name__ for x in order]


@pytest.mark.parametrize("how", ["ctrl+q", "ctrl+q in memory", "ctrl+q in server", "ctrl+q in models",
                                 "ctrl+q in settings",
                                 "file menu", "file menu in memory", "tray"])
def test_quit_ends_the_app_and_stops_its_service(qtbot, live_service, tmp_path, how):
    svc = own_service(live_service, tmp_path)
    assert answers(svc.url)
    d = make_desk(qtbot, svc.url, service=svc, use_tray=(how == "tray"))
    if how.startswith("ctrl+q"):
        press(qtbot, window_of(d, how.split()[-1] if " in " in how else "chat"), Qt.Key_Q, Qt.ControlModifier)
    elif how == "file menu in memory":
        click_menu(qtbot, open_menu_bar(qtbot, d.open_memory(), "fileMenu"), "quit")
    elif how == "file menu":
        click_menu(qtbot, open_menu_bar(qtbot, d.chat, "fileMenu"), "quit")
    else:
        click_menu(qtbot, open_popup(qtbot, d.tray.tray.contextMenu()), "quitApp")
    qtbot.waitUntil(lambda: not answers(svc.url), timeout=WAIT)     # the service it hosted is gone
    assert not svc._thread.is_alive()
    assert not d.chat.isVisible() and d.bridge.closed
    assert not any(w is not None and w.isVisible() for w in (d.memory, d.server, d.models, d.settings))
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
        click_menu(qtbot, open_popup(qtbot, menu), "openServer")
        qtbot.waitUntil(lambda: d.server is not None and d.server.isVisible(), timeout=SHORT)
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
    """A new menu entry must come with a test: the menus hold exactly the actions the tests above click (and
    test_gui_agent_launch.py: launchAgent)."""
    d = make_desk(qtbot, service.url, use_tray=True)
    try:
        def names(menu) -> list[str]:     # "unload:NAME" entries come and go with loaded models
            return [a.objectName() for a in menu.actions() if a.objectName() and ":" not in a.objectName()]

        d.tray.populate()
        bar = {m.objectName(): names(m) for m in (a.menu() for a in d.chat.menuBar().actions()) if m is not None}
        tray = names(d.tray.tray.contextMenu())
    finally:
        d.shutdown()
    assert bar == {"fileMenu": ["newChat", "openChat", "memoryView", "serverView", "settings", "quit"],
                   "modelsMenu": ["manageModels", "pullModel", "launchAgent", "loadMenu", "copyAddress"],
                   "chatMenu": ["focusInput", "attachFiles", "stop", "regenerate", "searchChats", "moreOptions", "renameChat",
                                "deleteChat", "exportMarkdown", "exportJson", "importChat"]}
    assert tray == ["manageModels", "pullModel", "loadMenu", "copyAddress", "openChat", "openMemory",
                    "openServer", "openSettings", "quitApp"]
    shortcuts = {a.objectName(): a.shortcut().toString() for a in d.actions.all() + d.chat.findChildren(QAction)
                 if a.objectName() and not a.shortcut().isEmpty()}
    assert shortcuts == {"newChat": "Ctrl+N", "openChat": "Ctrl+0", "memoryView": "Ctrl+M",
                         "serverView": "Ctrl+Shift+S", "settings": "Ctrl+,",
                         "quit": "Ctrl+Q", "manageModels": "Ctrl+Shift+M", "focusInput": "Ctrl+L", "stop": "Esc",
                         "regenerate": "Ctrl+R", "deleteChat": "Del", "searchChats": "Ctrl+F",
                         "moreOptions": "Ctrl+Shift+O", "attachFiles": "Ctrl+Shift+A"}


def test_secondary_windows_have_the_same_menus(qtbot, desk):
    for name in ("memory", "server", "models"):
        win = window_of(desk, name)
        bar = {m.objectName(): [a.objectName() for a in m.actions() if a.objectName()]
               for m in (a.menu() for a in win.menuBar().actions()) if m is not None}
        assert bar == {"fileMenu": ["newChat", "openChat", "memoryView", "serverView", "settings", "closeWindow",
                                    "quit"],
                       "modelsMenu": ["manageModels", "pullModel", "launchAgent"]}, name
