"""Workers that die. Through the real service and the official `ollama` client: a worker killed while a model split
over it is streaming fails that request with an error naming the worker, the service stays up, and the next load
plans without the dead worker. And `strata worker` starts its RPC server again when that server crashes."""
from __future__ import annotations

import os
import re
import signal

import httpx
import ollama
import pytest

from app.ggml import rpc
from rpc_util import Worker, start_workers
from service_util import wait_for

MODEL = "smollm2:135m"


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    ws = start_workers(tmp_path_factory.mktemp("rpc-fault-workers"), 2)
    yield ws
    for w in ws:
        w.stop()


@pytest.fixture(scope="module")
def server(live_service, workers, smollm2_path):
    old = os.environ.get("STRATA_RPC")
    os.environ["STRATA_RPC"] = ",".join(w.endpoint for w in workers)     # read by discovery in the service
    svc = live_service(n_threads=1, num_ctx=512, num_parallel=1, keep_alive="10m")
    yield svc
    svc.stop()
    if old is None:
        os.environ.pop("STRATA_RPC", None)
    else:
        os.environ["STRATA_RPC"] = old


def _strata(url: str) -> dict:
    ps = httpx.get(url + "/api/ps", timeout=30).json()["models"]
    return next(m for m in ps if m["name"] == MODEL)["strata"]


def _layout(url: str) -> dict:
    return _strata(url)["layout"]


def test_killing_a_worker_mid_stream(server, workers):
    w0, w1 = workers
    client = ollama.Client(host=server.url, timeout=120)
    stream = client.generate(model=MODEL, prompt="Count from one to one thousand:", stream=True,
                             options={"num_gpu": 20, "tensor_split": [1, 1], "num_predict": 4000,
                                      "ignore_eos": True, "temperature": 0})
    got = []
    with pytest.raises(ollama.ResponseError) as err:
        for part in stream:
            got.append(part.response)
            if len(got) == 3:
                st = _strata(server.url)
                ids = [f"RPC0[{w0.endpoint}]", f"RPC0[{w1.endpoint}]"]
                assert st["layout"]["gpu_devices"] == ids
                for dev in ids:          # /api/ps: predicted next to actual for each worker too
                    assert st["actual"][dev]["model"] > 0 and st["predicted_kinds"][dev]["model"] > 0
                w1.kill()
    assert len(got) >= 3
    msg = str(err.value)
    print(f"\nerror the client got: {msg}")
    assert f"RPC worker {w1.endpoint} is unreachable" in msg, msg
    assert w0.endpoint not in msg, "the worker that still answers is not blamed"

    assert httpx.get(server.url + "/api/version", timeout=10).status_code == 200, "the service stays up"
    r = client.generate(model=MODEL, prompt="Hello", options={"num_predict": 4, "temperature": 0})
    assert r.done and r.eval_count == 4
    lay = _layout(server.url)
    assert not any(w1.endpoint in d for d in lay["gpu_devices"]), "the next load plans without the dead worker"
    assert lay["gpu_devices"] == [f"RPC0[{w0.endpoint}]"], lay["reasons"]
    inv = httpx.get(server.url + "/api/devices", timeout=60).json()
    assert any(w1.endpoint in n and "unreachable" in n for n in inv["notes"]), inv["notes"]


def test_worker_starts_its_server_again_after_a_crash(tmp_path):
    w = Worker(tmp_path / "w").wait_ready()
    try:
        pid = int(re.search(r"ready on \S+ \(pid (\d+)\)", w.output()).group(1))
        os.kill(pid, signal.SIGKILL)            # the RPC server child, as a GGML_ABORT would end it
        wait_for(lambda: "starting it again" in w.output(), 60, "restart message")
        wait_for(lambda: len(re.findall(r"ready on", w.output())) == 2, 120, "second ready")
        info = rpc.hello(w.endpoint, 5)
        assert info.version[0] == rpc.PROTO_MAJOR and len(info.memory) == 1
        assert w.proc.poll() is None
    finally:
        w.stop()
    assert w.proc.returncode == 0 and "strata worker: stopped" in w.output()
