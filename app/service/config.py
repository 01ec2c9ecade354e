"""Service configuration: one frozen dataclass, read once (`ServiceConfig.from_env()`) from the settings file
(`settings.json` in the data dir, written by the desktop app's Settings dialog; see app/settings.py) with the
environment over it: a variable that is set always wins.

Environment variables (all optional):
  STRATA_HOST          host[:port] to bind (default 127.0.0.1:11434, Ollama's port so its clients work unchanged)
  STRATA_API_KEY       bearer token required on every endpoint except /api/version
  STRATA_ORIGINS       comma-separated extra browser origins allowed (localhost and the app's own always are)
  STRATA_MAX_QUEUE     requests waiting per model beyond its slots before 503 (default 512)
  STRATA_NUM_PARALLEL  parallel sequences (slots) per loaded model (default 4)
  STRATA_NUM_CTX       upper bound of the default context per sequence (default 32768): unless a request or
                       Modelfile sets num_ctx, a load gets the largest context that free memory holds, up to the
                       model's training context and this bound (planner.context.context_for)
  STRATA_KEEP_ALIVE    default keep-alive ("5m", seconds, 0, negative = forever)
  STRATA_MAX_LOADED_MODELS  0 = as many as fit in memory
  STRATA_DEVICES       path of a simulated inventory JSON (what-if planning, tests)
  STRATA_NUM_THREADS   llama.cpp threads per runner (default: the physical cores, as llama-server)
  STRATA_MAX_BODY      request body limit in bytes (default 32 MiB)
  STRATA_PROMPT_CACHE_MIB  host RAM per loaded model for saved conversation states (prompt cache):
                       -1 (default) = 10% of the RAM available at load, at most 4 GiB; 0 = off
  STRATA_RUNNER_WATCHDOG   seconds without a heartbeat from a runner, while requests wait, before it is called
                       frozen and killed, its requests fail and the next request loads the model again
                       (default 8; 0 = no watchdog; loading has its own timeout)
  STRATA_RUNNER_STEP_FLOOR seconds one decode step may always run before the runner is called stuck; beyond it
                       the limit is 20x what the model's measured steps predict for that batch (default 120)
  STRATA_GPU_MARGIN_MIB    memory the planner leaves free on each device (default 512)
  STRATA_MAX_MEMORY    Strata's memory cap: the most its loaded models may hold in all (GPUs and host RAM
                       together), as a size ("16GiB", "12000MiB") or MiB; 0 or unset = none. The planner honours
                       it as it honours free memory (a load that does not fit under it evicts idle models or is a 507)
  STRATA_EXTERNAL_MODELS   other apps' folders to scan: 0 (none), 1 (all) or a list like "ollama,lmstudio"
  STRATA_REQUEST_HISTORY   1 (default): the request log keeps finished requests in requests.db in the data dir
                       (bounded; the Server window lists them after a restart); 0: memory only
  STRATA_REQUEST_BODIES    1 (default): the request log keeps bounded request and reply bodies (credentials
                       masked); 0: metadata, timings and usage only (privacy)
Passed down to every runner child (engine/runner_settings.RunnerSettings; the runner reads no variable itself):
  STRATA_SPECULATIVE   speculative decoding: auto (default), off, on, or a longest draft (runner/speculation/drafting.py)
  STRATA_STREAM_INTERVAL_MS  how long new text may be held before it is sent (default: 50 ms when every CPU
                       computes, else 0; runner/output/output_thread.stream_interval_s)
  STRATA_RUNNER_LOG    the runner's log level (default WARNING)
  STRATA_DECODE_LATENCY_FACTOR  while other requests' prompts are read, a step of the replies being written may
                       take this many times their step alone (default 1.75; 0 = prompts take whole batches:
                       runner/step/step_budget.py)
Read elsewhere, each in one place, on purpose: STRATA_HOME and STRATA_USER_HOME (app/paths.py: where the settings
file itself is, and the sandboxed home), STRATA_RPC (app/discovery/remote.py, over the settings file's rpc_workers:
discovery runs below the service, for `strata devices` too), the pull's tuning knobs STRATA_PULL_PART_MIN /
_STALL_S / _RETRIES (store/registry/download.py, for tests and benches) and the runner's test hooks STRATA_TEST_*
(runner/testhooks.py, for tests only).
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from app import settings as settings_file
from app.discovery.host import compute_threads
from app.discovery.simulated import parse_size
from app.engine.runner_settings import RunnerSettings
from app.engine.runner_watch import WatchLimits

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434


class ConfigError(ValueError):
    """A setting in the environment is malformed; the message names it."""


def parse_host(value: str | None) -> tuple[str, int]:
    """`STRATA_HOST` like Ollama's OLLAMA_HOST: "host", "host:port", ":port", "http://host:port", "[::1]:port"."""
    if not value:
        return DEFAULT_HOST, DEFAULT_PORT
    v = value.strip()
    for scheme in ("http://", "https://"):
        if v.startswith(scheme):
            v = v[len(scheme):]
    v = v.rstrip("/")
    host, port = v, DEFAULT_PORT
    if v.startswith("["):                      # [ipv6]:port
        end = v.find("]")
        if end < 0:
            raise ConfigError(f"STRATA_HOST: malformed IPv6 address {value!r}")
        host, rest = v[1:end], v[end + 1:]
        if rest.startswith(":"):
            port = _port(rest[1:], value)
    elif v.count(":") == 1:
        host, p = v.split(":")
        port = _port(p, value)
    return host or DEFAULT_HOST, port


def _port(text: str, whole: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"STRATA_HOST: port must be a number in {whole!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"STRATA_HOST: port {port} out of range 0..65535")
    return port


def _int_env(name: str, default: int, minimum: int = 0, *, env: Mapping[str, str]) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if v < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {v}")
    return v


def _float_env(name: str, default: float, *, env: Mapping[str, str], unit: str = "seconds") -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of {unit}, got {raw!r}") from None
    if not v >= 0:
        raise ConfigError(f"{name} must be >= 0, got {raw!r}")
    return v


def _size_env(name: str, *, env: Mapping[str, str]) -> int:
    """A size in bytes from "16GiB", "12000 MiB" or a bare number of MiB (the Settings dialog's unit); 0 when unset."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return 0
    try:
        return int(float(raw) * (1 << 20)) if raw.replace(".", "", 1).isdigit() else parse_size(raw, name)
    except ValueError:
        raise ConfigError(f"{name} must be a size like 16GiB or 12000MiB (a bare number is MiB), got {raw!r}") from None


def _runner_settings(env: Mapping[str, str]) -> RunnerSettings:
    raw = (env.get("STRATA_STREAM_INTERVAL_MS") or "").strip()
    level = (env.get("STRATA_RUNNER_LOG") or "WARNING").strip().upper()
    if not isinstance(logging.getLevelName(level), int):
        raise ConfigError(f"STRATA_RUNNER_LOG must be a log level (DEBUG, INFO, WARNING, ERROR), got {level!r}")
    return RunnerSettings(speculative=(env.get("STRATA_SPECULATIVE") or "").strip(),
                          stream_interval_ms=_float_env("STRATA_STREAM_INTERVAL_MS", 0.0, env=env,
                                                                unit="milliseconds") if raw else None,
                          log_level=level,
                          disk_cache_mib=_int_env("STRATA_PROMPT_DISK_CACHE_MIB", -1, minimum=-1, env=env),
                          decode_latency_factor=_float_env("STRATA_DECODE_LATENCY_FACTOR",
                                                           RunnerSettings.decode_latency_factor, env=env,
                                                           unit="times"))


def _environment() -> dict:
    try:
        return settings_file.environment()
    except settings_file.SettingsError as e:
        raise ConfigError(f"settings: {e}") from None


def _sources(raw: str | None) -> tuple[str, ...]:
    try:
        return settings_file.parse_sources(raw)
    except settings_file.SettingsError as e:
        raise ConfigError(str(e)) from None


def default_threads() -> int:
    """Compute threads of a runner unless set: the physical cores (llama-server's default), measured best on a
    quiet machine; the runner's limited OpenMP spinning keeps it usable on a busy one (bench/bench_threads.py)."""
    return compute_threads()


@dataclass(frozen=True)
class ServiceConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    origins: tuple[str, ...] = ()
    max_queue: int = 512
    num_parallel: int = 4
    num_ctx: int = 32768                       # the default context's upper bound (STRATA_NUM_CTX)
    keep_alive: str | float = "5m"
    max_loaded_models: int = 0                 # 0 = as many as fit
    devices_json: str | None = None
    n_threads: int = field(default_factory=default_threads)
    max_body: int = 32 * 1024 * 1024
    retry_after_s: int = 2                     # the Retry-After sent with a 503 for a full queue
    load_timeout_s: float = 600.0
    prompt_cache_mib: int = -1                 # -1 = the engine's default share of available RAM; 0 = off
    ctx_checkpoints: int = 32                  # context checkpoints per slot (recurrent/hybrid/SWA models); 0 = off
    checkpoint_mib: int = 1024                 # their host RAM bound per slot; 0 = the count alone
    cache_reuse: int = 0                       # cache reuse's minimum chunk (tokens; llama-server's --cache-reuse); 0 = off
    gpu_margin_mib: int = 512
    max_memory: int = 0                        # Strata's memory cap in bytes (STRATA_MAX_MEMORY); 0 = none
    external_sources: tuple[str, ...] = settings_file.EXTERNAL_SOURCES
    runner_watchdog_s: float = 8.0             # heartbeat silence that means frozen; 0 = no watchdog
    runner_step_floor_s: float = 120.0         # a step may always run this long (runner_watch.WatchLimits)
    runner: RunnerSettings = RunnerSettings()  # what every runner child is told at start (speculation, ...)
    request_history: bool = True               # the request log's finished requests kept on disk (requests.db)
    request_bodies: bool = True                # ... and in memory with their bodies (False: metadata only)

    @classmethod
    def from_env(cls, **overrides) -> "ServiceConfig":
        env = _environment()
        host, port = parse_host(env.get("STRATA_HOST"))
        origins = tuple(o.strip().rstrip("/") for o in env.get("STRATA_ORIGINS", "").split(",") if o.strip())
        cfg = cls(
            host=host,
            port=port,
            api_key=env.get("STRATA_API_KEY") or None,
            origins=origins,
            max_queue=_int_env("STRATA_MAX_QUEUE", 512, env=env),
            num_parallel=_int_env("STRATA_NUM_PARALLEL", 4, minimum=1, env=env),
            num_ctx=_int_env("STRATA_NUM_CTX", 32768, minimum=16, env=env),
            keep_alive=env.get("STRATA_KEEP_ALIVE") or "5m",
            max_loaded_models=_int_env("STRATA_MAX_LOADED_MODELS", 0, env=env),
            devices_json=env.get("STRATA_DEVICES") or None,
            n_threads=_int_env("STRATA_NUM_THREADS", default_threads(), minimum=1, env=env),
            max_body=_int_env("STRATA_MAX_BODY", 32 * 1024 * 1024, minimum=1024, env=env),
            prompt_cache_mib=_int_env("STRATA_PROMPT_CACHE_MIB", -1, minimum=-1, env=env),
            ctx_checkpoints=_int_env("STRATA_CTX_CHECKPOINTS", 32, env=env),
            checkpoint_mib=_int_env("STRATA_CHECKPOINT_MIB", 1024, env=env),
            cache_reuse=_int_env("STRATA_CACHE_REUSE", 0, minimum=0, env=env),
            gpu_margin_mib=_int_env("STRATA_GPU_MARGIN_MIB", 512, env=env),
            max_memory=_size_env("STRATA_MAX_MEMORY", env=env),
            external_sources=_sources(env.get("STRATA_EXTERNAL_MODELS")),
            runner_watchdog_s=_float_env("STRATA_RUNNER_WATCHDOG", 8.0, env=env),
            runner_step_floor_s=_float_env("STRATA_RUNNER_STEP_FLOOR", 120.0, env=env),
            runner=_runner_settings(env),
            request_history=_int_env("STRATA_REQUEST_HISTORY", 1, minimum=0, env=env) > 0,
            request_bodies=_int_env("STRATA_REQUEST_BODIES", 1, minimum=0, env=env) > 0,
        )
        return replace(cfg, **overrides) if overrides else cfg

    def plan_defaults(self) -> dict:
        """PlanOptions fields every load plans with unless a request says otherwise."""
        return {"ctx_checkpoints": self.ctx_checkpoints, "checkpoint_mib": self.checkpoint_mib,
                "cache_reuse": self.cache_reuse}

    @property
    def runner_watch(self) -> WatchLimits:
        """The runner watchdog's limits, as every RunnerClient of this service gets them."""
        return WatchLimits(heartbeat_s=self.runner_watchdog_s, step_floor_s=self.runner_step_floor_s)

    @property
    def base_url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}"
