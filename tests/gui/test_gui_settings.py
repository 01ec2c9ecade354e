"""The Settings dialog as a person uses it: opened with Ctrl+, on the chat window, fields typed into, Save /
Cancel / Restore defaults / Generate clicked; what it writes is what `ServiceConfig.from_env()` then reads."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialogButtonBox, QLabel

from app import settings
from app.service.config import ServiceConfig
from gui_util import SHORT, click, press, type_into

NOWHERE = "http://127.0.0.1:9"          # the dialog needs no service: the app keeps retrying in the background


@pytest.fixture
def clean_env(monkeypatch):
    for s in settings.SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
    return monkeypatch


def open_dialog(qtbot):
    from app.gui.desktop import Desktop

    d = Desktop(NOWHERE, use_tray=False, poll_ms=60_000)
    qtbot.addWidget(d.chat)
    d.open_chat()
    press(qtbot, d.chat, Qt.Key_Comma, Qt.ControlModifier)
    qtbot.waitUntil(lambda: d.settings is not None and d.settings.isVisible(), timeout=SHORT)
    return d, d.settings


def button(dlg, which):
    return dlg.buttons.button(which)


def test_save_writes_the_file_the_service_reads(qtbot, strata_home, clean_env):
    d, dlg = open_dialog(qtbot)
    try:
        type_into(dlg.address, "0.0.0.0")
        type_into(dlg.port, "12345")
        click(qtbot, dlg.findChild(type(button(dlg, QDialogButtonBox.Save)), "generateKey"))
        key = dlg.api_key.text()
        assert len(key) >= 24
        dlg.origins.setFocus()
        QTest.keyClicks(dlg.origins, "https://a.example")
        dlg.rpc_workers.setFocus()
        QTest.keyClicks(dlg.rpc_workers, "10.0.0.2:50052")
        type_into(dlg.fields["num_parallel"], "2")
        type_into(dlg.fields["num_ctx"], "8192")
        type_into(dlg.fields["num_threads"], "3")
        type_into(dlg.fields["prompt_cache_mib"], "256")
        type_into(dlg.fields["gpu_margin_mib"], "1024")
        type_into(dlg.keep_alive, "1h")
        click(qtbot, dlg.sources["lmstudio"])                # unchecked: not scanned
        click(qtbot, button(dlg, QDialogButtonBox.Save))
        qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=SHORT)
        saved = json.loads((strata_home / "settings.json").read_text())
        assert saved == {"host": "0.0.0.0:12345", "api_key": key, "origins": ["https://a.example"],
                         "num_parallel": 2, "num_ctx": 8192, "num_threads": 3, "prompt_cache_mib": 256,
                         "gpu_margin_mib": 1024, "keep_alive": "1h", "external_sources": ["ollama", "huggingface"],
                         "rpc_workers": ["10.0.0.2:50052"]}
        cfg = ServiceConfig.from_env()
        assert (cfg.host, cfg.port, cfg.api_key, cfg.num_ctx, cfg.external_sources) == (
            "0.0.0.0", 12345, key, 8192, ("ollama", "huggingface"))
        assert "next start" in d.chat.statusBar().currentMessage()
        # opened again, it shows what was saved
        press(qtbot, d.chat, Qt.Key_Comma, Qt.ControlModifier)
        qtbot.waitUntil(dlg.isVisible, timeout=SHORT)
        assert dlg.port.value() == 12345 and dlg.fields["num_ctx"].value() == 8192
        assert not dlg.sources["lmstudio"].isChecked()
        # Restore defaults then Cancel: nothing changes on disk
        click(qtbot, button(dlg, QDialogButtonBox.RestoreDefaults))
        assert dlg.port.value() == 11434 and dlg.sources["lmstudio"].isChecked()
        click(qtbot, button(dlg, QDialogButtonBox.Cancel))
        qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=SHORT)
        assert json.loads((strata_home / "settings.json").read_text()) == saved
    finally:
        d.shutdown()


def test_a_bad_value_is_named_and_nothing_is_saved(qtbot, strata_home, clean_env):
    d, dlg = open_dialog(qtbot)
    try:
        type_into(dlg.keep_alive, "soon")
        click(qtbot, button(dlg, QDialogButtonBox.Save))
        assert dlg.isVisible() and "keep_alive" in dlg.message.text() and "Not saved" in dlg.message.text()
        assert not (strata_home / "settings.json").exists()
    finally:
        d.shutdown()


def test_what_the_environment_sets_is_shown_greyed_out(qtbot, strata_home, clean_env):
    clean_env.setenv("STRATA_NUM_CTX", "2048")
    d, dlg = open_dialog(qtbot)
    try:
        field = dlg.fields["num_ctx"]
        assert not field.isEnabled() and "STRATA_NUM_CTX" in field.toolTip()
        label = [w for w in dlg.findChildren(QLabel) if "Default context" in w.text()]
        assert label and label[0].text() == "Default context (STRATA_NUM_CTX=2048)"
        assert dlg.fields["num_parallel"].isEnabled()
    finally:
        d.shutdown()
