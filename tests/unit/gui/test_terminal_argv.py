"""The terminal command line per platform (app/gui/models/terminal.terminal_argv), with the PATH lookup given: on Linux
the first installed of x-terminal-emulator, gnome-terminal, konsole, xfce4-terminal, xterm, each with its own way to
run a command (and gnome-terminal/konsole their working-directory options), the command in a shell that `cd`s to
the folder first and leaves an interactive shell behind; macOS through osascript and Terminal; Windows Terminal
when installed, else a new cmd window. The shell line is run by a real sh here, so its quoting is checked on a
folder name with spaces and quotes. Also: the agent list the GUI offers is the CLI's."""
from __future__ import annotations

import subprocess

import pytest

from app.cli.agents import AGENTS as CLI_AGENTS
from app.gui.models.agent_commands import AGENTS as GUI_AGENTS
from app.gui.models.agent_commands import CLIENTS as GUI_CLIENTS
from app.gui.models.terminal import LINUX_TERMINALS, NoTerminal, terminal_argv

CMD = "strata launch claude --model 'coder:0.5b'"


def only(*names):
    return lambda name: f"/usr/bin/{name}" if name in names else None


@pytest.mark.parametrize("name", LINUX_TERMINALS)
def test_each_linux_terminal_runs_the_command_in_the_folder(name):
    argv = terminal_argv(CMD, "/home/u/proj", "linux", only(name))
    assert argv[0] == f"/usr/bin/{name}"
    assert argv[-3:-1] == ["sh", "-c"]
    assert argv[-1].startswith("cd /home/u/proj && " + CMD + ";")
    if name == "gnome-terminal":
        assert argv[1:3] == ["--working-directory=/home/u/proj", "--"]
    elif name == "konsole":
        assert argv[1:4] == ["--workdir", "/home/u/proj", "-e"]
    elif name == "xfce4-terminal":
        assert argv[2] == "-x"
    else:
        assert argv[1] == "-e"


def test_the_users_default_terminal_comes_first():
    assert terminal_argv(CMD, "/p", "linux", only("xterm", "x-terminal-emulator"))[0] == "/usr/bin/x-terminal-emulator"


def test_no_terminal_is_an_error_naming_those_tried():
    with pytest.raises(NoTerminal, match="xterm"):
        terminal_argv(CMD, "/p", "linux", only())


def test_macos_uses_terminal_through_osascript():
    argv = terminal_argv(CMD, "/Users/u/my \"proj\"", "darwin", only())
    assert argv[0] == "osascript" and "tell application \"Terminal\" to do script" in argv[2]
    assert '\\"proj\\"' in argv[2] and argv[-1] == "tell application \"Terminal\" to activate"


def test_windows_prefers_windows_terminal_then_cmd():
    assert terminal_argv(CMD, r"C:\p", "win32", only("wt")) == ["wt", "-d", r"C:\p", "cmd", "/k", CMD]
    argv = terminal_argv(CMD, r"C:\p", "win32", only())
    assert argv[:3] == ["cmd", "/c", "start"] and argv[-3:] == ["cmd", "/k", CMD] and r"C:\p" in argv


def test_the_shell_line_survives_awkward_folder_names(tmp_path):
    folder = tmp_path / "it's a \"project\" $HOME"
    folder.mkdir()
    argv = terminal_argv("pwd", str(folder), "linux", only("xterm"))
    out = subprocess.run(argv[-3:], capture_output=True, text=True, env={"SHELL": "/bin/true", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.strip() == str(folder)


def test_the_gui_offers_the_clis_agents():
    assert [(a.name, a.title, a.command, a.install_hint) for a in CLI_AGENTS.values()] == list(GUI_AGENTS)
    assert {a.name: a.client for a in CLI_AGENTS.values()} == GUI_CLIENTS
