"""Service configuration: one frozen dataclass, read from the environment once (`ServiceConfig.from_env()`).

Environment variables (all optional):
  STRATA_HOST          host[:port] to bind (default 127.0.0.1:11434, Ollama's port so its clients work unchanged)
  STRATA_API_KEY       bearer token required on every endpoint except /api/version
  STRATA_ORIGINS       comma-separated extra browser origins allowed (localhost and the app's own always are)
  STRATA_MAX_QUEUE     requests waiting per model beyond its slots before 503 (default 512)
  STRATA_NUM_PARALLEL  parallel sequences (slots) per loaded model (default 4)
  STRATA_NUM_CTX       default context per sequence (default 4096, clamped to the model's training context)
  STRATA_KEEP_ALIVE    default keep-alive ("5m", seconds, 0, negative = forever)
  STRATA_MAX_LOADED_MODELS  0 = as many as fit in memory
  STRATA_DEVICES       path of a simulated inventory JSON (what-if planning, tests)
  STRATA_NUM_THREADS   llama.cpp threads per runner (default: cores - 1, at least 1)
  STRATA_MAX_BODY      request body limit in bytes (default 32 MiB)
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

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


def _int_env(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if v < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {v}")
    return v


def default_threads() -> int:
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class ServiceConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = None
    origins: tuple[str, ...] = ()
    max_queue: int = 512
    num_parallel: int = 4
    num_ctx: int = 4096
    keep_alive: str | float = "5m"
    max_loaded_models: int = 0                 # 0 = as many as fit
    devices_json: str | None = None
    n_threads: int = field(default_factory=default_threads)
    max_body: int = 32 * 1024 * 1024
    retry_after_s: int = 2                     # the Retry-After sent with a 503 for a full queue
    load_timeout_s: float = 600.0

    @classmethod
    def from_env(cls, **overrides) -> "ServiceConfig":
        host, port = parse_host(os.environ.get("STRATA_HOST"))
        origins = tuple(o.strip().rstrip("/") for o in os.environ.get("STRATA_ORIGINS", "").split(",") if o.strip())
        cfg = cls(
            host=host,
            port=port,
            api_key=os.environ.get("STRATA_API_KEY") or None,
            origins=origins,
            max_queue=_int_env("STRATA_MAX_QUEUE", 512),
            num_parallel=_int_env("STRATA_NUM_PARALLEL", 4, minimum=1),
            num_ctx=_int_env("STRATA_NUM_CTX", 4096, minimum=16),
            keep_alive=os.environ.get("STRATA_KEEP_ALIVE") or "5m",
            max_loaded_models=_int_env("STRATA_MAX_LOADED_MODELS", 0),
            devices_json=os.environ.get("STRATA_DEVICES") or None,
            n_threads=_int_env("STRATA_NUM_THREADS", default_threads(), minimum=1),
            max_body=_int_env("STRATA_MAX_BODY", 32 * 1024 * 1024, minimum=1024),
        )
        return replace(cfg, **overrides) if overrides else cfg

    @property
    def base_url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}"
