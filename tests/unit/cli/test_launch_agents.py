"""What each coding agent is given by `strata launch` (app/cli/agents.py): the environment, command line and
files per agent, every model name the agent asks for mapped to the chosen model, the context window and reply
size from the server's numbers, telemetry off, and nothing written outside Strata's own folder. Codex's `-c`
values are parsed back as TOML (what Codex does with them); its catalog is checked against the fields Codex's
ModelInfo requires."""
from __future__ import annotations

import json
import tomllib

import pytest

from app.cli.agents import (AGENTS, CLAUDE, CODEX, OPENCODE, LaunchError, Target, catalog_path, codex_catalog,
                            opencode_config, plan)

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
    assert model["limit"] == {"context": 32768, "output": 8192}
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
@pytest.mark.parametrize("arg", ["--model", "-m", "--model=other"])
def test_a_model_chosen_behind_launchs_back_is_refused(agent, arg, tmp_path):
    with pytest.raises(LaunchError, match="--model NAME"):
        plan(AGENTS[agent], CODER, [arg, "other"], state_dir=tmp_path)


def test_oss_is_codexs_alone(tmp_path):
    with pytest.raises(LaunchError, match="Codex"):
        plan(CLAUDE, CODER, [], oss=True, state_dir=tmp_path)


def test_install_hints_name_the_npm_packages():
    assert {a.name: a.install_hint for a in AGENTS.values()} == {
        "claude": "npm install -g @anthropic-ai/claude-code", "codex": "npm install -g @openai/codex",
        "opencode": "npm install -g opencode-ai"}


def test_a_context_too_small_for_the_agents_first_prompt_is_said():
    assert CLAUDE.context_warning(CODER) is None
    small = Target(BASE, "coder:0.5b", 8192, CODER.capabilities)
    assert "18,000 tokens" in CLAUDE.context_warning(small) and "8,192" in CLAUDE.context_warning(small)
    assert CODEX.context_warning(small) is None
