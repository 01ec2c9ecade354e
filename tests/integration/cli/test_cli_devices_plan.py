"""`strata devices` and `strata plan` as a user runs them: real processes (python -m app) on this machine and on
simulated inventories (tests/support/sim_devices, a remote worker included); exit codes and messages on errors.
The rules underneath are unit tests: tests/unit/discovery/test_discovery.py, tests/unit/engine/planner/."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from repo_paths import ROOT, SIM_DEVICES

SIM = SIM_DEVICES
W1 = "10.0.0.21:50052"                 # a worker that is never dialled: the inventory is simulated


def _cli(*args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=env)


def test_cli_devices_json():
    p = _cli("devices", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["host_ram_total"] > 0 and d["simulated"] is False
    p = _cli("devices", "--devices", str(SIM / "two_24gb.json"))
    assert p.returncode == 0 and "CUDA1" in p.stdout
    p = _cli("devices", "--devices", str(SIM / "missing_total.json"))
    assert p.returncode == 2 and "devices[0].total" in p.stderr


def test_cli_plan(smollm2_path):
    p = _cli("plan", str(smollm2_path), "--json", "--ctx", "2048", "--parallel", "2")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["fits"] and d["layout"]["n_ctx"] == 4096 and d["layout"]["devices"][0]["device_id"] == "CPU"
    p = _cli("plan", str(smollm2_path), "--devices", str(SIM / "one_6gb.json"), "--no-measure")
    assert p.returncode == 0 and "n_gpu_layers=31" in p.stdout, p.stdout + p.stderr
    p = _cli("plan", str(smollm2_path), "--ctx", "-5")
    assert p.returncode == 2 and "num_ctx" in p.stderr
    p = _cli("plan", "/nonexistent/model.gguf")
    assert p.returncode == 2 and "model.gguf" in p.stderr


def test_cli_plan_refuses_a_truncated_gguf(smollm2_path, tmp_path):
    """A GGUF whose tensor data is not where the header says (cut short) is refused before llama.cpp sees it."""
    bad = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as f:
        bad.write_bytes(f.read(5_000_000))
    p = _cli("plan", str(bad))
    assert p.returncode == 2 and "cut.gguf" in p.stderr, p.stderr


def test_strata_plan_shows_remote_columns(tmp_path, smollm2_path):
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"devices": [{"endpoint": W1, "total": "24 GiB"}], "host_ram_total": "16 GiB",
                               "cpu_cores": 4}))
    p = subprocess.run([sys.executable, "-m", "app", "plan", str(smollm2_path), "--devices", str(sim),
                        "--num-gpu", "20", "--no-measure"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}
    assert f"RPC0[{W1}]" in rows and rows[f"RPC0[{W1}]"].split()[1] == "11-29"
    assert "network cost" in p.stdout
    d = subprocess.run([sys.executable, "-m", "app", "devices", "--devices", str(sim)], capture_output=True,
                       text=True, timeout=60)
    assert f"remote (strata worker at {W1})" in d.stdout


def test_strata_plan_honours_the_memory_cap(smollm2_path):
    """STRATA_MAX_MEMORY bounds `strata plan` as it bounds a load: under a cap below the model's need the plan does
    not fit and says why."""
    args = ("plan", str(smollm2_path), "--devices", str(SIM / "one_6gb.json"), "--no-measure", "--ctx", "2048")
    assert _cli(*args).returncode == 0
    p = _cli(*args, env_extra={"STRATA_MAX_MEMORY": "50MiB"})
    assert p.returncode == 1 and "DOES NOT FIT" in p.stdout and "memory cap" in p.stdout + p.stderr, p.stdout
