"""Starting a command in the user's own terminal emulator, in a folder they chose (the agent launch dialog's "Open
in terminal"): the terminal stays open after the command ends, so its output and the shell are the user's.

Which terminal: on Linux the first of x-terminal-emulator (Debian's alternative: whatever the user made default),
gnome-terminal, konsole, xfce4-terminal, xterm on PATH; on macOS Terminal (through osascript); on Windows Windows
Terminal (wt) when installed, else a new cmd window. `terminal_argv` is pure (the platform and the PATH lookup are
arguments); `open_in_terminal` starts it detached from this process.
Covered by tests/gui/test_gui_agent_launch.py (a stand-in terminal on PATH that records its argv and runs the
command) and tests/unit/gui/test_terminal_argv.py (every platform's command line)."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable

LINUX_TERMINALS = ("x-terminal-emulator", "gnome-terminal", "konsole", "xfce4-terminal", "xterm")


class NoTerminal(RuntimeError):
    """No terminal emulator this module knows is installed."""


def _posix_script(command: str, folder: str) -> str:
    """A shell line that runs `command` in `folder`, then leaves the user an interactive shell there."""
    return f"cd {shlex.quote(folder)} && {command}; exec \"${{SHELL:-/bin/sh}}\" -i"


def _applescript_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def terminal_argv(command: str, folder: str, platform: str | None = None,
                  which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The command line that opens a terminal running `command` (a shell command line) in `folder`."""
    platform = platform or sys.platform
    if platform == "darwin":
        script = _applescript_string(f"cd {shlex.quote(folder)} && {command}")
        return ["osascript", "-e", f"tell application \"Terminal\" to do script {script}",
                "-e", "tell application \"Terminal\" to activate"]
    if platform.startswith("win"):
        if which("wt"):
            return ["wt", "-d", folder, "cmd", "/k", command]
        return ["cmd", "/c", "start", "", "/d", folder, "cmd", "/k", command]
    script = _posix_script(command, folder)
    for name in LINUX_TERMINALS:
        path = which(name)
        if not path:
            continue
        if name == "gnome-terminal":
            return [path, f"--working-directory={folder}", "--", "sh", "-c", script]
        if name == "konsole":
            return [path, "--workdir", folder, "-e", "sh", "-c", script]
        if name == "xfce4-terminal":
            return [path, f"--working-directory={folder}", "-x", "sh", "-c", script]
        return [path, "-e", "sh", "-c", script]
    raise NoTerminal("no terminal emulator found (tried " + ", ".join(LINUX_TERMINALS) + ")")


def open_in_terminal(command: str, folder: str) -> list[str]:
    """Start a terminal running `command` in `folder`, detached (it outlives the app); returns its argv."""
    argv = terminal_argv(command, folder)
    kwargs: dict = {"cwd": folder, "stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                    "stderr": subprocess.DEVNULL}
    if os.name == "nt":
        kwargs["creationflags"] = getattr(subprocess, "DETACHED_PROCESS", 0)
    else:
        kwargs["start_new_session"] = True
    subprocess.Popen(argv, **kwargs)
    return argv
