"""What each coding agent is given by `strata launch` (app/cli/agents.py): the environment, command line and
files per agent, every model name the agent asks for mapped to the chosen model, the context window and reply
size from the server's numbers, telemetry off, and nothing written outside Strata's own folder. Codex's `-c`
values are parsed back as TOML (what Codex does with them); its catalog is checked against the fields Codex's
ModelInfo requires."""
from __future__ import annotations

import json
import tomllib

import pytest

from app.cli.agents import (AGENTS, AIDER, CLAUDE, CLAUDE_ROOM, CODEX, CONTINUE, COPILOT, CRUSH, DROID,
                            MINI, OPENCODE, PI, QWEN, LaunchError, Target, catalog_path, claude_compacts_at,
                            codex_catalog, opencode_config, plan)
from app.cli.agents_openai import DROID_MODEL_ID

BASE = "http://127.0.0.1:11434"
CODER = Target(BASE, "coder:0.5b", 32768, ("completion", "tools", "insert"))
THINKER = Target(BASE, "qwen3:8b", 40960, ("completion", "tools", "thinking", "vision"), api_key="s3cret")
# Codex's ModelInfo fields that have no serde default: a catalog entry without one fails to parse
CODEX_REQUIRED = {"slug", "display_name", "description", "supported_reasoning_levels", "shell_type", "visibility",
                  "supported_in_api", "priority", "upgrade", "base_instructions", "supports_reasoning_summaries",
                  "support_verbosity", "default_verbosity", "apply_patch_tool_type", "truncation_policy",
                  "supports_parallel_tool_calls", "experimental_supported_tools"}


def overrides(argv: list[str]) -> dict:
    """Codex's `-c key=value` pairs, each value parsed as the TOML Codex reads it as."""
    out = {}
    for i, a in enumerate(argv):
        if a == "-c":
            key, _, value = argv[i + 1].partition("=")
            out[key] = tomllib.loads(f"v = {value}")["v"]
    return out


def test_reply_size_is_a_quarter_of_the_context_within_bounds():
    assert CODER.max_output == 8192
    assert Target(BASE, "m", 1_000_000).max_output == 32000
    assert Target(BASE, "m", 512).max_output == 256


def test_claude_gets_every_model_tier_the_context_and_no_telemetry(tmp_path):
    p = plan(CLAUDE, CODER, ["-p", "hello"], state_dir=tmp_path)
    assert p.argv == ["claude", "--model", "coder:0.5b", "-p", "hello"]
    e = p.env
    assert e["ANTHROPIC_BASE_URL"] == BASE and e["ANTHROPIC_AUTH_TOKEN"] == "strata" and e["ANTHROPIC_API_KEY"] == ""
    for k in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
              "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_FABLE_MODEL", "ANTHROPIC_SMALL_FAST_MODEL",
              "CLAUDE_CODE_SUBAGENT_MODEL", "CLAUDE_CODE_AUTO_MODE_MODEL", "CLAUDE_CODE_BG_CLASSIFIER_MODEL"):
        assert e[k] == "coder:0.5b", k
    assert e["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768" and e["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "8192"
    for k in ("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER",
              "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "CLAUDE_CODE_DISABLE_THINKING"):
        assert e[k] == "1", k
    assert e["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    assert e["API_TIMEOUT_MS"] == e["CLAUDE_STREAM_IDLE_TIMEOUT_MS"] == "1800000"
    assert p.files == {}


def test_claude_sends_the_servers_api_key_and_thinks_when_the_model_can(tmp_path):
    e = plan(CLAUDE, THINKER, [], state_dir=tmp_path).env
    assert e["ANTHROPIC_AUTH_TOKEN"] == "s3cret"
    assert "CLAUDE_CODE_DISABLE_THINKING" not in e


def test_codex_custom_provider_overrides_parse_as_toml(tmp_path):
    p = plan(CODEX, CODER, ["exec", "--skip-git-repo-check", "do it"], state_dir=tmp_path)
    assert p.argv[0] == "codex" and p.argv[-3:] == ["exec", "--skip-git-repo-check", "do it"]
    c = overrides(p.argv)
    assert c["model_provider"] == "strata"
    assert c["model_providers.strata.base_url"] == BASE + "/v1"
    assert c["model_providers.strata.wire_api"] == "responses"
    assert c["model_providers.strata.stream_idle_timeout_ms"] == 1_800_000
    assert p.argv[1:3] == ["-m", "coder:0.5b"] and c["model_context_window"] == 32768
    assert c["analytics.enabled"] is False and c["check_for_update_on_startup"] is False
    assert "model_providers.strata.env_key" not in c and p.env == {}
    path = catalog_path(tmp_path, "coder:0.5b")
    assert c["model_catalog_json"] == str(path)
    assert path.parent == tmp_path / "codex" and ":" not in path.name
    assert json.loads(p.files[path]) == codex_catalog(CODER)


def test_codex_with_an_api_key_names_the_variable_that_carries_it(tmp_path):
    p = plan(CODEX, THINKER, [], state_dir=tmp_path)
    assert overrides(p.argv)["model_providers.strata.env_key"] == "STRATA_API_KEY"
    assert p.env == {"STRATA_API_KEY": "s3cret"}
    assert "s3cret" not in " ".join(p.argv)


def test_codex_oss_points_its_builtin_provider_here(tmp_path):
    p = plan(CODEX, CODER, ["exec", "x"], oss=True, state_dir=tmp_path)
    assert p.argv[:6] == ["codex", "--oss", "--local-provider", "ollama", "-m", "coder:0.5b"]
    c = overrides(p.argv)
    assert "model_provider" not in c and "model" not in c
    assert p.env["CODEX_OSS_BASE_URL"] == BASE + "/v1"
    with pytest.raises(LaunchError, match="API key"):
        plan(CODEX, THINKER, [], oss=True, state_dir=tmp_path)


def test_codex_catalog_has_every_field_codex_requires():
    plain = codex_catalog(CODER)["models"][0]
    assert CODEX_REQUIRED <= set(plain)
    assert plain["slug"] == "coder:0.5b" and plain["context_window"] == 32768
    assert plain["input_modalities"] == ["text"] and plain["supported_reasoning_levels"] == []
    assert "default_reasoning_level" not in plain
    thinker = codex_catalog(THINKER)["models"][0]
    assert thinker["input_modalities"] == ["text", "image"]
    assert [x["effort"] for x in thinker["supported_reasoning_levels"]] == ["low", "medium", "high"]
    assert thinker["default_reasoning_level"] == "medium"


def test_opencode_gets_a_provider_with_the_models_limits(tmp_path):
    p = plan(OPENCODE, CODER, ["run", "hi"], state_dir=tmp_path)
    assert p.argv == ["opencode", "run", "hi"] and p.files == {}
    cfg = json.loads(p.env["OPENCODE_CONFIG_CONTENT"])
    assert cfg == opencode_config(CODER)
    provider = cfg["provider"]["strata"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": BASE + "/v1", "chunkTimeout": 1_800_000}
    model = provider["models"]["coder:0.5b"]
    assert model["limit"] == {"context": 32768, "input": 32768 - 8192, "output": 8192}
    assert model["tool_call"] is True and model["reasoning"] is False and "modalities" not in model
    assert cfg["model"] == cfg["small_model"] == "strata/coder:0.5b"
    assert cfg["autoupdate"] is False and cfg["share"] == "disabled"
    assert p.env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"


def test_opencode_reads_the_api_key_from_the_environment(tmp_path):
    p = plan(OPENCODE, THINKER, [], state_dir=tmp_path)
    cfg = json.loads(p.env["OPENCODE_CONFIG_CONTENT"])
    assert cfg["provider"]["strata"]["options"]["apiKey"] == "{env:STRATA_API_KEY}"
    assert "s3cret" not in p.env["OPENCODE_CONFIG_CONTENT"] and p.env["STRATA_API_KEY"] == "s3cret"
    model = cfg["provider"]["strata"]["models"]["qwen3:8b"]
    assert model["reasoning"] is True and model["modalities"]["input"] == ["text", "image"]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_model_chosen_behind_launchs_back_is_refused(agent, tmp_path):
    a = AGENTS[agent]
    assert "--model" in a.model_flags
    for arg in [*a.model_flags, "--model=other"]:
        with pytest.raises(LaunchError, match="--model NAME"):
            plan(a, CODER, [arg, "other"], state_dir=tmp_path)


def test_aiders_dash_m_is_its_message_not_a_model(tmp_path):
    p = plan(AIDER, CODER, ["-m", "add a test", "--yes-always"], state_dir=tmp_path)
    assert p.argv[-3:] == ["-m", "add a test", "--yes-always"]


def test_oss_is_codexs_alone(tmp_path):
    with pytest.raises(LaunchError, match="Codex"):
        plan(CLAUDE, CODER, [], oss=True, state_dir=tmp_path)


def test_install_hints_name_the_packages():
    hints = {a.name: a.install_hint for a in AGENTS.values()}
    assert {k: v for k, v in hints.items() if k in ("claude", "codex", "opencode")} == {
        "claude": "npm install -g @anthropic-ai/claude-code", "codex": "npm install -g @openai/codex",
        "opencode": "npm install -g opencode-ai"}
    assert hints["qwen"] == "npm install -g @qwen-code/qwen-code"
    assert hints["crush"] == "npm install -g @charmland/crush"
    assert hints["droid"] == "npm install -g @factory/cli"
    assert hints["pi"] == "npm install -g @mariozechner/pi-coding-agent"
    assert hints["continue"] == "npm install -g @continuedev/cli"
    assert hints["copilot"] == "npm install -g @github/copilot"
    assert hints["aider"].startswith("pipx install aider-chat")
    assert hints["mini"].startswith("pipx install mini-swe-agent")


def test_a_context_too_small_for_the_agents_first_prompt_is_said():
    assert CLAUDE.context_warning(CODER) is None
    small = Target(BASE, "coder:0.5b", 8192, CODER.capabilities)
    assert "18,000 tokens" in CLAUDE.context_warning(small) and "8,192" in CLAUDE.context_warning(small)
    assert CODEX.context_warning(small) is None


# ---- the input budget each agent is told -------------------------------------------------------------------------
# Each agent compacts its conversation by its own rule; what launch tells it must make that rule land at the
# context minus the reply it reserves (Target.input_budget), or below, never above.

def test_the_input_budget_is_the_context_less_the_reply():
    assert CODER.input_budget == 32768 - 8192
    assert THINKER.input_budget == 40960 - 10240
    assert Target(BASE, "m", 1_000_000).input_budget == 1_000_000 - 32000


@pytest.mark.parametrize("target", [CODER, THINKER, Target(BASE, "big", 262144, ("completion", "tools"))])
def test_claude_codes_own_arithmetic_gives_the_input_budget(target, tmp_path):
    """Claude Code 2.1 (its code): the window is CLAUDE_CODE_MAX_CONTEXT_TOKENS for a non-`claude-` model name, the
    input budget that window less min(CLAUDE_CODE_MAX_OUTPUT_TOKENS, 20000), compaction 13,000 below it."""
    e = plan(CLAUDE, target, [], state_dir=tmp_path).env
    window, out = int(e["CLAUDE_CODE_MAX_CONTEXT_TOKENS"]), int(e["CLAUDE_CODE_MAX_OUTPUT_TOKENS"])
    assert window == target.context and out == target.max_output
    budget = window - min(out, 20000)
    assert budget <= target.input_budget + max(0, target.max_output - 20000)   # its reserve is capped at 20,000
    assert budget + out <= target.context or out > 20000
    assert not target.model.startswith("claude-")


def test_claude_codes_token_countdown_is_off(tmp_path):
    """Its `<total_tokens>N tokens left</total_tokens>` block would change the system prompt on every request
    (the recorded sessions under fixtures/agents/claude-code were made with it off: none carries the block)."""
    e = plan(CLAUDE, CODER, [], state_dir=tmp_path).env
    assert e["CLAUDE_CODE_TOTAL_TOKENS_REMINDER"] == "off"


def test_claude_code_says_where_it_compacts(tmp_path):
    notes = " ".join(plan(CLAUDE, CODER, [], state_dir=tmp_path).notes)
    assert "32,768 - 8,192 (its reply) = 24,576 tokens" in notes and "13,000 below" in notes


def test_claude_code_compacts_ahead_where_its_compaction_point_leaves_room(tmp_path):
    """Claude Code 2.1.197 compacts before a request only when its compaction window has a source other than
    "auto" (CLAUDE_CODE_AUTO_COMPACT_WINDOW); without one it compacts after a "prompt is too long". Launch sets it
    (to the context: Claude Code raises it to 100,000 and caps it at the window) where the compaction point
    (context - reply - 13,000) sits at least CLAUDE_ROOM above the agent's first request; below that every turn
    would compact again, so it is left to compact on the server's answer, and the note names the context (or the
    smaller tool set) that lets it compact ahead."""
    big = Target(BASE, "big", 131072, ("completion", "tools"))
    e = plan(CLAUDE, big, [], state_dir=tmp_path)
    assert e.env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "131072"
    assert "compacts the conversation past 98,072 tokens" in " ".join(e.notes)
    # 32,768: it would compact past 11,576, below its own 18,000-token first request
    e = plan(CLAUDE, CODER, [], state_dir=tmp_path)
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in e.env
    notes = " ".join(e.notes)
    assert "would compact past 11,576" in notes and "prompt is too long" in notes
    assert "47,104 or more or fewer tools" in notes
    assert claude_compacts_at(Target(BASE, "m", 47104)) >= CLAUDE.first_prompt + CLAUDE_ROOM
    assert claude_compacts_at(Target(BASE, "m", 47104 - 1024)) < CLAUDE.first_prompt + CLAUDE_ROOM
    assert plan(CLAUDE, Target(BASE, "m", 47104, ("completion", "tools")), [],
                state_dir=tmp_path).env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "47104"
    # a few tools (its first request ~2,750 tokens): 32,768 leaves room
    for tools in (["--tools", "Read,Write,Bash"], ["--tools=Read,Write"], ["-p", "x", "--tools", ""]):
        assert plan(CLAUDE, CODER, tools, state_dir=tmp_path).env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "32768"
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in plan(CLAUDE, CODER, ["--tools", "default"],
                                                         state_dir=tmp_path).env
    # too small for even that: the note does not suggest fewer tools
    small = Target(BASE, "m", 16384, ("completion", "tools"))
    notes = " ".join(plan(CLAUDE, small, ["--tools", "Read"], state_dir=tmp_path).notes)
    assert "fewer tools" not in notes and "or more lets it compact before" in notes


def test_codex_compacts_at_the_input_budget(tmp_path):
    c = overrides(plan(CODEX, CODER, [], state_dir=tmp_path).argv)
    assert c["model_context_window"] == 32768 and c["model_auto_compact_token_limit"] == 32768 - 8192
    c = overrides(plan(CODEX, CODER, [], oss=True, state_dir=tmp_path).argv)
    assert c["model_auto_compact_token_limit"] == 32768 - 8192


# ---- the other agents: each one's settings for this server, in Strata's folder or the environment --------------

def written(p, suffix: str) -> dict:
    (path,) = [k for k in p.files if k.name.endswith(suffix)]
    return json.loads(p.files[path])


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_every_agent_reaches_this_server_without_touching_the_users_files(agent, tmp_path):
    a = AGENTS[agent]
    p = plan(a, CODER, ["x"], state_dir=tmp_path)
    assert p.argv[0] == a.command and p.argv[-1] == "x"
    text = " ".join([*p.argv, *p.env.values(), *p.files.values()])
    assert BASE in text and "coder:0.5b" in text
    for path in p.files:
        assert tmp_path in path.parents                     # Strata's own folder, nothing under the user's home
    assert "HOME" not in p.env and "XDG_CONFIG_HOME" not in p.env
    assert "s3cret" not in " ".join([*p.argv, *p.files.values()])   # a key travels in the environment only
    keyed = plan(a, THINKER, [], state_dir=tmp_path)
    assert "s3cret" not in " ".join([*keyed.argv, *keyed.files.values()])
    assert "s3cret" in keyed.env.values()


def test_qwen_code_gets_a_system_settings_file_with_one_sealed_provider(tmp_path):
    p = plan(QWEN, CODER, ["-p", "hi"], state_dir=tmp_path)
    assert p.argv == ["qwen", "--auth-type", "openai", "--model", "coder:0.5b", "-p", "hi"]
    s = written(p, ".settings.json")
    assert p.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"] == str(next(iter(p.files)))
    (entry,) = s["modelProviders"]["openai"]
    assert entry["id"] == s["model"]["name"] == s["fastModel"] == "coder:0.5b"
    assert entry["baseUrl"] == BASE + "/v1" and entry["envKey"] == "STRATA_API_KEY"
    assert entry["generationConfig"]["contextWindowSize"] == CODER.input_budget
    # compressing at 90% of the budget, above its own first request (17,221 tokens recorded)
    assert s["model"]["chatCompression"]["contextPercentageThreshold"] * CODER.input_budget > QWEN.first_prompt
    assert entry["generationConfig"]["timeout"] == 1_800_000
    assert s["security"]["auth"]["selectedType"] == "openai"
    assert s["privacy"]["usageStatisticsEnabled"] is False and s["telemetry"]["enabled"] is False
    assert s["general"]["enableAutoUpdate"] is False
    assert p.env["QWEN_CODE_MAX_OUTPUT_TOKENS"] == "8192" and p.env["STRATA_API_KEY"] == "strata"
    assert p.env["QWEN_TELEMETRY_ENABLED"] == "false"


def test_crush_gets_a_global_config_folder_of_its_own(tmp_path):
    p = plan(CRUSH, CODER, ["run", "hi"], state_dir=tmp_path)
    assert p.argv == ["crush", "run", "hi"]
    (path,) = p.files
    assert path.name == "crush.json" and p.env["CRUSH_GLOBAL_CONFIG"] == str(path.parent)
    assert p.env["CRUSH_GLOBAL_DATA"] != p.env["CRUSH_GLOBAL_CONFIG"]
    c = written(p, "crush.json")
    prov = c["providers"]["strata"]
    assert prov["type"] == "openai-compat" and prov["base_url"] == BASE + "/v1"
    assert prov["api_key"] == "$STRATA_API_KEY" and p.env["STRATA_API_KEY"] == "strata"
    (m,) = prov["models"]
    assert m["id"] == "coder:0.5b" and m["context_window"] == CODER.input_budget and m["default_max_tokens"] == 8192
    assert c["models"]["large"] == c["models"]["small"] == {"model": "coder:0.5b", "provider": "strata",
                                                            "max_tokens": 8192}
    assert c["options"]["disable_metrics"] is True and c["options"]["disable_provider_auto_update"] is True
    assert p.env["CRUSH_DISABLE_METRICS"] == "1" and p.env["CRUSH_DISABLE_PROVIDER_AUTO_UPDATE"] == "1"


def test_droid_gets_a_home_with_one_custom_model(tmp_path):
    p = plan(DROID, CODER, ["exec", "hi"], state_dir=tmp_path)
    (path,) = p.files
    assert path.relative_to(p.env["FACTORY_HOME_OVERRIDE"]).as_posix() == ".factory/settings.json"
    s = written(p, "settings.json")
    (m,) = s["customModels"]
    assert m["model"] == "coder:0.5b" and m["baseUrl"] == BASE + "/v1"
    assert m["provider"] == "generic-chat-completion-api" and m["apiKey"] == "${STRATA_API_KEY}"
    assert m["maxOutputTokens"] == 8192 and m["maxContextLimit"] == CODER.input_budget
    assert s["sessionDefaultSettings"]["model"] == DROID_MODEL_ID == "custom:Strata-0"
    assert p.env["FACTORY_DROID_AUTO_UPDATE_ENABLED"] == "false" and p.env["FACTORY_AIRGAP_ENABLED"] == "true"


def test_pi_gets_a_provider_extension(tmp_path):
    p = plan(PI, CODER, ["-p", "hi"], state_dir=tmp_path)
    (path,) = p.files
    assert p.argv == ["pi", "-e", str(path), "--provider", "strata", "--model", "coder:0.5b", "-p", "hi"]
    text = p.files[path]
    assert text.splitlines()[1] == "export default function (pi) {"
    provider = json.loads(text[text.index("{", text.index("registerProvider")):text.rindex(");")])
    assert provider["baseUrl"] == BASE + "/v1" and provider["api"] == "openai-completions"
    assert provider["apiKey"] == "STRATA_API_KEY"          # Pi reads an env variable of that name
    (m,) = provider["models"]
    assert m["id"] == "coder:0.5b" and m["contextWindow"] == 32768 and m["maxTokens"] == 8192
    assert m["compat"]["supportsDeveloperRole"] is False and m["compat"]["maxTokensField"] == "max_tokens"
    assert p.env["PI_OFFLINE"] == "1" and p.env["PI_TELEMETRY"] == "0"


def test_continue_gets_a_config_file_for_every_role(tmp_path):
    p = plan(CONTINUE, CODER, ["-p", "hi"], state_dir=tmp_path)
    (path,) = p.files
    assert p.argv == ["cn", "--config", str(path), "-p", "hi"] and path.suffix == ".yaml"
    c = written(p, ".yaml")                                 # JSON is YAML
    (m,) = c["models"]
    assert m["provider"] == "openai" and m["model"] == "coder:0.5b" and m["apiBase"] == BASE + "/v1"
    assert {"chat", "edit", "apply", "summarize"} <= set(m["roles"]) and m["capabilities"] == ["tool_use"]
    assert m["defaultCompletionOptions"] == {"contextLength": 32768, "maxTokens": 8192}
    assert p.env["CONTINUE_METRICS_ENABLED"] == "0" and p.env["CONTINUE_CLI_ENABLE_TELEMETRY"] == "0"
    keyed = written(plan(CONTINUE, THINKER, [], state_dir=tmp_path), ".yaml")
    assert keyed["models"][0]["apiKey"] == "${{ secrets.STRATA_API_KEY }}"


def test_copilot_gets_its_own_provider_variables_and_stays_offline(tmp_path):
    p = plan(COPILOT, CODER, ["-p", "hi"], state_dir=tmp_path)
    assert p.argv == ["copilot", "-p", "hi"] and p.files == {}
    e = p.env
    assert e["COPILOT_PROVIDER_BASE_URL"] == BASE + "/v1" and e["COPILOT_PROVIDER_TYPE"] == "openai"
    assert e["COPILOT_MODEL"] == "coder:0.5b"
    assert e["COPILOT_PROVIDER_MAX_PROMPT_TOKENS"] == str(CODER.input_budget)
    assert e["COPILOT_PROVIDER_MAX_OUTPUT_TOKENS"] == "8192"
    assert e["COPILOT_OFFLINE"] == "true" and e["COPILOT_AUTO_UPDATE"] == "false"
    assert "COPILOT_PROVIDER_API_KEY" not in e


def test_aider_gets_every_model_role_and_the_models_limits(tmp_path):
    p = plan(AIDER, CODER, [], state_dir=tmp_path)
    a = p.argv

    def opt(name):
        return a[a.index(name) + 1]
    assert opt("--model") == opt("--weak-model") == opt("--editor-model") == "openai/coder:0.5b"
    assert opt("--openai-api-base") == BASE + "/v1"
    assert {"--no-check-update", "--no-analytics", "--no-show-release-notes"} <= set(a)
    meta = written(p, ".metadata.json")
    assert opt("--model-metadata-file") == str(next(iter(p.files)))
    m = meta["openai/coder:0.5b"]
    assert m["max_input_tokens"] == CODER.input_budget and m["max_output_tokens"] == 8192
    assert m["input_cost_per_token"] == 0 and m["litellm_provider"] == "openai"
    assert p.env["OPENAI_API_KEY"] == "strata" and p.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_mini_swe_agent_gets_its_default_config_then_stratas(tmp_path):
    p = plan(MINI, CODER, ["-t", "hi", "-y"], state_dir=tmp_path)
    (path,) = p.files
    assert p.argv == ["mini", "-m", "openai/coder:0.5b", "-c", "mini.yaml", "-c", str(path), "-t", "hi", "-y"]
    c = written(p, ".yaml")
    assert c["model"]["model_name"] == "openai/coder:0.5b" and c["model"]["cost_tracking"] == "ignore_errors"
    assert c["model"]["model_kwargs"]["api_base"] == BASE + "/v1" and c["model"]["model_kwargs"]["max_tokens"] == 8192
    assert p.env["MSWEA_GLOBAL_CONFIG_DIR"] == str(path.parent) and p.env["MSWEA_CONFIGURED"] == "true"
