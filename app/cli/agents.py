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
- Qwen Code, Crush, Factory Droid, Pi, Continue CLI, GitHub Copilot CLI, aider, mini-swe-agent: each through its own
  documented way to a custom OpenAI-compatible server (a settings file in Strata's folder that the agent is pointed
  at by an environment variable or option, or the agent's own variables); see each one's section below.
Each agent is told the input budget that fits (Target.input_budget: the context minus the reply it reserves), in
its own terms: some subtract the reply themselves (Claude Code, OpenCode, Continue), the others get the budget as
their window.
Covered by tests/unit/cli/test_launch_agents.py and tests/integration/cli/test_cli_launch.py."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
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


# first prompts measured by bench/agents_e2e.py on Qwen2.5-Coder's tokenizer (Claude Code 2.1, Codex 0.171,
# OpenCode 1.18, Qwen Code 0.15, Droid 0.225, Pi 0.73, Continue CLI 1.5, Copilot CLI 1.0.102, aider 0.86,
# mini-swe-agent 2.4: their recorded first requests under tests/support/fixtures/agents/); Crush: an estimate (it
# could not be installed where the others were recorded)
CLAUDE = Agent("claude", "Claude Code", "claude", "@anthropic-ai/claude-code", 18_000, client="claude-cli")
CODEX = Agent("codex", "Codex", "codex", "@openai/codex", 4_600, client="codex")
OPENCODE = Agent("opencode", "OpenCode", "opencode", "opencode-ai", 7_500, client="opencode")
QWEN = Agent("qwen", "Qwen Code", "qwen", "@qwen-code/qwen-code", 17_300, client="QwenCode")
CRUSH = Agent("crush", "Crush", "crush", "@charmland/crush", 8_000)
DROID = Agent("droid", "Factory Droid", "droid", "@factory/cli", 9_900, client="factory-cli")
PI = Agent("pi", "Pi", "pi", "@mariozechner/pi-coding-agent", 1_400, model_flags=("--model", "--provider"),
           client="OpenAI/JS")
CONTINUE = Agent("continue", "Continue CLI", "cn", "@continuedev/cli", 1_900, model_flags=("--model", "--config"),
                 client="ls/JS")
COPILOT = Agent("copilot", "GitHub Copilot CLI", "copilot", "@github/copilot", 11_100, model_flags=("--model",),
                client="OpenAI/JS")
AIDER = Agent("aider", "aider", "aider", "aider-chat", 700, registry="pypi",
              model_flags=("--model", "--weak-model", "--editor-model", "--openai-api-base"), client="OpenAI/Python")
MINI = Agent("mini", "mini-swe-agent", "mini", "mini-swe-agent", 900, registry="pypi",
             model_flags=("-m", "--model", "--model-class"), client="OpenAI/Python")
AGENTS = {a.name: a for a in (CLAUDE, CODEX, OPENCODE, QWEN, CRUSH, DROID, PI, CONTINUE, COPILOT, AIDER, MINI)}

def _refuse_model_args(agent: Agent, extra: list[str]) -> None:
    """Arguments that would choose another model or provider behind launch's back: refused with a pointer to
    --model (each agent's own spelling: aider's `-m` is its message, not a model)."""
    for arg in extra:
        if arg in agent.model_flags or any(arg.startswith(f + "=") for f in agent.model_flags if f.startswith("--")):
            raise LaunchError(f"strata launch chooses {agent.title}'s model: use `strata launch {agent.name} "
                              f"--model NAME` instead of {arg!r} after `--`")


def plan(agent: Agent, target: Target, extra: list[str], *, oss: bool = False, state_dir: Path) -> LaunchPlan:
    """The launch plan of `agent` against `target`; `extra`: the user's own arguments for the agent (after its
    options); `state_dir`: Strata's folder for files an agent reads (Codex's model catalog, other agents'
    settings files)."""
    _refuse_model_args(agent, extra)
    if oss and agent is not CODEX:
        raise LaunchError("--oss is Codex's option (its built-in Ollama provider)")
    if agent is CODEX:
        return codex_plan(target, extra, oss=oss, state_dir=state_dir)
    if agent is CLAUDE:
        return claude_plan(target, extra)
    if agent is OPENCODE:
        return opencode_plan(target, extra)
    return _PLANS[agent.name](target, extra, state_dir)


def _slug(model: str) -> str:
    """A model's name as a file name (no `:` or `/`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model)


def _key(t: Target) -> str:
    """The API key an agent sends: the server's, else a placeholder (agents that insist on one get it; a server
    without STRATA_API_KEY takes any)."""
    return t.api_key or "strata"


# ---- Claude Code ---------------------------------------------------------------------------------------------

# Claude Code 2.1.197 (read from its code): the window is CLAUDE_CODE_MAX_CONTEXT_TOKENS for a model whose name does
# not start with "claude-"; its input budget is that window less min(CLAUDE_CODE_MAX_OUTPUT_TOKENS, 20,000); it
# compacts 13,000 tokens below the budget and refuses to send 3,000 below it -- but only when its compaction window
# has a source other than "auto". With no CLAUDE_CODE_AUTO_COMPACT_WINDOW (nor a /autocompact setting) the window's
# source is "auto", and then it neither compacts before a request nor refuses one: it sends the conversation
# whatever its size and compacts only after the server answers "prompt is too long". Launch sets
# CLAUDE_CODE_AUTO_COMPACT_WINDOW to the context (Claude Code raises it to at least 100,000, then caps it at the
# window: the window it already has) so that compaction runs before a request could be refused -- unless its
# compaction point sits so close above its own first request that every turn would compact again (after 3 quick
# refills it gives up compacting and then refuses to send past budget - 3,000): then reactive compaction is the
# better of the two, and the note says what context (or fewer tools) lets it compact ahead.
CLAUDE_COMPACT_BUFFER = 13_000
CLAUDE_FEW_TOOLS_FIRST_PROMPT = 3_000   # its first request with `--tools Read,Write,Bash` (2,750 measured)
CLAUDE_ROOM = 4_000                     # conversation above the first request before compacting pays (a summary)


def claude_compacts_at(t: Target) -> int:
    """The prompt size past which Claude Code compacts, by its own arithmetic on what launch tells it."""
    return t.context - min(t.max_output, 20_000) - CLAUDE_COMPACT_BUFFER


def claude_first_prompt(extra: list[str]) -> int:
    """Claude Code's first request in tokens for its arguments: every built-in tool unless `--tools` names a few."""
    for i, arg in enumerate(extra):
        if arg == "--tools" and i + 1 < len(extra):
            value = extra[i + 1]
        elif arg.startswith("--tools="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return CLAUDE.first_prompt if value.strip().lower() == "default" else CLAUDE_FEW_TOOLS_FIRST_PROMPT
    return CLAUDE.first_prompt


def claude_compacts_ahead(t: Target, first_prompt: int) -> bool:
    """Whether Claude Code's compaction point leaves a conversation room above its first request."""
    return claude_compacts_at(t) >= first_prompt + CLAUDE_ROOM

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
        # its `<total_tokens>N tokens left</total_tokens>` block (in the system prompt and after every tool
        # result) counts down on every request when a setting or Anthropic's flag service turns it on, and a
        # system prompt that changes on every request defeats the prompt cache: off, whatever else says
        "CLAUDE_CODE_TOTAL_TOKENS_REMINDER": "off",
        "API_TIMEOUT_MS": str(WAIT_MS),
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(WAIT_MS),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    }
    notes = [f"every model tier Claude Code asks for (opus, sonnet, haiku, fable, subagents, auto mode) -> "
             f"{t.model}",
             f"Claude Code's input budget: {t.context:,} - {min(t.max_output, 20_000):,} (its reply) = "
             f"{t.context - min(t.max_output, 20_000):,} tokens; it compacts the conversation "
             f"{CLAUDE_COMPACT_BUFFER:,} below that"]
    first = claude_first_prompt(extra)
    if claude_compacts_ahead(t, first):
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(t.context)
        notes.append(f"Claude Code compacts the conversation past {claude_compacts_at(t):,} tokens, before a request "
                     "could go past the context (CLAUDE_CODE_AUTO_COMPACT_WINDOW; over your /autocompact setting)")
    else:
        enough = t.context
        while not claude_compacts_ahead(replace(t, context=enough), first):
            enough += 1024
        fewer = "" if first < CLAUDE.first_prompt else " or fewer tools (e.g. `-- --tools Read,Edit,Write,Bash`)"
        notes.append(f"Claude Code's first request is about {first:,} tokens and it would compact past "
                     f"{claude_compacts_at(t):,}, before every turn: it compacts only once a request no longer fits "
                     f"(the server answers \"prompt is too long\", as Anthropic's API does). A context of "
                     f"{enough:,} or more{fewer} lets it compact before")
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
    return state_dir / "codex" / (_slug(model) + ".models.json")


def codex_plan(t: Target, extra: list[str], *, oss: bool, state_dir: Path) -> LaunchPlan:
    catalog = catalog_path(state_dir, t.model)
    common = {
        "model_catalog_json": str(catalog),
        "model_context_window": t.context,
        # Codex does not send max_output_tokens: a reply may run to the end of the context. It compacts when a
        # turn's tokens pass this limit (by default 90% of the window): the input budget leaves the reply room.
        "model_auto_compact_token_limit": t.input_budget,
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
                   # OpenCode compacts past limit.input (else context - output): the same input budget either way
                   "limit": {"context": t.context, "input": t.input_budget, "output": t.max_output}}
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


# ---- Qwen Code -------------------------------------------------------------------------------------------------

QWEN_COMPRESS_AT = 0.9


def qwen_settings(t: Target) -> dict:
    """Qwen Code's settings, read as its *system* settings file (QWEN_CODE_SYSTEM_SETTINGS_PATH), which overrides the
    user's and the project's: one OpenAI-compatible provider entry for the model (its generationConfig is sealed:
    nothing of the user's leaks into it), the model for the main loop and the `fastModel` (suggestions,
    speculation), the input budget as its context window (it does not subtract the reply itself) and compression
    at 90% of it, usage statistics, telemetry and auto-update off."""
    generation: dict = {"timeout": WAIT_MS, "contextWindowSize": t.input_budget}
    if t.vision:
        generation["modalities"] = {"image": True}
    return {
        "security": {"auth": {"selectedType": "openai"}},
        # it compresses at 70% of the window by default; the window here is already the input budget (the reply
        # is set apart), and its own first request (~17,000 tokens) is 70% of a 24,576 budget: 90%
        "model": {"name": t.model, "chatCompression": {"contextPercentageThreshold": QWEN_COMPRESS_AT}},
        "fastModel": t.model,
        "modelProviders": {"openai": [{"id": t.model, "name": f"{t.model} (Strata)", "envKey": "STRATA_API_KEY",
                                       "baseUrl": t.base_url + "/v1", "generationConfig": generation}]},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"enableAutoUpdate": False},
    }


def qwen_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    path = state_dir / "qwen" / (_slug(t.model) + ".settings.json")
    env = {"QWEN_CODE_SYSTEM_SETTINGS_PATH": str(path),
           "STRATA_API_KEY": _key(t),
           "QWEN_CODE_MAX_OUTPUT_TOKENS": str(t.max_output),   # a fixed reply size (else 8K, retried at 64K)
           "QWEN_TELEMETRY_ENABLED": "false"}
    notes = [f"a Qwen Code system settings file (over the user's own settings, which stay as they are): provider "
             f"'openai' -> {t.base_url}/v1, model and fastModel -> {t.model}, context window {t.input_budget:,} "
             f"(the input budget)"]
    return LaunchPlan(["qwen", "--auth-type", "openai", "--model", t.model, *extra], env,
                      {path: json.dumps(qwen_settings(t), indent=2) + "\n"}, notes)


# ---- Crush -------------------------------------------------------------------------------------------------------

def crush_config(t: Target) -> dict:
    """Crush's crush.json in a global config folder of Strata's own (CRUSH_GLOBAL_CONFIG; a project's own crush.json
    still merges over it): an `openai-compat` provider with the model, its window (Crush summarizes when 20% of
    it is left and does not subtract the reply: the input budget) and reply size, the model for both of Crush's
    tiers (`large`, `small`), metrics and provider auto-update off."""
    model = {"id": t.model, "name": t.model, "context_window": t.input_budget, "default_max_tokens": t.max_output,
             "can_reason": t.thinking, "supports_attachments": t.vision,
             "cost_per_1m_in": 0, "cost_per_1m_out": 0, "cost_per_1m_in_cached": 0, "cost_per_1m_out_cached": 0}
    chosen = {"model": t.model, "provider": "strata", "max_tokens": t.max_output}
    return {
        "$schema": "https://charm.land/crush.json",
        "providers": {"strata": {"name": "Strata", "type": "openai-compat", "base_url": t.base_url + "/v1",
                                 "api_key": "$STRATA_API_KEY", "models": [model]}},
        "models": {"large": chosen, "small": dict(chosen)},
        "options": {"disable_metrics": True, "disable_provider_auto_update": True},
    }


def crush_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    folder = state_dir / "crush" / _slug(t.model)
    env = {"CRUSH_GLOBAL_CONFIG": str(folder / "config"),
           "CRUSH_GLOBAL_DATA": str(folder / "data"),     # its remembered model choice would override ours
           "STRATA_API_KEY": _key(t),
           "CRUSH_DISABLE_METRICS": "1", "DO_NOT_TRACK": "1",
           "CRUSH_DISABLE_PROVIDER_AUTO_UPDATE": "1"}
    notes = [f"Crush's global config in Strata's folder ({folder}): provider 'strata' (openai-compat) -> "
             f"{t.base_url}/v1, large and small models -> {t.model}"]
    return LaunchPlan(["crush", *extra], env,
                      {folder / "config" / "crush.json": json.dumps(crush_config(t), indent=2) + "\n"}, notes)


# ---- Factory Droid -----------------------------------------------------------------------------------------------

DROID_MODEL_ID = "custom:Strata-0"     # Droid names a custom model `custom:<displayName>-<index>`


def droid_settings(t: Target) -> dict:
    """Droid's settings.json in a home of Strata's own (FACTORY_HOME_OVERRIDE: Droid reads <home>/.factory): one
    BYOK custom model through its generic Chat Completions provider, with the reply size and the input budget
    (`maxContextLimit`), chosen as the session's default model; auto-update off."""
    return {
        "customModels": [{"model": t.model, "displayName": "Strata", "baseUrl": t.base_url + "/v1",
                          "apiKey": "${STRATA_API_KEY}", "provider": "generic-chat-completion-api",
                          "maxOutputTokens": t.max_output, "maxContextLimit": t.input_budget,
                          "noImageSupport": not t.vision}],
        "sessionDefaultSettings": {"model": DROID_MODEL_ID},
        "enableDroidAutoUpdate": False,
    }


def droid_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    home = state_dir / "droid" / _slug(t.model)
    env = {"FACTORY_HOME_OVERRIDE": str(home), "STRATA_API_KEY": _key(t),
           # its air-gapped mode: nothing sent to Factory (without it, telemetry and session sync go to
           # telemetry.factory.ai / api.factory.ai on every run, a BYOK model or not); no sign-in needed
           "FACTORY_AIRGAP_ENABLED": "true",
           "FACTORY_DROID_AUTO_UPDATE_ENABLED": "false", "FACTORYD_DISABLE_AUTO_UPDATE": "1"}
    notes = [f"Droid's home in Strata's folder ({home}): custom model {DROID_MODEL_ID} -> {t.model} at "
             f"{t.base_url}/v1 (generic Chat Completions); `droid exec` takes it as `-m {DROID_MODEL_ID}` too"]
    return LaunchPlan(["droid", *extra], env,
                      {home / ".factory" / "settings.json": json.dumps(droid_settings(t), indent=2) + "\n"}, notes)


# ---- Pi ------------------------------------------------------------------------------------------------------------

def pi_provider(t: Target) -> dict:
    """Pi's provider record (registered by an extension Strata writes: the user's ~/.pi/agent stays as it is):
    OpenAI Chat Completions, `max_tokens` as the field, a system message instead of `developer`, no `store`."""
    return {
        "name": "Strata", "baseUrl": t.base_url + "/v1", "apiKey": "STRATA_API_KEY", "api": "openai-completions",
        "models": [{"id": t.model, "name": f"{t.model} (Strata)", "reasoning": t.thinking,
                    "input": ["text", "image"] if t.vision else ["text"],
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": t.context, "maxTokens": t.max_output,
                    "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": t.thinking,
                               "supportsStore": False, "maxTokensField": "max_tokens"}}],
    }


def pi_extension(t: Target) -> str:
    return ("// Written by `strata launch pi`: registers this Strata server as Pi's provider 'strata'.\n"
            f"export default function (pi) {{\n  pi.registerProvider(\"strata\", {json.dumps(pi_provider(t))});\n}}\n")


def pi_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    path = state_dir / "pi" / (_slug(t.model) + ".provider.mjs")
    env = {"STRATA_API_KEY": _key(t), "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}
    notes = [f"a Pi extension registering provider 'strata' -> {t.base_url}/v1 with {t.model} (window "
             f"{t.context:,}; Pi compacts {t.context:,} less its compaction.reserveTokens, 16,384 unless set)"]
    return LaunchPlan(["pi", "-e", str(path), "--provider", "strata", "--model", t.model, *extra], env,
                      {path: pi_extension(t)}, notes)


# ---- Continue CLI --------------------------------------------------------------------------------------------------

def continue_config(t: Target) -> dict:
    """Continue's config (`cn --config FILE`; JSON is YAML): the model through its `openai` provider for every role
    the CLI asks for, with the context length and reply size (Continue keeps the prompt within context - maxTokens)
    and a 30-minute request timeout."""
    caps = ["tool_use"] + (["image_input"] if t.vision else [])
    return {"name": "Strata", "version": "1.0.0", "schema": "v1",
            "models": [{"name": t.model, "provider": "openai", "model": t.model, "apiBase": t.base_url + "/v1",
                        "apiKey": "${{ secrets.STRATA_API_KEY }}" if t.api_key else "strata",
                        "roles": ["chat", "edit", "apply", "summarize", "subagent"], "capabilities": caps,
                        "defaultCompletionOptions": {"contextLength": t.context, "maxTokens": t.max_output},
                        "requestOptions": {"timeout": WAIT_MS // 1000}}]}


def continue_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    path = state_dir / "continue" / (_slug(t.model) + ".config.yaml")
    env = {"CONTINUE_METRICS_ENABLED": "0", "CONTINUE_CLI_ENABLE_TELEMETRY": "0",
           # what Continue sets in the process it restarts after updating itself: no update check acts on it
           "CONTINUE_CLI_AUTO_UPDATED": "1"}
    if t.api_key:
        env["STRATA_API_KEY"] = t.api_key
    notes = [f"a Continue config file with {t.model} at {t.base_url}/v1 for every role (cn --config)"]
    return LaunchPlan(["cn", "--config", str(path), *extra], env,
                      {path: json.dumps(continue_config(t), indent=2) + "\n"}, notes)


# ---- GitHub Copilot CLI --------------------------------------------------------------------------------------------

def copilot_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    """Copilot CLI's own "bring your own model" variables (`copilot help providers`): no GitHub sign-in, offline
    mode (no telemetry, nothing sent to GitHub), the input budget and reply size."""
    env = {"COPILOT_PROVIDER_BASE_URL": t.base_url + "/v1", "COPILOT_PROVIDER_TYPE": "openai",
           "COPILOT_PROVIDER_WIRE_API": "completions", "COPILOT_MODEL": t.model,
           "COPILOT_PROVIDER_MAX_PROMPT_TOKENS": str(t.input_budget),
           "COPILOT_PROVIDER_MAX_OUTPUT_TOKENS": str(t.max_output),
           "COPILOT_OFFLINE": "true", "COPILOT_AUTO_UPDATE": "false"}
    if t.api_key:
        env["COPILOT_PROVIDER_API_KEY"] = t.api_key
    notes = [f"Copilot CLI's own provider (BYOK) -> {t.base_url}/v1, model {t.model}, offline mode"]
    return LaunchPlan(["copilot", *extra], env, {}, notes)


# ---- aider ---------------------------------------------------------------------------------------------------------

def aider_metadata(t: Target) -> dict:
    """aider's --model-metadata-file (litellm's model record): the input budget, the reply size, no cost."""
    return {f"openai/{t.model}": {"max_input_tokens": t.input_budget, "max_output_tokens": t.max_output,
                                  "max_tokens": t.max_output, "input_cost_per_token": 0.0,
                                  "output_cost_per_token": 0.0, "litellm_provider": "openai", "mode": "chat",
                                  "supports_function_calling": True, "supports_vision": t.vision}}


def aider_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    path = state_dir / "aider" / (_slug(t.model) + ".metadata.json")
    model = f"openai/{t.model}"      # litellm's OpenAI-compatible route
    argv = ["aider", "--model", model, "--weak-model", model, "--editor-model", model,
            "--openai-api-base", t.base_url + "/v1", "--model-metadata-file", str(path),
            "--timeout", str(WAIT_MS // 1000), "--no-check-update", "--no-analytics", "--no-show-release-notes",
            *extra]
    notes = [f"aider through litellm's OpenAI route -> {t.base_url}/v1: main, weak and editor model {t.model}"]
    return LaunchPlan(argv, {"OPENAI_API_KEY": _key(t), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, {path: json.dumps(aider_metadata(t), indent=2) + "\n"},
                      notes)


# ---- mini-swe-agent ------------------------------------------------------------------------------------------------

def mini_config(t: Target) -> dict:
    """mini-swe-agent's config layered over its own `mini.yaml` (`-c mini.yaml -c FILE`): litellm's OpenAI route to
    this server with the reply size and a 30-minute timeout, no cost accounting (a local model has no price, which
    litellm would otherwise call an error) and no cost limit."""
    return {"model": {"model_name": f"openai/{t.model}", "cost_tracking": "ignore_errors",
                      "model_kwargs": {"api_base": t.base_url + "/v1", "max_tokens": t.max_output,
                                       "timeout": WAIT_MS // 1000}},
            "agent": {"cost_limit": 0}}


def mini_plan(t: Target, extra: list[str], state_dir: Path) -> LaunchPlan:
    folder = state_dir / "mini"
    path = folder / (_slug(t.model) + ".config.yaml")
    env = {"MSWEA_GLOBAL_CONFIG_DIR": str(folder),       # its .env (and first-run setup) in Strata's folder
           "MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
           "OPENAI_API_KEY": _key(t),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}       # litellm would fetch its price list at start
    notes = [f"mini-swe-agent through litellm's OpenAI route -> {t.base_url}/v1 with {t.model} (its mini.yaml, "
             "then Strata's settings)"]
    return LaunchPlan(["mini", "-m", f"openai/{t.model}", "-c", "mini.yaml", "-c", str(path), *extra], env,
                      {path: json.dumps(mini_config(t), indent=2) + "\n"}, notes)


_PLANS = {"qwen": qwen_plan, "crush": crush_plan, "droid": droid_plan, "pi": pi_plan, "continue": continue_plan,
          "copilot": copilot_plan, "aider": aider_plan, "mini": mini_plan}
