"""Numbers for people: byte sizes, durations, large counts. The one formatter the GUI, the CLI and the service's
messages share (a plain module: no imports from the rest of the program)."""
from __future__ import annotations

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DECIMAL = ("B", "KB", "MB", "GB", "TB", "PB")


def format_bytes(n: int | float, *, si: bool = False) -> str:
    """Binary units with one decimal, as the memory view shows them: "512 B", "100.0 MiB", "1.5 GiB".
    si=True: decimal units as Ollama prints file sizes: "98.4 MB", "137 MB" (no decimal from 100 up), "2 MB"."""
    base, units = (1000, _DECIMAL) if si else (1024, _BINARY)
    v = float(n)
    if abs(v) < base:
        return f"{v:.0f} B"
    for unit in units[1:]:
        v /= base
        if abs(v) < base or unit == units[-1]:
            break
    if not si:
        return f"{v:.1f} {unit}"
    return f"{v:.0f} {unit}" if abs(v) >= 100 else f"{v:.1f} {unit}".replace(".0 ", " ")


_SPANS = ((365 * 86400, "year"), (30 * 86400, "month"), (7 * 86400, "week"), (86400, "day"), (3600, "hour"),
          (60, "minute"), (1, "second"))


def format_duration(seconds: float) -> str:
    """The largest whole unit, as Ollama says how long ago or how soon: "3 days", "1 minute",
    "Less than a second"."""
    d = max(0.0, seconds)
    for secs, unit in _SPANS:
        if d >= secs:
            k = int(d // secs)
            return f"{k} {unit}{'s' if k != 1 else ''}"
    return "Less than a second"


def format_count(n: int) -> str:
    """134515008 -> "134.52M", 7000000000 -> "7B" (parameter counts)."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}".rstrip("0").rstrip(".") + unit
    return str(n)
