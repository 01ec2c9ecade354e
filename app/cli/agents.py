"""What each coding agent is given to run on this Strata server: `strata launch`'s plans, pure (no I/O).

One `Target` (the server's URL and API key, the chosen model, the context a request gets, the model's
capabilities) becomes, per agent, a `LaunchPlan`: the command line, the environment variables added to the
user's, and the files Strata writes in its own folder. Nothing here writes to an agent's own configuration
files: each agent takes its settings from the environment or the command line, which override the user's files
for this run only. See docs/architecture.md, "Coding agents".

- Claude Code: ANTHROPIC_BASE_URL / ANTHROPIC_AUTH_TOKEN, every model tier it asks for (ANTHROPIC_MODEL,
  ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU,FABLE}_MODEL, ANTHROPIC_SMALL_FAST_MODEL, CLAUDE_CODE_SUBAGENT_MODEL,
  CLAUDE_CODE_AUTO_MODE_MODEL, CLAUDE_CODE_BG_CLASSIFIER_MODEL) set to the chosen model, its context window
  (CLAUDE_CODE_MAX_CONTEXT_TOKENS, read for non-Claude model names) and reply size (CLAUDE_CODE_MAX_OUTPUT_TOKENS),
  30-minute waits for a reply (API_TIMEOUT_MS, CLAUDE_STREAM_IDLE_TIMEOUT_MS: see WAIT_MS), telemetry, error
  reports, surveys and the auto-updater off, and no per-request attribution header in the system prompt (it would
  change the prompt's start on every request and defeat the prompt cache).
- Codex: `-c` overrides: a `strata` provider (base_url .../v1, wire_api "responses", stream_idle_timeout_ms), the
  model, a model catalog (model_catalog_json, Codex's own ModelInfo shape: context window, modalities, reasoning
  levels; without it Codex warns "Model metadata ... not found" and guesses), analytics and update checks off.
  `--oss` instead uses Codex's built-in Ollama provider pointed here (CODEX_OSS_BASE_URL), with the same catalog.
- OpenCode: OPENCODE_CONFIG_CONTENT (merged over the user's opencode.json by OpenCode itself): a `strata`
  provider through `@ai-sdk/openai-compatible` (chunkTimeout: WAIT_MS) with the model's limits {context, output},
  the model as both `model` and `small_model`; autoupdate and sharing off.
Covered by tests/unit/cli/test_launch_agents.py and tests/integration/cli/test_cli_launch.py."""
from __future__ import annotations

import json
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
    command: str       # the executable npm installs
    npm_package: str
    first_prompt: int  # tokens of its first request as launched (system prompt, tools, a one-line task), measured

    def context_warning(self, t: Target) -> str | None:
        """A note when the context leaves this agent's first prompt too little room for a reply."""
        if t.context >= self.first_prompt + t.max_output // 2:
            return None
        return (f"{self.title}'s first request is about {self.first_prompt:,} tokens and {t.model} gets "
                f"{t.context:,} here: its requests may be refused. A larger context: STRATA_NUM_CTX, free memory, "
                "or a model trained on a longer one")

    @property
    def install_hint(self) -> str:
        return f"npm install -g {self.npm_package}"


# first prompts measured by bench/agents_e2e.py on Qwen2.5-Coder's tokenizer (Claude Code 2.1, Codex 0.171,
# OpenCode 1.18)
CLAUDE = Agent("claude", "Claude Code", "claude", "@anthropic-ai/claude-code", 18_000)
CODEX = Agent("codex", "Codex", "codex", "@openai/codex", 4_600)
OPENCODE = Agent("opencode", "OpenCode", "opencode", "opencode-ai", 7_500)
AGENTS = {a.name: a for a in (CLAUDE, CODEX, OPENCODE)}

# Arguments that would choose another model or provider behind launch's back: refused with a pointer to --model.
_MODEL_FLAGS = ("-m", "--model")


def _refuse_model_args(agent: Agent, extra: list[str]) -> None:
    for arg in extra:
        if arg in _MODEL_FLAGS or arg.startswith("--model="):
            raise LaunchError(f"strata launch chooses {agent.title}'s model: use `strata launch {agent.name} "
                              f"--model NAME` instead of {arg!r} after `--`")


def plan(agent: Agent, target: Target, extra: list[str], *, oss: bool = False, state_dir: Path) -> LaunchPlan:
    """The launch plan of `agent` against `target`; `extra`: the user's own arguments for the agent (after its
    options); `state_dir`: Strata's folder for files an agent reads (Codex's model catalog)."""
    _refuse_model_args(agent, extra)
    if oss and agent is not CODEX:
        raise LaunchError("--oss is Codex's option (its built-in Ollama provider)")
    if agent is CLAUDE:
        return claude_plan(target, extra)
    if agent is CODEX:
        return codex_plan(target, extra, oss=oss, state_dir=state_dir)
    return opencode_plan(target, extra)


# ---- Claude Code ---------------------------------------------------------------------------------------------

def claude_plan(t: Target, extra: list[str]) -> LaunchPlan:
    env = {
        "ANTHROPIC_BASE_URL": t.base_url,
        "ANTHROPIC_AUTH_TOKEN": t.api_key or "strata",   # Bearer token; any value when the server has no key
        "ANTHROPIC_API_KEY": "",                         # a real Anthropic key must not win over the token
        "ANTHROPIC_MODEL": t.model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": t.model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": t.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": t.model,
        "ANTHROPIC_DEFAULT_FABLE_MODEL": t.model,
        "ANTHROPIC_SMALL_FAST_MODEL": t.model,           # older releases' name for the haiku tier
        "CLAUDE_CODE_SUBAGENT_MODEL": t.model,
        "CLAUDE_CODE_AUTO_MODE_MODEL": t.model,          # auto mode's permission decisions
        "CLAUDE_CODE_BG_CLASSIFIER_MODEL": t.model,      # ... and its background classifier
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(t.context),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(t.max_output),
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
        "API_TIMEOUT_MS": str(WAIT_MS),
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(WAIT_MS),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    }
    notes = [f"every model tier Claude Code asks for (opus, sonnet, haiku, fable, subagents, auto mode) -> "
             f"{t.model}"]
    if not t.thinking:
        env["CLAUDE_CODE_DISABLE_THINKING"] = "1"
        notes.append(f"{t.model} cannot think: Claude Code's thinking is off")
    return LaunchPlan(["claude", "--model", t.model, *extra], env, {}, notes)


# ---- Codex -----------------------------------------------------------------------------------------------------

def _toml(value) -> str:
    """A TOML value for Codex's `-c key=value` (JSON's string escapes are TOML's basic-string escapes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


def codex_catalog(t: Target) -> dict:
    """Codex's model catalog (the ModelInfo records of its `/models`, read from model_catalog_json): the context
    window, the input modalities, and reasoning levels only for a model that thinks. `base_instructions` is
    empty, as `ollama launch` writes it: Codex then sends its tools, permissions and environment without its
    own long system prompt (about 5,000 tokens written for OpenAI's models)."""
    levels = [{"effort": e, "description": e} for e in ("low", "medium", "high")] if t.thinking else []
    entry = {
        "slug": t.model,
        "display_name": t.model,
        "description": f"{t.model} on Strata",
        "context_window": t.context,
        "shell_type": "default",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 0,
        "upgrade": None,
        "truncation_policy": {"mode": "bytes", "limit": 10000},
        "input_modalities": ["text", "image"] if t.vision else ["text"],
        "base_instructions": "",
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": None,
        "supports_parallel_tool_calls": False,
        "supports_reasoning_summaries": False,
        "supported_reasoning_levels": levels,
        "experimental_supported_tools": [],
    }
    if t.thinking:
        entry["default_reasoning_level"] = "medium"
    return {"models": [entry]}


def catalog_path(state_dir: Path, model: str) -> Path:
    return state_dir / "codex" / (re.sub(r"[^A-Za-z0-9._-]", "_", model) + ".models.json")


def codex_plan(t: Target, extra: list[str], *, oss: bool, state_dir: Path) -> LaunchPlan:
    catalog = catalog_path(state_dir, t.model)
    common = {
        "model_catalog_json": str(catalog),
        "model_context_window": t.context,
        "analytics.enabled": False,
        "check_for_update_on_startup": False,
    }
    env: dict[str, str] = {}
    if oss:
        if t.api_key:
            raise LaunchError("codex --oss sends no API key and this server requires one (STRATA_API_KEY): "
                              "launch codex without --oss (its custom provider sends the key)")
        head = ["codex", "--oss", "--local-provider", "ollama"]
        overrides = common
        env["CODEX_OSS_BASE_URL"] = t.base_url + "/v1"
        notes = [f"Codex's built-in Ollama provider (--oss) -> {t.base_url}/v1 (its 5-minute stream idle limit "
                 "cannot be changed: a first reply slower than that is retried)"]
    else:
        head = ["codex"]
        provider = {"model_provider": "strata", "model_providers.strata.name": "Strata",
                    "model_providers.strata.base_url": t.base_url + "/v1",
                    "model_providers.strata.wire_api": "responses",
                    "model_providers.strata.stream_idle_timeout_ms": WAIT_MS}
        if t.api_key:
            provider["model_providers.strata.env_key"] = "STRATA_API_KEY"
            env["STRATA_API_KEY"] = t.api_key
        overrides = {**provider, **common}
        notes = [f"a 'strata' provider (Responses API) -> {t.base_url}/v1"]
    argv = head + ["-m", t.model]     # -m, not `-c model=`: --oss takes its model from -m (else gpt-oss:20b)
    for key, value in overrides.items():
        argv += ["-c", f"{key}={_toml(value)}"]
    notes.append(f"model catalog for {t.model}: {catalog}")
    return LaunchPlan(argv + list(extra), env, {catalog: json.dumps(codex_catalog(t), indent=2) + "\n"}, notes)


# ---- OpenCode --------------------------------------------------------------------------------------------------

def opencode_config(t: Target) -> dict:
    model: dict = {"name": t.model, "tool_call": "tools" in t.capabilities, "reasoning": t.thinking,
                   "limit": {"context": t.context, "output": t.max_output}}
    if t.vision:
        model["modalities"] = {"input": ["text", "image"], "output": ["text"]}
    options: dict = {"baseURL": t.base_url + "/v1", "chunkTimeout": WAIT_MS}
    if t.api_key:
        options["apiKey"] = "{env:STRATA_API_KEY}"      # OpenCode substitutes it; the key stays out of the text
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"strata": {"npm": "@ai-sdk/openai-compatible", "name": "Strata", "options": options,
                                "models": {t.model: model}}},
        "model": f"strata/{t.model}",
        "small_model": f"strata/{t.model}",
        "autoupdate": False,
        "share": "disabled",
    }


def opencode_plan(t: Target, extra: list[str]) -> LaunchPlan:
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(opencode_config(t)),
           "OPENCODE_DISABLE_AUTOUPDATE": "1",
           "OPENCODE_DISABLE_SHARE": "1"}
    if t.api_key:
        env["STRATA_API_KEY"] = t.api_key
    notes = [f"a 'strata' provider (OpenAI-compatible) -> {t.base_url}/v1; model and small_model -> {t.model}"]
    return LaunchPlan(["opencode", *extra], env, {}, notes)
