"""Models split across this machine's CPU and two RPC workers: real `strata worker` processes (llama.cpp's RPC server
over the CPU backend) on loopback ports, discovered through STRATA_RPC, planned by the planner (blocks on the
CPU and on each worker), loaded by a real runner. Greedy output is identical to a local run, and what llama.cpp
allocates on each worker matches the prediction within the bounds tests/integration/engine/test_verify_layout.py uses."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from app.discovery import discover
from app.engine import protocol as P
from app.engine.client import LoadError, RunnerClient
from app.engine.gguf.model_info import read_model_info
from app.engine.planner.options import plan_layout, plan_options
from app.engine.planner.verify import KINDS, predicted_of
from app.ggml import rpc
from engine_util import cpu_layout
from rpc_util import free_port, start_workers

MiB = 1024 ** 2
ROUNDING = int(0.005 * MiB) + 1      # the log prints MiB with two decimals
PROMPT = "The three primary colors are"


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    ws = start_workers(tmp_path_factory.mktemp("rpc-workers"), 2)
    yield ws
    for w in ws:
        w.stop()


@pytest.fixture
def rpc_env(workers, monkeypatch):
    monkeypatch.setenv("STRATA_RPC", ",".join(w.endpoint for w in workers))
    return workers


@pytest.fixture(scope="module")
def dense6_gguf(synthetic_dir):
    """The synthetic dense llama with 6 blocks, so a split can put blocks on the CPU and on both workers."""
    from gguf_factory import write_dense_llama

    return write_dense_llama(synthetic_dir / "dense-llama-6L.gguf", n_layer=6)


def run(coro, timeout=300):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def greedy(layout, n: int = 24) -> tuple[list[tuple[str, float]], str, P.Loaded]:
    """(token pieces with their logprobs, text, load report) of a greedy generation on a runner for `layout`."""
    client = RunnerClient(layout, n_threads=1, model_name="rpc-test")
    loaded = await client.start()
    try:
        req = P.GenerateRequest(id="g", prompt=PROMPT, raw=True, num_predict=n, ignore_eos=True, logprobs=True,
                                sampling=P.SamplingParams(temperature=0.0, repeat_penalty=1.0))
        events = [e async for e in client.generate(req)]
    finally:
        await client.close()
    toks = [(lp.token, lp.logprob) for e in events if isinstance(e, P.TokenEvent) for lp in (e.logprobs or [])]
    return toks, "".join(e.text for e in events if isinstance(e, P.TokenEvent)), loaded


def test_worker_list_and_the_warning_beyond_loopback(tmp_path):
    port = free_port()
    env_cmd = [sys.executable, "-m", "app", "worker", "--port", str(port), "--list"]
    p = subprocess.run(env_cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"strata worker on 127.0.0.1:{port} serves:" in p.stdout and "CPU" in p.stdout
    assert f"STRATA_RPC=127.0.0.1:{port}" in p.stdout and "tensor cache:" in p.stdout
    assert "WARNING" not in p.stderr, "loopback is this machine only: nothing to warn about"
    p = subprocess.run(env_cmd + ["--host", "0.0.0.0"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    assert "NO authentication and NO encryption" in p.stderr and "trust" in p.stderr
    assert f"ssh -N -L {port}:127.0.0.1:{port}" in p.stderr, "how to tunnel it instead"
    for bad, what in ((["--host", "gpu-box"], "IPv4 address"), (["--host", "::1"], "IPv4"),
                      (["--device", "CUDA7"], "no such device"), (["--port", "70000"], "out of range")):
        p = subprocess.run(env_cmd + bad, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and what in p.stderr, (bad, p.stderr)


def test_discovery_adds_the_workers_and_notes_the_rest(rpc_env, monkeypatch):
    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("STRATA_RPC", ",".join([w.endpoint for w in rpc_env] + [dead, "not-an-endpoint"]))
    inv = discover()
    remote = inv.remote
    assert [d.endpoint for d in remote] == [w.endpoint for w in rpc_env]
    for d, w in zip(remote, rpc_env):
        assert d.id == f"RPC0[{w.endpoint}]" and w.endpoint in d.name and d.backend == "RPC"
        assert 0 < d.free <= d.total, "free and total memory from ggml_backend_rpc_get_device_memory"
    notes = " | ".join(inv.notes)
    assert f"RPC worker {dead} is unreachable" in notes and "not-an-endpoint" in notes


@pytest.mark.parametrize("model", ["smollm2", "dense6"])
def test_split_over_cpu_and_two_workers_matches_a_local_run(model, rpc_env, request):
    path = str(request.getfixturevalue({"smollm2": "smollm2_path", "dense6": "dense6_gguf"}[model]))
    info = read_model_info(path)
    inv = discover()
    assert len(inv.remote) == 2
    # num_gpu leaves the first blocks on the CPU; the split puts the rest on both workers
    num_gpu = {"smollm2": 20, "dense6": 5}[model]
    opts = plan_options({"num_gpu": num_gpu, "tensor_split": (1.0, 1.0)}, num_ctx_default=512, num_parallel=1,
                        n_ctx_train=info.context_length)
    layout = plan_layout(info, inv, opts)
    assert "compute buffers measured by a no_alloc dry run" in layout.reasons, layout.reasons
    ids = [f"RPC0[{w.endpoint}]" for w in rpc_env]
    assert layout.gpu_devices == tuple(ids)
    by_id = {d.device_id: d for d in layout.devices}
    assert by_id["CPU"].layers and by_id[ids[0]].layers and by_id[ids[1]].layers, "blocks on all three"
    assert any("network cost: 3 hops" in r for r in layout.reasons)

    toks, text, loaded = run(greedy(layout))
    local_toks, local_text, _ = run(greedy(cpu_layout(path, num_ctx=512, num_parallel=1, n_layer=info.n_layer)))
    assert [t for t, _ in toks] == [t for t, _ in local_toks] and text == local_text and len(toks) == 24
    # the same kernels on the same CPU compute the same numbers, wherever the process is
    assert max(abs(a - b) for (_, a), (_, b) in zip(toks, local_toks)) < 1e-4

    predicted = predicted_of(layout)
    print(f"\n{model}: predicted vs actual MiB per kind")
    for dev in ["CPU"] + ids:
        print(f"  {dev:<24}" + " ".join(f"{k} {predicted.get(dev, {}).get(k, 0) / MiB:.2f}/"
                                       f"{loaded.actual.get(dev, {}).get(k, 0) / MiB:.2f}" for k in KINDS))
    for dev in ids:
        p, a = predicted[dev], loaded.actual[dev]
        pt, at = sum(p.values()), sum(a.values())
        assert abs(pt - at) <= 0.02 * at, (model, dev, p, a)
        for k in KINDS:
            assert abs(p[k] - a[k]) <= max(0.05 * a[k], ROUNDING), (model, dev, k, p[k], a[k])


def test_a_worker_that_is_not_there_fails_the_load_naming_it(smollm2_path):
    dead = f"127.0.0.1:{free_port()}"
    from app.discovery.simulated import inventory_from_dict

    info = read_model_info(smollm2_path)
    inv = inventory_from_dict({"devices": [{"endpoint": dead, "total": "8 GiB"}], "host_ram_total": "8 GiB",
                               "cpu_cores": 2})
    layout = plan_layout(info, inv, plan_options({}, num_ctx_default=512), measure=False)
    assert layout.gpu_devices == (rpc.remote_id(dead, 0),)
    with pytest.raises(LoadError, match=f"RPC worker {dead} is unreachable"):
        run(greedy(layout, 2))
