"""keep_alive durations as Ollama reads them (generation/keep_alive.py), and garbage refused with a 400."""
from __future__ import annotations

import pytest

from app.service.generation.keep_alive import parse_keep_alive
from app.service.http.errors import ApiError


@pytest.mark.parametrize("value,seconds", [
    ("5m", 300.0), ("1h30m", 5400.0), ("10s", 10.0), ("300ms", 0.3), ("2.5h", 9000.0), (300, 300.0),
    ("300", 300.0), (0, 0.0), ("0", 0.0), ("0s", 0.0), (-1, None), ("-1", None), ("-5m", None), (None, 300.0),
])
def test_keep_alive_durations(value, seconds):
    assert parse_keep_alive(value, "5m") == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("bad", ["5 minutes", "m5", "1x", True, [], {}, "5m3"])
def test_keep_alive_rejects_garbage_with_400(bad):
    with pytest.raises(ApiError) as e:
        parse_keep_alive(bad)
    assert e.value.status == 400 and "keep_alive" in e.value.message
