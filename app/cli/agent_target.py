"""What `strata launch` knows of an agent and of the server it is launched against (`Target`), and what it
hands back (`LaunchPlan`): the types every agent's plan is written in (app/cli/agents.py, app/cli/agents_openai.py).
Covered by tests/unit/cli/test_launch_agents.py."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_OUTPUT_CAP = 32000       # the largest reply an agent is told to ask for (Claude Code's own default)
MIN_OUTPUT = 256
# How long an agent waits for the next bytes of a reply. A coding agent's first prompt is 5,000-20,000 tokens: on
# a CPU the first token can take several minutes, past the agents' own 5-minute idle limits (Claude Code's stream
# idle timeout, Codex's stream_idle_timeout_ms, OpenCode's chunkTimeout), after which they retry from scratch.
# 30 minutes is Claude Code's own upper bound for its idle limit.
WAIT_MS = 1_800_000


@dataclass(frozen=True)
class Target:
    """Where and what an agent runs against."""
    base_url: str                          # e.g. http://127.0.0.1:11434 (no trailing slash)
    model: str                             # the store's name, e.g. coder:0.5b
    context: int                           # tokens per sequence a request without num_ctx gets
    capabilities: tuple[str, ...] = ()     # Ollama's names: completion, tools, thinking, vision, ...
    api_key: str | None = None             # the server's STRATA_API_KEY, when it has one

    @property
    def max_output(self) -> int:
        """The reply size an agent is told: a quarter of the context (the server's own reply reserve rule),
        at most MAX_OUTPUT_CAP, so the agent's prompt budget (context minus reply) stays most of the window."""
        return max(MIN_OUTPUT, min(MAX_OUTPUT_CAP, self.context // 4))

    @property
    def input_budget(self) -> int:
        """The prompt an agent may send: the context minus the reply it reserves (max_output). Agents that compact
        their conversation are told this (or the context and max_output, where they subtract it themselves), so
        their compaction fires before a request no longer fits."""
        return max(MIN_OUTPUT, self.context - self.max_output)

    @property
    def thinking(self) -> bool:
        return "thinking" in self.capabilities

    @property
    def vision(self) -> bool:
        return "vision" in self.capabilities


@dataclass
class LaunchPlan:
    argv: list[str]                                        # argv[0] is the agent's command name
    env: dict[str, str] = field(default_factory=dict)     # added to (and overriding) the user's environment
    files: dict[Path, str] = field(default_factory=dict)  # written under Strata's own folder before the start
    notes: list[str] = field(default_factory=list)        # what the plan did, said to the user


class LaunchError(ValueError):
    """A launch that cannot work as asked (a conflicting agent argument, an API key --oss cannot send)."""


@dataclass(frozen=True)
class Agent:
    name: str          # the `strata launch` argument
    title: str
    command: str       # the executable its package installs
    package: str       # the npm (or PyPI) package
    first_prompt: int  # tokens of its first request as launched (system prompt, tools, a one-line task), measured
    registry: str = "npm"                   # "npm" or "pypi"
    model_flags: tuple[str, ...] = ("-m", "--model")   # its own options that choose a model (refused after `--`)
    client: str = ""   # part of the User-Agent its requests carry (the request log's client; fixtures/agents/)

    def context_warning(self, t: Target) -> str | None:
        """A note when the context leaves this agent's first prompt too little room for a reply."""
        if t.context >= self.first_prompt + t.max_output // 2:
            return None
        return (f"{self.title}'s first request is about {self.first_prompt:,} tokens and {t.model} gets "
                f"{t.context:,} here: its requests may be refused. A larger context: STRATA_NUM_CTX, free memory, "
                "or a model trained on a longer one")

    @property
    def install_hint(self) -> str:
        if self.registry == "pypi":
            return f"pipx install {self.package}   (or: python3 -m pip install {self.package})"
        return f"npm install -g {self.package}"


def file_slug(model: str) -> str:
    """A model's name as a file name (no `:` or `/`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model)


def api_key_of(t: Target) -> str:
    """The API key an agent sends: the server's, else a placeholder (agents that insist on one get it; a server
    without STRATA_API_KEY takes any)."""
    return t.api_key or "strata"
