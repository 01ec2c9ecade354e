"""Driving the desktop app the way a person does: clicks on shown menus and buttons, keys on the active window,
answers typed into the dialog that is open. Shared by the GUI tests."""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QCheckBox, QDialogButtonBox, QLineEdit, QMenu, QMessageBox, QRadioButton

WAIT = 180_000     # ms: generous bounds for a loaded 2-core CI machine; tests finish far sooner
SHORT = 10_000     # ms: for what needs no service work (a window or dialog showing)
# chat options for a reply that only a stop ends (no length limit, the end-of-text token ignored, the context
# shifted when full): a test that stops or leaves a reply midway never finds it already finished
ENDLESS = {"num_predict": -1, "ignore_eos": True}


def press(qtbot, window, key, modifiers=Qt.NoModifier) -> None:
    """A key (shortcut) on `window` once it is the active window, as from the keyboard."""
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=10_000)
    QTest.keyClick(window, key, modifiers)


def click(qtbot, widget) -> None:
    """A left click where a person would aim: the middle of a button, the box of a check box or radio button
    (a stretched one's middle can lie past its label, where clicks do nothing)."""
    qtbot.waitUntil(lambda: widget.isVisible() and widget.isEnabled(), timeout=WAIT)
    if isinstance(widget, (QCheckBox, QRadioButton)):
        pos = QPoint(8, widget.height() // 2)
    else:
        pos = widget.rect().center()
    QTest.mouseClick(widget, Qt.LeftButton, pos=pos)


def double_click(view, index) -> None:
    """A double-click on an item view's cell as the mouse makes it: a click, then the second press that Qt
    turns into a double-click (QTest.mouseDClick alone is only that second half, which views ignore)."""
    pos = view.visualRect(index).center()
    QTest.mouseClick(view.viewport(), Qt.LeftButton, pos=pos)
    QTest.mouseDClick(view.viewport(), Qt.LeftButton, pos=pos)


def _action_named(menu: QMenu, name: str):
    for a in menu.actions():
        if a.objectName() == name or a.text().replace("&", "") == name:
            return a
    raise AssertionError(f"no action {name!r} in menu {menu.objectName() or menu.title()!r}: "
                         f"{[(a.objectName(), a.text()) for a in menu.actions()]}")


def click_menu(qtbot, menu: QMenu, *path: str) -> None:
    """Click through a shown menu: `path` names actions (object name or text); a submenu on the way is opened
    by clicking its entry. The menu must already be open (see open_menu_bar / open_popup)."""
    qtbot.waitUntil(menu.isVisible, timeout=10_000)
    for i, name in enumerate(path):
        a = _action_named(menu, name)
        assert a.isEnabled(), f"{name!r} is disabled"
        QTest.mouseClick(menu, Qt.LeftButton, pos=menu.actionGeometry(a).center())
        if i < len(path) - 1:
            menu = a.menu()
            assert menu is not None, f"{name!r} is not a submenu"
            qtbot.waitUntil(menu.isVisible, timeout=10_000)


def open_menu_bar(qtbot, window, menu_name: str) -> QMenu:
    """Click a menu's title in the window's menu bar; returns the (now shown) menu."""
    window.show()
    bar = window.menuBar()
    menu = next(a.menu() for a in bar.actions() if a.menu() and a.menu().objectName() == menu_name)
    QTest.mouseClick(bar, Qt.LeftButton, pos=bar.actionGeometry(menu.menuAction()).center())
    qtbot.waitUntil(menu.isVisible, timeout=10_000)
    return menu


def open_popup(qtbot, menu: QMenu) -> QMenu:
    """What a right-click on the tray icon does: the context menu pops up (its aboutToShow fills it)."""
    menu.popup(QPoint(200, 200))
    qtbot.waitUntil(menu.isVisible, timeout=10_000)
    return menu


def dialog_of(qtbot, owner, object_name: str):
    """The non-blocking dialog `owner` has open (owner.dialog), once it shows."""
    qtbot.waitUntil(lambda: owner.dialog is not None and owner.dialog.isVisible(), timeout=10_000)
    assert owner.dialog.objectName() == object_name, owner.dialog.objectName()
    return owner.dialog


def answer_text(qtbot, dlg, text: str) -> None:
    """Replace the text in an input dialog by typing, then press OK."""
    edit = dlg.findChild(QLineEdit)
    edit.selectAll()
    QTest.keyClick(edit, Qt.Key_Backspace)
    QTest.keyClicks(edit, text)
    ok = dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.Ok)
    click(qtbot, ok)
    qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=10_000)


def answer_box(qtbot, box: QMessageBox, button) -> None:
    click(qtbot, box.button(button))


def choose(qtbot, combo, text: str) -> None:
    """Open a combo box's list and click the entry with that text."""
    i = combo.findText(text)
    assert i >= 0, f"{text!r} not in {[combo.itemText(k) for k in range(combo.count())]}"
    combo.showPopup()
    view = combo.view()
    qtbot.waitUntil(view.isVisible, timeout=10_000)
    rect = view.visualRect(combo.model().index(i, 0))
    QTest.mouseClick(view.viewport(), Qt.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: combo.currentIndex() == i, timeout=10_000)


def type_into(widget, text: str) -> None:
    """Select all in a line edit / spin box and type `text` over it."""
    edit = widget.lineEdit() if hasattr(widget, "lineEdit") and widget.lineEdit() else widget
    edit.setFocus()
    edit.selectAll()
    QTest.keyClick(edit, Qt.Key_Backspace)
    QTest.keyClicks(edit, text)


def chat_service(live_service):
    """The service the chat window's tests share (SmolLM2: 2 threads, one slot, 2048 tokens), started by the
    `live_service` fixture (its data in a fresh folder, stopped at the end of the module)."""
    return live_service(n_threads=2, num_parallel=1, num_ctx=2048, keep_alive="10m")


def open_desk(qtbot, url: str, num_predict: int):
    """The desktop app on `url` with its chat open, the built-in model listed and the event stream connected (so
    a load or unload it triggers is announced to it); replies capped at num_predict tokens (seed 5). shutdown() it
    when done."""
    from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME
    from app.gui.desktop import Desktop

    d = Desktop(url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.open_chat()
    d.chat.extra_options = {"num_predict": num_predict, "seed": 5}
    qtbot.waitUntil(lambda: DEFAULT_MODEL_NAME in d.state.installed_names() and d.state.connected, timeout=WAIT)
    return d
