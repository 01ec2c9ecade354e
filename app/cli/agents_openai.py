"""The agents that reach Strata through their own documented way to a custom OpenAI-compatible server: Qwen Code,
Crush, Factory Droid, Pi, Continue CLI, GitHub Copilot CLI, aider and mini-swe-agent (a settings file in Strata's
folder that the agent is pointed at by an environment variable or option, or the agent's own variables). Pure:
each returns a `LaunchPlan`; `strata launch` writes the files (app/cli/launch.py). The agents themselves, Claude
Code, Codex and OpenCode are in app/cli/agents.py.
Covered by tests/unit/cli/test_launch_agents.py."""
from __future__ import annotations

import json
from pathlib import Path

from app.cli.agent_target import WAIT_MS, LaunchPlan, Target, api_key_of, file_slug


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
    path = state_dir / "qwen" / (file_slug(t.model) + ".settings.json")
    env = {"QWEN_CODE_SYSTEM_SETTINGS_PATH": str(path),
           "STRATA_API_KEY": api_key_of(t),
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
    folder = state_dir / "crush" / file_slug(t.model)
    env = {"CRUSH_GLOBAL_CONFIG": str(folder / "config"),
           "CRUSH_GLOBAL_DATA": str(folder / "data"),     # its remembered model choice would override ours
           "STRATA_API_KEY": api_key_of(t),
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
    home = state_dir / "droid" / file_slug(t.model)
    env = {"FACTORY_HOME_OVERRIDE": str(home), "STRATA_API_KEY": api_key_of(t),
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
    path = state_dir / "pi" / (file_slug(t.model) + ".provider.mjs")
    env = {"STRATA_API_KEY": api_key_of(t), "PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}
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
    path = state_dir / "continue" / (file_slug(t.model) + ".config.yaml")
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
    path = state_dir / "aider" / (file_slug(t.model) + ".metadata.json")
    model = f"openai/{t.model}"      # litellm's OpenAI-compatible route
    argv = ["aider", "--model", model, "--weak-model", model, "--editor-model", model,
            "--openai-api-base", t.base_url + "/v1", "--model-metadata-file", str(path),
            "--timeout", str(WAIT_MS // 1000), "--no-check-update", "--no-analytics", "--no-show-release-notes",
            *extra]
    notes = [f"aider through litellm's OpenAI route -> {t.base_url}/v1: main, weak and editor model {t.model}"]
    return LaunchPlan(argv, {"OPENAI_API_KEY": api_key_of(t), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, {path: json.dumps(aider_metadata(t), indent=2) + "\n"},
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
    path = folder / (file_slug(t.model) + ".config.yaml")
    env = {"MSWEA_GLOBAL_CONFIG_DIR": str(folder),       # its .env (and first-run setup) in Strata's folder
           "MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
           "OPENAI_API_KEY": api_key_of(t),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}       # litellm would fetch its price list at start
    notes = [f"mini-swe-agent through litellm's OpenAI route -> {t.base_url}/v1 with {t.model} (its mini.yaml, "
             "then Strata's settings)"]
    return LaunchPlan(["mini", "-m", f"openai/{t.model}", "-c", "mini.yaml", "-c", str(path), *extra], env,
                      {path: json.dumps(mini_config(t), indent=2) + "\n"}, notes)


PLANS = {"qwen": qwen_plan, "crush": crush_plan, "droid": droid_plan, "pi": pi_plan, "continue": continue_plan,
          "copilot": copilot_plan, "aider": aider_plan, "mini": mini_plan}
