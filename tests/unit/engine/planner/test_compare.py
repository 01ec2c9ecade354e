"""Predicted against allocated memory as plain data (planner/compare.py): what llama.cpp's buffer lines should say
for a Layout's devices (repacked weights apart from the mapped model, the projector and the draft model as their
own kinds), and the relative errors per device and kind of a real load. Real loads compared:
tests/integration/engine/test_verify_layout.py, test_family_memory.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.engine.planner.compare import KINDS, compare, predicted_of

MiB = 1 << 20


def device(device_id, weights_total=0, repack=0, mapped=0, kv=0, compute=0, output=0, **extra):
    return SimpleNamespace(device_id=device_id, weights_total=weights_total, weights={"repack": repack},
                           mapped=mapped, kv=kv, compute=compute, output=output, **extra)


def test_predicted_buffers_per_device():
    layout = SimpleNamespace(devices=[
        device("CUDA0", weights_total=900 * MiB, kv=64 * MiB, compute=32 * MiB, output=MiB, projector=50 * MiB),
        device("CPU", weights_total=300 * MiB, repack=100 * MiB, mapped=20 * MiB, compute=8 * MiB, draft=70 * MiB),
        device("CUDA1")])                                             # holds nothing: not listed
    got = predicted_of(layout)
    assert set(got) == {"CUDA0", "CPU"}
    assert got["CUDA0"] == {"model": 900 * MiB, "kv": 64 * MiB, "compute": 32 * MiB, "output": MiB, "repack": 0,
                            "projector": 50 * MiB}
    # the repacked copies are their own kind; the mapping keeps the originals' slack beside the rest
    assert got["CPU"] == {"model": 220 * MiB, "kv": 0, "compute": 8 * MiB, "output": 0, "repack": 100 * MiB,
                          "draft": 70 * MiB}


def test_errors_per_device_and_kind():
    predicted = {"CPU": {"model": 110, "kv": 50, "compute": 0}}
    actual = {"CPU": {"model": 100, "kv": 50, "compute": 0}, "CUDA0": {"model": 10}}
    got = compare({"predicted": predicted, "actual": actual})
    assert got["CPU"]["predicted"] == 160 and got["CPU"]["actual"] == 150
    assert got["CPU"]["total_err"] == pytest.approx(10 / 150)
    assert got["CPU"]["kind_err"]["model"] == pytest.approx(0.1) and got["CPU"]["kind_err"]["kv"] == 0.0
    assert set(got["CPU"]["kind_err"]) == set(KINDS)
    # a device the plan left out but llama.cpp used: predicted 0, every error -100%
    assert got["CUDA0"]["predicted"] == 0 and got["CUDA0"]["total_err"] == -1.0
    assert got["CUDA0"]["kind_err"]["model"] == -1.0


def test_a_kind_predicted_but_never_allocated_is_an_infinite_error():
    got = compare({"predicted": {"CPU": {"kv": 5}}, "actual": {"CPU": {"model": 5}}})
    assert got["CPU"]["kind_err"]["kv"] == float("inf") and got["CPU"]["kind_err"]["compute"] == 0.0
