"""The settings file (`settings.json` in the data dir): what the desktop app's Settings dialog writes and what the
service (`strata gui` and `strata serve` alike) reads at start. An environment variable always wins over the file.

Plain data, no Qt and no service: the GUI and `app.service.config` both import it. Every setting has one entry in
SETTINGS (its key in the file, the environment variable that overrides it, its type and default), so the dialog,
the loader and the docs cannot disagree.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app import paths

EXTERNAL_SOURCES = ("ollama", "lmstudio", "huggingface")
SOURCE_LABELS = {"ollama": "Ollama (~/.ollama/models)", "lmstudio": "LM Studio (~/.lmstudio/models)",
                 "huggingface": "Hugging Face cache (~/.cache/huggingface/hub)"}


class SettingsError(ValueError):
    """A value in the settings file (or given to save) is malformed; the message names the setting."""


@dataclass(frozen=True)
class Setting:
    key: str                   # name in settings.json
    env: str                   # environment variable that wins over the file
    kind: type                 # str, int or list (a list of strings)
    default: object
    label: str                 # for people (the dialog)
    help: str = ""
    minimum: int = 0           # ints only


SETTINGS: tuple[Setting, ...] = (
    Setting("host", "STRATA_HOST", str, "127.0.0.1:11434", "Address and port",
            "host:port the service listens on; 0.0.0.0 opens it to your network (set an API key then)"),
    Setting("api_key", "STRATA_API_KEY", str, "", "API key",
            "when set, every request but /api/version needs 'Authorization: Bearer KEY'"),
    Setting("origins", "STRATA_ORIGINS", list, [], "Allowed browser origins",
            "web pages allowed to call the API besides localhost (e.g. https://app.example.com)"),
    Setting("num_parallel", "STRATA_NUM_PARALLEL", int, 4, "Slots per model",
            "requests one loaded model answers at the same time", minimum=1),
    Setting("num_ctx", "STRATA_NUM_CTX", int, 32768, "Default context", "an upper bound: unless a request "
            "or Modelfile sets num_ctx, a model gets the largest context per sequence (tokens) that free memory "
            "holds, up to its training context and this; a longer prompt grows it when memory allows", minimum=256),
    Setting("keep_alive", "STRATA_KEEP_ALIVE", str, "5m", "Keep-alive",
            "how long an idle model stays loaded: 5m, 1h, 0 (unload at once), -1 (forever)"),
    Setting("num_threads", "STRATA_NUM_THREADS", int, 0, "CPU threads", "llama.cpp threads per model; 0 = the "
            "physical cores (llama.cpp's own default)"),
    Setting("prompt_cache_mib", "STRATA_PROMPT_CACHE_MIB", int, -1, "Prompt cache (MiB)",
            "host RAM per model kept for conversations that lost their slot, so a returning conversation skips "
            "its prompt; 0 = off, -1 = automatic (10% of the available RAM, at most 4 GiB)", minimum=-1),
    Setting("ctx_checkpoints", "STRATA_CTX_CHECKPOINTS", int, 32, "Context checkpoints per slot",
            "recurrent, hybrid and sliding-window models: copies of a conversation's state kept per slot so the next "
            "turn skips its history (llama-server's --ctx-checkpoints); 0 = off"),
    Setting("checkpoint_mib", "STRATA_CHECKPOINT_MIB", int, 1024, "Checkpoint RAM per slot (MiB)",
            "the bound on those checkpoints' host RAM per slot; 0 = the count alone bounds them"),
    Setting("cache_reuse", "STRATA_CACHE_REUSE", int, 0, "Cache reuse after a change (tokens)",
            "when a prompt differs early from a cached one (an agent's date), move cached chunks of at least this "
            "many tokens that it repeats further on instead of computing them (llama-server's --cache-reuse); "
            "approximate, so 0 = off", minimum=0),
    Setting("request_bodies", "STRATA_REQUEST_BODIES", int, 1, "Request log keeps bodies",
            "1: the Server window's request log (kept on disk, bounded) includes each request's and reply's body "
            "(credentials masked); 0: only metadata, timings and token counts (privacy)", minimum=0),
    Setting("gpu_margin_mib", "STRATA_GPU_MARGIN_MIB", int, 512, "GPU margin (MiB)",
            "memory the planner leaves free on each device for other programs"),
    Setting("max_memory_mib", "STRATA_MAX_MEMORY", int, 0, "Memory cap (MiB)",
            "the most Strata's loaded models may hold in all, GPUs and RAM together; a load that would pass it "
            "unloads idle unpinned models or is refused; 0 = no cap", minimum=0),
    Setting("external_sources", "STRATA_EXTERNAL_MODELS", list, list(EXTERNAL_SOURCES), "Other apps' folders",
            "where to look for models you already have (read-only; nothing is copied)"),
    Setting("rpc_workers", "STRATA_RPC", list, [], "RPC workers",
            "host:port of `strata worker`s on other computers whose GPUs (or CPU) this machine may use; "
            "trusted networks only (no authentication, no encryption)"),
)
BY_KEY = {s.key: s for s in SETTINGS}
# keep_alive as Ollama takes it: seconds, or a Go duration ("5m", "1h30m", "-1s")
_DURATION = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)|[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")


def settings_path() -> Path:
    return paths.data_dir() / "settings.json"


def _check(s: Setting, value):
    """The value in its type, or SettingsError naming the setting."""
    if s.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{s.key} must be an integer, got {value!r}")
        if value < s.minimum:
            raise SettingsError(f"{s.key} must be >= {s.minimum}, got {value}")
        return value
    if s.kind is str:
        if not isinstance(value, str):
            raise SettingsError(f"{s.key} must be a string, got {value!r}")
        if s.key == "keep_alive" and not _DURATION.fullmatch(value.strip()):
            raise SettingsError(f"keep_alive {value!r} is not a duration (examples: 5m, 1h30m, 300, 0, -1)")
        return value.strip()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise SettingsError(f"{s.key} must be a list of strings, got {value!r}")
    if s.key == "external_sources" and (bad := [x for x in value if x not in EXTERNAL_SOURCES]):
        raise SettingsError(f"external_sources: unknown {', '.join(bad)}; known: {', '.join(EXTERNAL_SOURCES)}")
    return [x.strip() for x in value if x.strip()]


def load(path: Path | None = None) -> dict:
    """The file's settings (only the keys it sets), checked; {} when there is no file. Unknown keys are
    ignored (a newer version may have written them); a malformed value raises SettingsError naming it."""
    path = path or settings_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise SettingsError(f"cannot read {path}: {e}") from None
    try:
        data = json.loads(raw) if raw.strip() else {}
    except ValueError as e:
        raise SettingsError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} must hold a JSON object")
    return {k: _check(BY_KEY[k], v) for k, v in data.items() if k in BY_KEY}


def save(values: dict, path: Path | None = None) -> Path:
    """Write the settings that differ from their defaults (atomically; owner-only, it may hold the API key)."""
    path = path or settings_path()
    out = {}
    for k, v in values.items():
        if k not in BY_KEY:
            raise SettingsError(f"unknown setting {k!r}")
        v = _check(BY_KEY[k], v)
        if v != BY_KEY[k].default:
            out[k] = v
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".settings-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def environment(path: Path | None = None) -> dict:
    """The settings file as environment values, with the real environment over it (a variable that is set wins):
    what app.service.config parses, so a value means the same from either place."""
    env = {}
    for key, value in load(path).items():
        s = BY_KEY[key]
        if s.kind is list:
            env[s.env] = ",".join(value) if value or key != "external_sources" else "0"
        elif value not in ("", 0) or key == "keep_alive":    # 0 / "" in the file mean "the default"
            env[s.env] = str(value)
    env.update({k: v for k, v in os.environ.items() if v.strip()})
    return env


def parse_sources(raw: str | None) -> tuple[str, ...]:
    """STRATA_EXTERNAL_MODELS: 0/false/no/off (none), 1/true/yes/on or unset (all), or a comma-separated list."""
    v = (raw or "").strip().lower()
    if v in ("", "1", "true", "yes", "on"):
        return EXTERNAL_SOURCES
    if v in ("0", "false", "no", "off"):
        return ()
    names = tuple(x.strip() for x in v.split(",") if x.strip())
    if bad := [x for x in names if x not in EXTERNAL_SOURCES]:
        raise SettingsError(f"STRATA_EXTERNAL_MODELS: unknown {', '.join(bad)}; known: {', '.join(EXTERNAL_SOURCES)}")
    return names


def overridden() -> dict[str, str]:
    """Settings an environment variable sets now: {key: variable} (the file's value does not apply to them)."""
    return {s.key: s.env for s in SETTINGS if os.environ.get(s.env, "").strip()}


def effective(path: Path | None = None) -> dict:
    """Every setting as the file (over the defaults) has it; environment variables are not applied here (the
    service's config parses them with its own rules; the dialog shows them as overrides)."""
    values = {s.key: s.default for s in SETTINGS}
    values.update(load(path))
    return values
