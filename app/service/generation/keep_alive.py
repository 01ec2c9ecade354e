"""Ollama's keep_alive: how long a model stays loaded after its last request. A request value like its options:
parsed ONCE per request, by the dialect's parser, carried by the request (GenerationRequest.keep_alive); the
scheduler, which applies it, only ever sees the result (seconds, FOREVER, or DEFAULT for the server's own)."""
from __future__ import annotations

import re

from ..http.errors import ApiError

FOREVER = None                 # keep the model loaded until something else needs the memory
MAX_KEEP_ALIVE_S = 100 * 365 * 86400.0
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class _Default:
    """The request did not say: the server's configured keep_alive applies (STRATA_KEEP_ALIVE)."""

    def __repr__(self) -> str:
        return "DEFAULT"


Default = _Default                 # the type, for isinstance (a type checker narrows on it, not on `is DEFAULT`)
DEFAULT = _Default()
KeepAlive = float | None | _Default


def request_keep_alive(value) -> KeepAlive:
    """A request's `keep_alive` field: absent or "" -> DEFAULT, else parse_keep_alive()."""
    if value is None or value == "":
        return DEFAULT
    return parse_keep_alive(value)


def parse_keep_alive(value, default="5m") -> float | None:
    """A number of seconds or a Go duration ("5m", "1h30m", "-1s"); 0 = unload now, negative = keep forever
    (FOREVER, None). Raises ApiError(400) naming the problem."""
    if value is None or value == "":
        value = default
    if isinstance(value, bool):
        raise ApiError(400, f"keep_alive must be a duration like \"5m\" or a number of seconds, got {value!r}",
                       param="keep_alive")
    if isinstance(value, (int, float)):
        try:
            secs = float(value)
        except OverflowError:              # an integer beyond float range: "for ever" either way
            secs = float("inf") if value > 0 else float("-inf")
    elif isinstance(value, str):
        secs = _parse_duration(value)
    else:
        raise ApiError(400, f"keep_alive must be a string or a number, got {type(value).__name__}",
                       param="keep_alive")
    if secs != secs:  # NaN
        raise ApiError(400, "keep_alive must be a number", param="keep_alive")
    # beyond a century (or inf, 1e308, 2**63) the expiry time would overflow datetime/timedelta: it means for ever
    return FOREVER if secs < 0 or secs >= MAX_KEEP_ALIVE_S else secs


def _parse_duration(value: str) -> float:
    s = value.strip()
    try:
        return float(s)
    except ValueError:
        pass
    sign = -1.0 if s.startswith("-") else 1.0
    body = s.lstrip("+-")
    pos, total = 0, 0.0
    for m in _DURATION.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(body) or not body:
        raise ApiError(400, f"keep_alive {value!r} is not a duration (examples: \"5m\", \"1h30m\", 300, 0, -1)",
                       param="keep_alive")
    return sign * total
