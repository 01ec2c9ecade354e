"""`strata serve` / `run` / `ps` / `stop` as real processes: the README's commands, and `strata serve` reading
the settings file (app/settings.py; its rules in-process: tests/unit/test_settings.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import httpx
import pytest

from app import settings
from serve_process import free_port, strata_serve

MODEL = "smollm2:135m"


def _strata(*args, env, timeout=180, input=None):
    return subprocess.run([sys.executable, "-m", "app", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, input=input)


@pytest.fixture()
def serve(strata_home, smollm2_path, tmp_path):
    with strata_serve(tmp_path / "serve.log", STRATA_NUM_CTX="1024") as running:
        yield running


def test_serve_run_ps_stop(serve):
    url, env, proc = serve
    r = _strata("run", MODEL, "Say hi in one word.", "--verbose", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "eval count:" in r.stderr
    ps = _strata("ps", env=env)
    assert ps.returncode == 0 and MODEL in ps.stdout and "100% CPU" in ps.stdout
    assert _strata("stop", MODEL, env=env).returncode == 0
    end = time.monotonic() + 60
    while MODEL in _strata("ps", env=env).stdout:
        assert time.monotonic() < end, "model still loaded after strata stop"
        time.sleep(0.2)
    # piped stdin is a one-shot prompt, like `echo ... | ollama run`
    r = _strata("run", MODEL, env=env, input="Say hello.")
    assert r.returncode == 0 and r.stdout.strip()
    r = _strata("run", "no-such-model", "hi", env=env)
    assert r.returncode == 1 and "not found" in r.stderr


def test_pin_keep_alive_and_ps(serve):
    """`strata pin` keeps a model loaded and sets its own keep-alive; `strata ps` shows the pin; --off undoes it."""
    url, env, proc = serve
    r = _strata("pin", MODEL, "--keep-alive", "1h", env=env)
    assert r.returncode == 0 and f"{MODEL}: pinned, keep-alive 1h" in r.stdout, r.stderr
    listed = _strata("pin", env=env).stdout.splitlines()
    assert listed[0].split() == ["NAME", "PINNED", "KEEP", "ALIVE"] and listed[1].split() == [MODEL, "yes", "1h"]
    assert _strata("run", MODEL, "Hi", env=env).returncode == 0
    ps = _strata("ps", env=env).stdout.splitlines()
    assert ps[0].split()[-1] == "PINNED" and MODEL in ps[1] and "Forever" in ps[1] and ps[1].endswith("yes"), ps
    r = _strata("pin", MODEL, "--off", env=env)
    assert r.returncode == 0 and "not pinned, keep-alive 1h" in r.stdout
    ps = _strata("ps", env=env).stdout.splitlines()
    assert not ps[1].endswith("yes") and "from now" in ps[1], ps        # its own 1h runs now
    r = _strata("pin", "no-such-model", env=env)
    assert r.returncode == 1 and "not found" in r.stderr
    r = _strata("pin", MODEL, "--keep-alive", "soon", env=env)
    assert r.returncode == 1 and "keep_alive" in r.stderr


def test_serve_on_a_taken_port_exits_nonzero(serve):
    url, env, proc = serve
    r = _strata("serve", env=env, timeout=60)
    assert r.returncode == 1
    assert "already in use" in r.stderr


def test_serve_stops_cleanly_on_sigint(serve):
    url, env, proc = serve
    httpx.post(url + "/api/generate", json={"model": MODEL}, timeout=120)
    pid = httpx.get(url + "/api/ps").json()["models"][0]["strata"]["pid"]
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    end = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
        assert time.monotonic() < end, "runner outlived the service"
        time.sleep(0.1)


def test_strata_serve_listens_where_the_settings_file_says(strata_home, clean_env, tmp_path):
    port = free_port()
    settings.save({"host": f"127.0.0.1:{port}", "api_key": "file-key", "num_threads": 1,
                   "external_sources": []})
    env = {k: v for k, v in os.environ.items() if k != "STRATA_HOST"}
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < end, open(tmp_path / "serve.log").read()
            try:
                urllib.request.urlopen(url + "/api/version", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        # the file's API key is enforced
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/api/tags", timeout=10)
        assert e.value.code == 401
        req = urllib.request.Request(url + "/api/tags", headers={"Authorization": "Bearer file-key"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert "models" in json.loads(r.read())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        log.close()
