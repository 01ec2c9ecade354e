"""Device inventory: this machine (ggml in a child process, NVML, host), simulated inventories, the merge rules
(`strata devices` / `strata plan` on the command line: tests/integration/cli/test_cli_devices_plan.py)."""
from __future__ import annotations

import json

import pytest

from app.discovery import discover, merge
from app.discovery.ggml_probe import probe_ggml
from app.discovery.simulated import inventory_from_dict, load_simulated, parse_size
from repo_paths import SIM_DEVICES

SIM = SIM_DEVICES
GiB = 1024 ** 3
MiB = 1024 ** 2


def test_probe_runs_in_a_child_and_sees_the_cpu():
    res, why = probe_ggml()
    assert why is None, why
    cpu = [d for d in res["devices"] if d["type"] == "cpu"]
    assert len(cpu) == 1 and cpu[0]["name"] == "CPU" and cpu[0]["total"] > 0


def test_discover_this_machine(monkeypatch):
    monkeypatch.delenv("STRATA_DEVICES", raising=False)
    inv = discover()
    assert not inv.simulated
    assert inv.host_ram_total > 0 and 0 < inv.host_ram_available <= inv.host_ram_total
    assert inv.cpu_cores >= 1
    if not inv.gpus:
        assert inv.notes, "a CPU-only inventory says why"
    for d in inv.devices:
        assert d.id != "CPU" and d.total > 0


def test_simulated_from_env_and_argument(monkeypatch):
    from app.service.config import ServiceConfig

    monkeypatch.setenv("STRATA_DEVICES", str(SIM / "two_24gb.json"))    # read once, by the config
    inv = discover(ServiceConfig.from_env().devices_json)
    assert inv.simulated and [d.id for d in inv.gpus] == ["CUDA0", "CUDA1"]
    assert inv.gpus[0].free == int(23.5 * GiB) and inv.gpus[0].total == 24 * GiB
    assert discover(str(SIM / "one_6gb.json")).gpus[0].total == 6 * GiB     # the argument wins


@pytest.mark.parametrize("data,field", [
    ({"devices": [{"id": "G0"}], "host_ram_total": "8 GiB", "cpu_cores": 4}, "devices[0].total"),
    ({"devices": [{"total": "8 GiB"}], "host_ram_total": "8 GiB", "cpu_cores": 4}, "devices[0].id"),
    ({"devices": [], "cpu_cores": 4}, "host_ram_total"),
    ({"devices": [], "host_ram_total": "8 GiB"}, "cpu_cores"),
    ({"host_ram_total": "8 GiB", "cpu_cores": 4}, "devices"),
    ({"devices": [{"id": "G0", "total": "8 lbs"}], "host_ram_total": "8 GiB", "cpu_cores": 4}, "devices[0].total"),
    ({"devices": [{"id": "G0", "total": "8 GiB", "free": "9 GiB"}], "host_ram_total": "8 GiB", "cpu_cores": 4},
     "devices[0].free"),
    ({"devices": [{"id": "G0", "total": 1, "kind": "tpu"}], "host_ram_total": 1, "cpu_cores": 4}, "devices[0].kind"),
    ({"devices": [], "host_ram_total": "8 GiB", "cpu_cores": 0}, "cpu_cores"),
])
def test_simulated_bad_fields_are_named(data, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        inventory_from_dict(data)


def test_simulated_file_errors(tmp_path):
    with pytest.raises(ValueError, match=r"missing field devices\[0\]\.total"):
        load_simulated(SIM / "missing_total.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_simulated(bad)
    with pytest.raises(ValueError, match="cannot read"):
        load_simulated(tmp_path / "nope.json")


def test_parse_size():
    assert parse_size("24 GiB", "x") == 24 * GiB
    assert parse_size("512MiB", "x") == 512 * MiB
    assert parse_size("8GB", "x") == 8 * 10 ** 9
    assert parse_size(1234, "x") == 1234


# ---- merge: ggml devices + NVML, matched by PCI bus id (formats differ), NVML's free memory wins ----------------

GGML = [
    {"index": 0, "name": "CPU", "description": "AMD EPYC", "type": "cpu", "free": 64 * GiB, "total": 64 * GiB},
    {"index": 1, "name": "CUDA0", "description": "NVIDIA GeForce RTX 4090", "type": "gpu", "free": 22 * GiB,
     "total": 24 * GiB, "device_id": "0000:41:00.0", "backend": "CUDA"},
    {"index": 2, "name": "CUDA1", "description": "NVIDIA GeForce RTX 3090", "type": "gpu", "free": 23 * GiB,
     "total": 24 * GiB, "device_id": "0000:01:00.0", "backend": "CUDA"},
]
NVML = [  # NVML enumerates in PCI order, and writes an 8-digit domain in upper case
    {"index": 0, "name": "NVIDIA GeForce RTX 3090", "free": 20 * GiB, "total": 24 * GiB, "uuid": "GPU-aaa",
     "pci_bus_id": "00000000:01:00.0", "driver": "550.54", "utilization": 3},
    {"index": 1, "name": "NVIDIA GeForce RTX 4090", "free": 22 * GiB, "total": 24 * GiB, "uuid": "GPU-bbb",
     "pci_bus_id": "00000000:41:00.0", "driver": "550.54", "utilization": 0},
]


def test_merge_matches_by_pci_bus_id_and_prefers_nvml_free():
    inv = merge(GGML, NVML, (64 * GiB, 60 * GiB), 32, "", [])
    assert [d.id for d in inv.devices] == ["CUDA0", "CUDA1"], "ggml order, CPU not listed"
    c0, c1 = inv.devices
    assert c0.uuid == "GPU-bbb" and c0.pci_bus_id == "00000000:41:00.0"
    assert c1.uuid == "GPU-aaa" and c1.utilization == 3 and c1.driver == "550.54"
    assert c1.free == 20 * GiB and c1.ggml_free == 23 * GiB and c1.nvml_free == 20 * GiB
    assert any("CUDA1" in n and "NVML" in n for n in inv.notes), "the disagreement is recorded"
    assert not any("CUDA0" in n for n in inv.notes)
    assert inv.cpu_name == "AMD EPYC" and inv.cpu_cores == 32


def test_merge_without_nvml_keeps_ggml_figures_and_notes_unusable_gpus():
    inv = merge(GGML[:2], [], (8 * GiB, 4 * GiB), 4, "x", ["NVML unavailable"])
    assert inv.devices[0].free == 22 * GiB and inv.devices[0].nvml_free is None
    cpu_only = merge(GGML[:1], NVML[:1], (8 * GiB, 4 * GiB), 4, "x", [])
    assert cpu_only.devices == () and any("cannot use it" in n for n in cpu_only.notes)


def test_probe_that_hangs_is_reported_not_raised():
    res, why = probe_ggml(timeout=0.01)
    assert res is None and "did not finish" in why
