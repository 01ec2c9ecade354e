"""Models → Launch a coding agent…, as a person uses it: the menu entry opens the dialog, which offers the models
that can call tools (a synthetic model whose chat template renders tools; SmolLM2's cannot) and shows the
`strata launch` command of each agent, with STRATA_HOST since this service is not at the default address;
Copy puts the command on the clipboard. Real service, real Desktop."""
from __future__ import annotations

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel, QLineEdit, QPushButton

from app.gui.agent_launch import AgentLaunchDialog
from gguf_variants import write_llama
from gui_util import SHORT, WAIT, click_menu, open_menu_bar

TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif -%}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOLY = "tooly:test"


@pytest.fixture(scope="module")
def service(live_service, tmp_path_factory, smollm2_path):
    svc = live_service(n_threads=1, home=tmp_path_factory.mktemp("agents-home"))
    path = write_llama(tmp_path_factory.mktemp("agents-models") / "tooly.gguf", template=TOOLS_TEMPLATE, n_layer=2)
    r = httpx.post(svc.url + "/api/create", json={"model": TOOLY, "from": str(path), "stream": False}, timeout=120)
    assert r.status_code == 200, r.text
    return svc


def test_models_menu_offers_the_launch_command_of_each_agent(qtbot, service):
    from app.gui.desktop import Desktop

    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.open_chat()
    try:
        qtbot.waitUntil(lambda: TOOLY in d.state.installed_names(), timeout=WAIT)
        click_menu(qtbot, open_menu_bar(qtbot, d.chat, "modelsMenu"), "launchAgent")
        qtbot.waitUntil(lambda: d.agents is not None and d.agents.isVisible(), timeout=SHORT)
        dlg: AgentLaunchDialog = d.agents
        qtbot.waitUntil(lambda: dlg.model.count() == 1, timeout=WAIT)
        assert dlg.model.itemText(0) == TOOLY          # SmolLM2 cannot call tools: not offered
        host = service.url.removeprefix("http://")
        for agent in ("claude", "codex", "opencode"):
            line = dlg.findChild(QLineEdit, f"command:{agent}")
            assert line.text() == f"STRATA_HOST={host} strata launch {agent} --model {TOOLY}"
        QTest.mouseClick(dlg.findChild(QPushButton, "copy:codex"), Qt.LeftButton)
        assert QGuiApplication.clipboard().text() == f"STRATA_HOST={host} strata launch codex --model {TOOLY}"
        assert not dlg.empty.isVisible()
        assert any("npm install -g" in w.text() for w in dlg.findChildren(QLabel))
    finally:
        d.shutdown()
