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
  at by an environment variable or option, or the agent's own variables): app/cli/agents_openai.py.
Each agent is told the input budget that fits (Target.input_budget: the context minus the reply it reserves), in
its own terms: some subtract the reply themselves (Claude Code, OpenCode, Continue), the others get the budget as
their window.
Covered by tests/unit/cli/test_launch_agents.py and tests/integration/cli/test_cli_launch.py."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from app.cli.agent_target import WAIT_MS, Agent, LaunchError, LaunchPlan, Target, file_slug
from app.cli.agents_openai import PLANS

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
    return PLANS[agent.name](target, extra, state_dir)


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
    return state_dir / "codex" / (file_slug(model) + ".models.json")


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
