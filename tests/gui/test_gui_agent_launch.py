"""Models → Launch a coding agent…, as a person uses it: the menu entry opens the dialog, which offers the models
that can call tools (a synthetic model whose chat template renders tools; SmolLM2's cannot) and shows the
`strata launch` command of each agent, with STRATA_HOST since this service is not at the default address;
Copy puts the command on the clipboard. Real service, real Desktop."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import httpx
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel, QLineEdit, QPushButton

from app.gui.models.agent_commands import AGENTS
from app.gui.models.agent_launch import AgentLaunchDialog
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
        for agent, _title, _command, _install in AGENTS:
            line = dlg.findChild(QLineEdit, f"command:{agent}")
            assert line.text() == f"STRATA_HOST={host} strata launch {agent} --model {TOOLY}"
        QTest.mouseClick(dlg.findChild(QPushButton, "copy:codex"), Qt.LeftButton)
        assert QGuiApplication.clipboard().text() == f"STRATA_HOST={host} strata launch codex --model {TOOLY}"
        assert not dlg.empty.isVisible()
        assert any("npm install -g" in w.text() for w in dlg.findChildren(QLabel))
        assert {a for a, *_ in AGENTS} >= {"claude", "codex", "opencode", "qwen", "aider", "mini"}
    finally:
        d.shutdown()


# ---- Open in terminal ----------------------------------------------------------------------------------------------
# A stand-in terminal first on PATH (named x-terminal-emulator, the first one looked for on Linux) records its argv
# and folder, then runs the command it was given as a terminal would (`-e sh -c LINE`); a stand-in `claude` records
# what `strata launch` gave it. So the button's whole path is real: the terminal's command line, the shell line,
# the `strata launch` it runs against this service, the agent started in the chosen folder.

TERMINAL = """#!/bin/sh
python3 -c 'import json, os, sys; json.dump({"argv": sys.argv[1:], "cwd": os.getcwd()}, open(os.environ["REC"] + "/terminal.json", "w"))' "$@"
shift
exec "$@"
"""
AGENT = """#!/bin/sh
python3 -c 'import json, os, sys; json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "base": os.environ.get("ANTHROPIC_BASE_URL")}, open(os.environ["REC"] + "/claude.json", "w"))' "$@"
python3 -c 'import os, urllib.request; urllib.request.urlopen(urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/models", headers={"User-Agent": "claude-cli/2.1.197 (external, sdk-cli)"}), timeout=60).read()'
"""


def press(qtbot, button: QPushButton) -> None:
    """Clicks `button` as a person does: on Qt's xcb platform (tests/gui/test_gui_xvfb.py runs this file under Xvfb)
    with the pointer, through the X server (xdotool moves it onto the button and clicks: XTEST, as from a mouse);
    offscreen, where there is no X server, with QTest."""
    if QGuiApplication.platformName() != "xcb":
        QTest.mouseClick(button, Qt.LeftButton)
        return
    window = button.window()
    window.raise_()
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: button.isVisible() and button.isEnabled(), timeout=SHORT)
    centre = button.mapToGlobal(button.rect().center())
    subprocess.run(["xdotool", "mousemove", "--sync", str(centre.x()), str(centre.y()), "click", "1"], check=True,
                   timeout=60)


@pytest.fixture()
def stand_ins(tmp_path, monkeypatch):
    bindir, rec, project = tmp_path / "bin", tmp_path / "rec", tmp_path / "my project"
    for d in (bindir, rec, project):
        d.mkdir()
    for name, text in (("x-terminal-emulator", TERMINAL), ("claude", AGENT)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("REC", str(rec))
    monkeypatch.setenv("SHELL", "/bin/true")      # the shell the terminal leaves behind: ends at once here
    return rec, project


def test_open_in_terminal_starts_the_agent_in_the_chosen_folder(qtbot, service, stand_ins):
    from app.gui.desktop import Desktop

    rec, project = stand_ins
    # offscreen here (clicked with QTest); tests/gui/test_gui_xvfb.py runs this same test on xcb under Xvfb (clicked
    # through the X server)
    assert QGuiApplication.platformName() == os.environ.get("QT_QPA_PLATFORM", "offscreen")
    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.open_chat()
    try:
        qtbot.waitUntil(lambda: TOOLY in d.state.installed_names(), timeout=WAIT)
        dlg: AgentLaunchDialog = d.open_agents()
        qtbot.waitUntil(lambda: dlg.model.count() == 1, timeout=WAIT)
        # installed (on PATH) -> the button; not installed -> its install command
        for agent, _title, command, install in AGENTS:
            found = shutil.which(command) is not None
            assert dlg.findChild(QPushButton, f"open:{agent}").isVisibleTo(dlg) == found, agent
            label = dlg.findChild(QLabel, f"install:{agent}")
            assert label.isVisibleTo(dlg) == (not found) and install in label.text()
        assert not dlg.findChild(QLabel, "install:claude").isVisibleTo(dlg)
        assert dlg.findChild(QLabel, "install:crush").isVisibleTo(dlg)     # never on this PATH
        dlg.folder.setText(str(project))
        press(qtbot, dlg.findChild(QPushButton, "open:claude"))
        qtbot.waitUntil(lambda: (rec / "claude.json").exists(), timeout=WAIT)
        term = json.loads((rec / "terminal.json").read_text())
        assert term["cwd"] == str(project) and term["argv"][:3] == ["-e", "sh", "-c"]
        assert f"launch claude --model {TOOLY}" in term["argv"][3]
        got = json.loads((rec / "claude.json").read_text())
        assert got["argv"] == ["--model", TOOLY] and got["cwd"] == str(project) and got["base"] == service.url
        assert "Started in a terminal (x-terminal-emulator)" in dlg.status.text()
        # the Server window opens searched to the agent's client: the stand-in's request (Claude Code's User-Agent),
        # not the desktop's own polling
        qtbot.waitUntil(lambda: d.server is not None and d.server.isVisible(), timeout=SHORT)
        w = d.server
        assert w.filter_client.text() == "claude-cli"
        qtbot.waitUntil(lambda: any(r["path"] == "/v1/models" for r in w.model.rows), timeout=WAIT)
        assert all("claude-cli" in r["client"] for r in w.model.rows), [r["client"] for r in w.model.rows]
    finally:
        d.shutdown()


def test_a_folder_that_does_not_exist_is_said_and_nothing_starts(qtbot, service, stand_ins, tmp_path):
    from app.gui.desktop import Desktop

    rec, _ = stand_ins
    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    try:
        qtbot.waitUntil(lambda: TOOLY in d.state.installed_names(), timeout=WAIT)
        dlg = d.open_agents()
        qtbot.waitUntil(lambda: dlg.model.count() == 1, timeout=WAIT)
        dlg.folder.setText(str(tmp_path / "nowhere"))
        assert dlg.open_terminal("claude") is None
        assert "No such folder" in dlg.status.text() and not (rec / "terminal.json").exists()
    finally:
        d.shutdown()
