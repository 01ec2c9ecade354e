"""The coding agents the launcher offers and the `strata launch` command line of each (plain data, no Qt).
AGENTS mirrors app/cli/agents.py's list (the GUI does not import the CLI; tests/unit/gui/test_terminal_argv.py
holds them equal)."""
from __future__ import annotations

import shlex
import shutil
import sys

# (launch name, title, executable, install command): app/cli/agents.py's AGENTS
AGENTS = (
    ("claude", "Claude Code", "claude", "npm install -g @anthropic-ai/claude-code"),
    ("codex", "Codex", "codex", "npm install -g @openai/codex"),
    ("opencode", "OpenCode", "opencode", "npm install -g opencode-ai"),
    ("qwen", "Qwen Code", "qwen", "npm install -g @qwen-code/qwen-code"),
    ("crush", "Crush", "crush", "npm install -g @charmland/crush"),
    ("droid", "Factory Droid", "droid", "npm install -g @factory/cli"),
    ("pi", "Pi", "pi", "npm install -g @mariozechner/pi-coding-agent"),
    ("continue", "Continue CLI", "cn", "npm install -g @continuedev/cli"),
    ("copilot", "GitHub Copilot CLI", "copilot", "npm install -g @github/copilot"),
    ("aider", "aider", "aider", "pipx install aider-chat   (or: python3 -m pip install aider-chat)"),
    ("mini", "mini-swe-agent", "mini", "pipx install mini-swe-agent   (or: python3 -m pip install mini-swe-agent)"),
)
# launch name -> the part of its User-Agent the request log shows as its client (app/cli/agents.py's Agent.client):
# after "Open in terminal" the Server window is searched to it ("" for Crush: not recorded, every client shown)
CLIENTS = {"claude": "claude-cli", "codex": "codex", "opencode": "opencode", "qwen": "QwenCode", "crush": "",
           "droid": "factory-cli", "pi": "OpenAI/JS", "continue": "ls/JS", "copilot": "OpenAI/JS",
           "aider": "OpenAI/Python", "mini": "OpenAI/Python"}
DEFAULT_URL = "http://127.0.0.1:11434"


def launch_command(agent: str, model: str, base_url: str, strata: str = "strata") -> str:
    """The shell command line; `strata`: how the shell reaches the CLI (the name on PATH, or this app's own)."""
    host = base_url.removeprefix("http://").rstrip("/")
    prefix = "" if base_url.rstrip("/") in (DEFAULT_URL, "http://localhost:11434") else f"STRATA_HOST={host} "
    return f"{prefix}{strata} launch {agent} --model {shlex.quote(model)}"


def strata_command() -> str:
    """How a new terminal's shell runs this Strata's CLI: `strata` on PATH, else this interpreter's `-m app`."""
    found = shutil.which("strata")
    return shlex.quote(found) if found else f"{shlex.quote(sys.executable)} -m app"
