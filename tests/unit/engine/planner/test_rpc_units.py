"""Remote devices without workers: endpoints and ids, simulated inventories with remote devices, the planner's
rules for them (local GPUs first, workers only when they let more of the model off the CPU, remote devices
first in llama.cpp's `devices`, the network cost in the reasons), a worker kept to one runner, the handshake
against things that are not workers, and the memory view's columns for a remote device (`strata plan` with a
remote device: tests/integration/cli/test_cli_devices_plan.py)."""
from __future__ import annotations

import socket
import threading

import pytest

from app.discovery.remote import parse_workers, reserve_workers
from app.discovery.simulated import inventory_from_dict
from app.engine.planner.network import machine_path, remote_first
from app.engine.planner.search import plan
from app.engine.layout.types import PlanOptions
from app.engine.gguf.model_info import read_model_info
from app.ggml import rpc
from layout_oracle import realise
from model_shapes import dense_8b

MiB = 1024 ** 2
COMPUTE = {"CPU": 300 * MiB, "*": 300 * MiB}
W1, W2 = "10.0.0.21:50052", "10.0.0.22:50052"


def inv(local_gpu: str | None, workers: dict[str, str], ram: str = "64 GiB"):
    devices = [{"id": "CUDA0", "name": "RTX 4060", "total": local_gpu}] if local_gpu else []
    devices += [{"endpoint": ep, "total": size} for ep, size in workers.items()]
    return inventory_from_dict({"devices": devices, "host_ram_total": ram, "cpu_cores": 8})


# ---- endpoints, ids, the list of workers -----------------------------------------------------------------------

def test_endpoints_and_remote_ids():
    assert rpc.parse_endpoint(" 192.168.1.20:50052 ") == "192.168.1.20:50052"
    assert rpc.parse_endpoint("gpu-box.lan:1") == "gpu-box.lan:1"
    for bad in ("192.168.1.20", ":50052", "[::1]:50052", "host:99999", "a b:1", "host:port"):
        with pytest.raises(ValueError, match="RPC worker"):
            rpc.parse_endpoint(bad)
    rid = rpc.remote_id("10.0.0.21:50052", 1)
    assert rid == "RPC1[10.0.0.21:50052]" and rpc.parse_remote_id(rid) == ("10.0.0.21:50052", 1)
    assert rpc.parse_remote_id("CUDA0") is None and rpc.parse_remote_id("CPU") is None
    assert rpc.endpoints_of(["CUDA0", "RPC0[a:1]", "RPC1[a:1]", "RPC0[b:2]"]) == ["a:1", "b:2"]


def test_worker_list_notes_bad_entries_and_keeps_the_rest():
    eps, notes = parse_workers("10.0.0.21:50052, nonsense,,10.0.0.21:50052,box:7", "STRATA_RPC")
    assert eps == ["10.0.0.21:50052", "box:7"]          # duplicates once, empty entries skipped
    assert len(notes) == 1 and "nonsense" in notes[0] and notes[0].startswith("STRATA_RPC")
    assert parse_workers(None, "STRATA_RPC") == ([], [])
    eps, notes = parse_workers(["a:1", 5], "settings rpc_workers")
    assert eps == ["a:1"] and "5" in notes[0]


# ---- simulated inventories ---------------------------------------------------------------------------------------

def test_simulated_remote_devices():
    i = inventory_from_dict({"devices": [{"id": "CUDA0", "total": "8 GiB"},
                                         {"endpoint": W1, "total": "24 GiB", "free": "20 GiB"},
                                         {"endpoint": W1, "total": "24 GiB"},
                                         {"id": f"RPC0[{W2}]", "total": "12 GiB"}],
                             "host_ram_total": "32 GiB", "cpu_cores": 8})
    cuda, a, b, c = i.devices
    assert cuda.endpoint is None and cuda.backend == "SIM"
    assert (a.id, a.endpoint, a.backend, a.free) == (f"RPC0[{W1}]", W1, "RPC", 20 * 1024 ** 3)
    assert b.id == f"RPC1[{W1}]" and W1 in b.name, "a worker's second device, labelled with the machine"
    assert c.endpoint == W2, "an RPC id names its worker by itself"
    assert i.remote == (a, b, c)
    for dev, msg in (({"endpoint": "nohost", "total": "1 GiB"}, "devices\\[0\\].endpoint"),
                     ({"endpoint": 7, "total": "1 GiB"}, "devices\\[0\\].endpoint"),
                     ({"endpoint": W1, "total": "1 GiB", "kind": "cpu"}, "devices\\[0\\].kind")):
        with pytest.raises(ValueError, match=msg):
            inventory_from_dict({"devices": [dev], "host_ram_total": "8 GiB", "cpu_cores": 2})


# ---- the planner -------------------------------------------------------------------------------------------------

def _check_realised(info, layout):
    where, wbytes, kvb = realise(info, layout)
    for d in layout.devices:
        assert d.weights_total == wbytes.get(d.device_id, 0), d.device_id
        assert d.kv == kvb.get(d.device_id, 0), d.device_id


def test_local_gpu_that_holds_the_model_leaves_workers_unused(smollm2_path):
    info = read_model_info(smollm2_path)
    lay = plan(info, inv("8 GiB", {W1: "24 GiB"}), PlanOptions(num_ctx=4096), COMPUTE)
    assert lay.fits and lay.gpu_devices == ("CUDA0",)
    assert not any("RPC" in r or "network" in r for r in lay.reasons)


def test_workers_take_what_the_local_gpu_cannot_hold():
    info = dense_8b()
    i = inv("6 GiB", {W1: "24 GiB", W2: "24 GiB"})
    alone = plan(info, inv("6 GiB", {}), PlanOptions(num_ctx=16384), COMPUTE)
    assert alone.fits and alone.n_gpu_layers <= info.n_layer, "the local GPU alone cannot hold it"
    lay = plan(info, i, PlanOptions(num_ctx=16384), COMPUTE)
    assert lay.fits and lay.n_gpu_layers == info.n_layer + 1, "with a worker every block leaves the CPU"
    assert lay.gpu_devices == (f"RPC0[{W1}]", "CUDA0"), "one worker is enough (fewest), remote first, local last"
    by_id = {d.device_id: d for d in lay.devices}
    assert by_id["CUDA0"].weights.get("output"), "the output layer (big logits) stays on the local GPU"
    local_blocks = len(by_id["CUDA0"].layers)
    assert local_blocks >= len([b for b in alone.layer_device if b == "CUDA0"]) - 1, "the local GPU is filled first"
    assert max(by_id[f"RPC0[{W1}]"].layers) < min(by_id["CUDA0"].layers)
    assert not by_id["CPU"].layers
    _check_realised(info, lay)
    text = " | ".join(lay.reasons)
    assert "RPC workers take" in text and f"on RPC0[{W1}]" in text
    assert f"network cost: 2 hops per token (this machine -> {W1} -> this machine)" in text


def test_no_local_gpu_uses_the_fewest_workers_and_says_the_logits_cross(smollm2_path):
    info = read_model_info(smollm2_path)
    lay = plan(info, inv(None, {W1: "24 GiB", W2: "24 GiB"}), PlanOptions(num_ctx=4096), COMPUTE)
    assert lay.fits and len(lay.gpu_devices) == 1 and lay.gpu_devices[0].startswith("RPC0[")
    assert any("logits" in r and "cross the network" in r for r in lay.reasons)
    _check_realised(info, lay)


def test_workers_only_when_they_take_blocks_off_the_cpu(smollm2_path):
    info = read_model_info(smollm2_path)
    tiny = plan(info, inv(None, {W1: "600 MiB"}), PlanOptions(num_ctx=4096), COMPUTE)   # room < margin + compute
    assert tiny.gpu_devices == () and tiny.n_gpu_layers == 0, "a worker without room is not used"


def test_tensor_split_over_local_and_remote_puts_remote_first(smollm2_path):
    info = read_model_info(smollm2_path)
    i = inv("8 GiB", {W1: "24 GiB", W2: "24 GiB"})
    lay = plan(info, i, PlanOptions(num_ctx=4096, num_gpu=25, tensor_split=(1.0, 1.0, 1.0)), COMPUTE)
    assert lay.gpu_devices == (f"RPC0[{W1}]", f"RPC0[{W2}]", "CUDA0")
    cpu, *rest = lay.devices
    assert cpu.layers and all(d.layers for d in rest), "blocks on the CPU and on every device"
    _check_realised(info, lay)
    gpus = i.devices
    assert remote_first(gpus, (0, 2, 1)) == (1, 2, 0)
    assert machine_path(gpus, (1, 2, 0), (3, 3, 3)) == ["this machine", W1, W2, "this machine"]
    assert machine_path(gpus, (1, 0), (0, 5)) == ["this machine"], "a device with no blocks is not visited"


def test_a_worker_serves_one_runner_at_a_time():
    i = inv("8 GiB", {W1: "24 GiB", W2: "24 GiB"})
    out = reserve_workers(i, {f"RPC0[{W1}]": 100 * MiB, "CPU": 10 * MiB})
    by_id = {d.id: d for d in out.devices}
    assert by_id[f"RPC0[{W1}]"].free == 0 and by_id[f"RPC0[{W2}]"].free == i.devices[2].free
    assert by_id["CUDA0"].free == i.devices[0].free
    assert any(W1 in n and "one runner at a time" in n for n in out.notes)
    assert reserve_workers(i, {"CUDA0": 5}) is i


def test_memory_view_column_for_a_remote_device_names_the_machine(smollm2_path):
    from app.gui.memory.memory_data import device_columns

    info = read_model_info(smollm2_path)
    i = inv(None, {W1: "24 GiB"})
    lay = plan(info, i, PlanOptions(num_ctx=4096), COMPUTE)
    cols = device_columns(i.to_dict(), lay.to_dict())
    remote = [c for c in cols if c.device_id == f"RPC0[{W1}]"]
    assert len(remote) == 1 and W1 in remote[0].name and remote[0].get("weights") > 0


# ---- the handshake against things that are not (free) workers ---------------------------------------------------

@pytest.fixture
def tcp_server():
    """A loopback TCP server whose behaviour the test picks: "close" each connection at once, or "silent"."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    mode = {"v": "close"}
    held = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            if mode["v"] == "close":
                c.close()
            else:
                held.append(c)

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{srv.getsockname()[1]}", mode
    srv.close()
    for c in held:
        c.close()


def test_handshake_names_the_worker_and_the_reason(tcp_server):
    ep, mode = tcp_server
    with pytest.raises(rpc.WorkerError, match=f"RPC worker {ep} broke off the handshake"):
        rpc.hello(ep, timeout=60)              # the close comes at once; a bound far above a busy machine's delay
    mode["v"] = "silent"       # what a worker busy with another client looks like
    with pytest.raises(rpc.WorkerError, match="did not answer in 0.5 s .*one client at a time"):
        rpc.hello(ep, timeout=0.5)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    assert "unreachable" in rpc.unreachable([dead, ep], timeout=0.5)[dead]


def test_workers_from_the_settings_file_unless_strata_rpc_is_set(monkeypatch):
    from app import settings
    from app.discovery.remote import configured_workers

    monkeypatch.delenv("STRATA_RPC", raising=False)
    assert configured_workers() == ([], [])
    settings.save({"rpc_workers": [W1, "bad entry"]})
    eps, notes = configured_workers()
    assert eps == [W1] and "bad entry" in notes[0] and notes[0].startswith("settings rpc_workers")
    monkeypatch.setenv("STRATA_RPC", W2)
    assert configured_workers() == ([W2], [])
    settings.settings_path().write_text('{"rpc_workers": "not a list"}')
    monkeypatch.delenv("STRATA_RPC")
    eps, notes = configured_workers()
    assert eps == [] and "rpc_workers" in notes[0]
