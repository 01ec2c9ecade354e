"""Model scheduler on live servers with simulated memory (STRATA_DEVICES-style inventories): two models at
once, keep_alive 0, least-recently-used eviction when the planner says the next model does not fit, a busy
model is never unloaded under its requests, a failed load answers every waiter, a dead runner is replaced."""
from __future__ import annotations

import json
import os
import signal
import threading

import httpx
import ollama
import pytest

from service_util import wait_for as _wait_for

MODEL = "smollm2:135m"
NUM_CTX, SLOTS = 512, 1
MiB = 1024 * 1024


def _inventory(host_avail: int) -> dict:
    return {"devices": [], "host_ram_total": 64 * 1024 * MiB, "host_ram_available": host_avail, "cpu_cores": 2,
            "cpu_name": "simulated"}


def _fits(info, host_avail: int) -> bool:
    from app.discovery.simulated import inventory_from_dict
    from app.engine.planner.dryrun import plan_measured
    from app.service.generation.options import plan_options

    o = plan_options({}, num_ctx_default=NUM_CTX, num_parallel=SLOTS, n_ctx_train=info.context_length)
    return plan_measured(info, inventory_from_dict(_inventory(host_avail)), o).fits


def _predicted(info) -> int:
    from app.discovery.simulated import inventory_from_dict
    from app.engine.planner.dryrun import plan_measured
    from app.service.generation.options import plan_options

    o = plan_options({}, num_ctx_default=NUM_CTX, num_parallel=SLOTS, n_ctx_train=info.context_length)
    lay = plan_measured(info, inventory_from_dict(_inventory(64 * 1024 * MiB)), o)
    return sum(d.total for d in lay.devices)


def _start(live_service, tmp, name: str, host_avail: int):
    home = tmp / name
    home.mkdir()
    (home / "devices.json").write_text(json.dumps(_inventory(host_avail)))
    svc = live_service(n_threads=1, num_ctx=NUM_CTX, num_parallel=SLOTS, keep_alive="10m",
                       devices_json=str(home / "devices.json"), home=home)
    httpx.post(svc.url + "/api/copy", json={"source": MODEL, "destination": "second"}).raise_for_status()
    return svc


@pytest.fixture(scope="module")
def info(smollm2_path):
    from app.engine.gguf.model_info import read_model_info

    return read_model_info(smollm2_path)


@pytest.fixture(scope="module")
def roomy(live_service, tmp_path_factory, info):
    svc = _start(live_service, tmp_path_factory.mktemp("sched"), "roomy", 64 * 1024 * MiB)
    yield svc


@pytest.fixture(scope="module")
def one_model_box(live_service, tmp_path_factory, info):
    """Host RAM for exactly one copy of the model, by the planner's own prediction (margins included)."""
    need = _predicted(info)
    avail = next(a for a in range(need, 16 * need, need // 8) if _fits(info, a))
    assert not _fits(info, avail - need), "two copies must not fit"
    svc = _start(live_service, tmp_path_factory.mktemp("sched"), "one-model", avail)
    yield svc


def _loaded(svc) -> dict[str, dict]:
    return {m["name"]: m for m in httpx.get(svc.url + "/api/ps", timeout=30).json()["models"]}


def test_two_models_loaded_and_keep_alive_zero_unloads(roomy):
    c = ollama.Client(host=roomy.url)
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 2})
    c.generate(model="second", prompt="Hi", options={"num_predict": 2})
    loaded = _loaded(roomy)
    assert {MODEL, "second:latest"} <= set(loaded)
    pids = {loaded[MODEL]["strata"]["pid"], loaded["second:latest"]["strata"]["pid"]}
    assert len(pids) == 2 and None not in pids                          # one runner process per model
    r = c.generate(model="second", keep_alive=0)
    assert r.done_reason == "unload"
    _wait_for(lambda: "second:latest" not in _loaded(roomy), what="unload of second")
    assert MODEL in _loaded(roomy)
    # its runner process is gone (all its memory came back)
    pid = loaded["second:latest"]["strata"]["pid"]
    _wait_for(lambda: not _alive(pid), what="runner process exit")


def test_keep_alive_duration_expires(roomy):
    c = ollama.Client(host=roomy.url)
    c.generate(model="second", prompt="Hi", options={"num_predict": 1}, keep_alive="1s")
    _wait_for(lambda: "second:latest" not in _loaded(roomy), what="keep_alive expiry")
    c.generate(model="second", prompt="Hi", options={"num_predict": 1}, keep_alive=-1)
    assert _loaded(roomy)["second:latest"]["expires_at"].startswith("2318")     # forever


def test_lru_eviction_when_the_next_model_does_not_fit(one_model_box):
    svc = one_model_box
    c = ollama.Client(host=svc.url)
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 2})
    assert set(_loaded(svc)) == {MODEL}
    c.generate(model="second", prompt="Hi", options={"num_predict": 2})
    assert set(_loaded(svc)) == {"second:latest"}                       # the idle one made room
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 2})
    assert set(_loaded(svc)) == {MODEL}
    assert 'strata_model_loads_total{model="second:latest",result="ok"} 1' in httpx.get(svc.url + "/metrics").text


def test_busy_model_is_not_evicted_under_its_request(one_model_box):
    svc = one_model_box
    c = ollama.Client(host=svc.url)
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
    parts: list = []
    first_token = threading.Event()

    def long_request():
        for p in c.generate(model=MODEL, prompt="Tell a long story.", stream=True,
                            options={"num_predict": 120, "ignore_eos": True}):
            parts.append(p)
            first_token.set()

    t = threading.Thread(target=long_request)
    t.start()
    assert first_token.wait(120)
    other = c.generate(model="second", prompt="Hi", options={"num_predict": 2})   # waits for MODEL to go idle
    t.join(120)
    assert parts[-1].done and parts[-1].eval_count == 120                # never cut short by the eviction
    assert other.done and set(_loaded(svc)) == {"second:latest"}


def test_failed_load_answers_every_waiter(live_service, tmp_path, smollm2_path):
    svc = _start(live_service, tmp_path, "tiny", 64 * MiB)                 # nothing fits in 64 MiB
    try:
        results: list = [None] * 3

        def ask(i):
            try:
                ollama.Client(host=svc.url).generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
            except ollama.ResponseError as e:
                results[i] = e

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(isinstance(e, ollama.ResponseError) for e in results)
        assert all(e.status_code == 507 and "does not fit" in str(e) for e in results)
        ps = _loaded(svc)[MODEL]["strata"]
        assert ps["state"] == "failed" and "does not fit" in ps["error"]
    finally:
        svc.stop()


def test_dead_runner_is_replaced_on_next_request(roomy):
    c = ollama.Client(host=roomy.url)
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
    pid = _loaded(roomy)[MODEL]["strata"]["pid"]
    os.kill(pid, signal.SIGKILL)                                        # as a llama.cpp abort would
    _wait_for(lambda: MODEL not in _loaded(roomy), what="dead runner dropped")
    r = c.generate(model=MODEL, prompt="Hi", options={"num_predict": 2})
    assert r.done and _loaded(roomy)[MODEL]["strata"]["pid"] != pid


def test_cold_start_concurrent_requests_and_unload_on_shutdown(live_service, tmp_path, smollm2_path):
    svc = _start(live_service, tmp_path, "shutdown", 64 * 1024 * MiB)    # fresh: nothing cached, nothing loaded
    c = ollama.Client(host=svc.url)
    threads = [threading.Thread(target=c.generate, kwargs=dict(model=MODEL, prompt="Hi", options={"num_predict": 1}))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert _loads_ok(svc, MODEL) == 1                                    # one load, however the requests raced
    pid = _loaded(svc)[MODEL]["strata"]["pid"]
    svc.stop()
    _wait_for(lambda: not _alive(pid), 30, "runner exit on shutdown")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _loads_ok(svc, name: str) -> int:
    prefix = f'strata_model_loads_total{{model="{name}",result="ok"}} '
    line = next((l for l in httpx.get(svc.url + "/metrics").text.splitlines() if l.startswith(prefix)), None)
    return int(line.split()[-1]) if line else 0


def test_requests_for_a_loading_model_wait_for_one_load(roomy):
    c = ollama.Client(host=roomy.url)
    c.generate(model=MODEL, keep_alive=0)
    _wait_for(lambda: MODEL not in _loaded(roomy), what="unload")
    before = _loads_ok(roomy, MODEL)
    results: list = [None] * 3

    def ask(i):
        results[i] = c.generate(model=MODEL, prompt=f"Hi {i}", options={"num_predict": 2})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(r is not None and r.done for r in results)
    assert _loads_ok(roomy, MODEL) == before + 1                      # one load served all three


def test_new_load_options_reload_an_idle_model(roomy):
    c = ollama.Client(host=roomy.url)
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
    assert _loaded(roomy)[MODEL]["context_length"] == NUM_CTX
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 1, "num_ctx": 256})
    m = _loaded(roomy)[MODEL]
    assert m["context_length"] == 256 and m["strata"]["layout"]["n_ctx"] == 256 * SLOTS


def test_max_loaded_models(live_service, tmp_path, smollm2_path):
    svc = _start(live_service, tmp_path, "max1", 64 * 1024 * MiB)
    svc.stop()
    svc = live_service(svc.config, port=0, max_loaded_models=1, home=svc.home)
    try:
        c = ollama.Client(host=svc.url)
        c.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
        c.generate(model="second", prompt="Hi", options={"num_predict": 1})
        assert set(_loaded(svc)) == {"second:latest"}
    finally:
        svc.stop()


def test_unload_request_on_a_busy_model_waits_for_its_requests(roomy):
    c = ollama.Client(host=roomy.url)
    c.generate(model=MODEL, prompt="Hi", options={"num_predict": 1})
    parts: list = []
    first_token = threading.Event()

    def long_request():
        for p in c.generate(model=MODEL, prompt="Tell a long story.", stream=True, keep_alive="10m",
                            options={"num_predict": 80, "ignore_eos": True}):
            parts.append(p)
            first_token.set()

    t = threading.Thread(target=long_request)
    t.start()
    assert first_token.wait(120)
    assert c.generate(model=MODEL, keep_alive=0).done_reason == "unload"
    t.join(120)
    assert parts[-1].done and parts[-1].eval_count == 80                 # the running request finished
    _wait_for(lambda: MODEL not in _loaded(roomy), what="unload once idle")


def test_the_what_if_layout_is_the_plan_its_load_uses(roomy):
    """/api/layout plans by the load's own path: for a model whose Modelfile sets a load option, the what-if layout
    (nothing loaded) equals, field for field, the layout its load then uses (/api/ps)."""
    with httpx.Client(base_url=roomy.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": "planned", "stream": False,
                                        "modelfile": f"FROM {MODEL}\nPARAMETER num_ctx 768\n"})
        assert r.status_code == 200, r.text
        what_if = c.post("/api/layout", json={"model": "planned"})
        assert what_if.status_code == 200, what_if.text
        assert "planned:latest" not in _loaded(roomy)
        c.post("/api/generate", json={"model": "planned", "keep_alive": "10m"}).raise_for_status()
        try:
            used = _loaded(roomy)["planned:latest"]["strata"]["layout"]
            assert used["n_ctx"] == 768 and used["options"]["n_threads"] == 1
            assert what_if.json()["layout"] == used
        finally:
            c.post("/api/generate", json={"model": "planned", "keep_alive": 0}).raise_for_status()
