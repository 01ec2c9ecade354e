"""`strata --selftest`: prove that a bundle works on this machine, end to end, then exit 0 (1 on any failure).

Each step uses the same code paths as a user would, in the frozen program:
  1. the service (ServiceThread) on a random loopback port, in a throw-away STRATA_HOME;
  2. /api/version, /api/tags and /api/devices (ggml device enumeration runs in a child: `strata -m ...`);
  3. Qt offscreen: the desktop app's chat window against that service, painted once (plugins, icon, style);
  4. with the bundled default model: one /api/generate (layout dry run child + a spawned runner process
     + llama.cpp from the bundled llama_cpp/lib), which must return text.
Every step prints one line `selftest: <step>: <JSON>`; the last line is `selftest: ok` or `selftest: FAILED: ...`.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request

DEFAULT_PROMPT = "Write one short sentence about the sea."


def _say(step: str, data) -> None:
    print(f"selftest: {step}: {json.dumps(data, ensure_ascii=False)}", flush=True)


def _http(url: str, body: dict | None = None, timeout: float = 300.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _qt_check(url: str, home: str) -> dict:
    """Open the real chat window on the offscreen platform, let it poll the service once, render it."""
    from PySide6.QtCore import QCoreApplication, QEventLoop
    from PySide6.QtWidgets import QApplication

    from app.gui.desktop import Desktop

    app = QApplication.instance() or QApplication(["strata"])
    desk = Desktop(url, use_tray=False, history_path=os.path.join(home, "selftest-history.db"))
    try:
        win = desk.open_chat()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:   # a couple of bridge round trips and repaints
            QCoreApplication.processEvents(QEventLoop.AllEvents, 50)
            time.sleep(0.02)
        shot = win.grab()
        if shot.isNull() or shot.width() == 0:
            raise RuntimeError("the chat window rendered nothing")
        return {"platform": app.platformName(), "window": [shot.width(), shot.height()],
                "icon": not desk.icon.isNull(), "style": bool(app.styleSheet())}
    finally:
        desk.shutdown()


def _generate(url: str, model: str, prompt: str, num_predict: int) -> dict:
    t0 = time.monotonic()
    r = _http(url + "/api/generate", {"model": model, "prompt": prompt, "stream": False,
                                      "options": {"temperature": 0, "num_predict": num_predict, "num_ctx": 512}})
    text = r.get("response", "")
    if not text.strip():
        raise RuntimeError(f"generate returned no text: {r}")
    return {"model": model, "text": text, "eval_count": r.get("eval_count"), "seconds": round(time.monotonic() - t0, 1)}


def selftest(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="strata --selftest", description=__doc__.splitlines()[0])
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--num-predict", type=int, default=16)
    p.add_argument("--no-gui", action="store_true", help="skip the Qt step")
    args = p.parse_args(argv)

    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    home = tempfile.mkdtemp(prefix="strata-selftest-")
    os.environ["STRATA_HOME"] = home                 # never touch the user's store
    os.environ["STRATA_EXTERNAL_MODELS"] = "0"      # nor scan their Ollama / LM Studio / HF folders
    service = None
    try:
        from app import __version__
        from app.engine.gguf.builtin_model import DEFAULT_MODEL_NAME, builtin_model_path
        from app.service.config import ServiceConfig
        from app.service.server import ServiceThread

        _say("bundle", {"version": __version__, "frozen": bool(getattr(sys, "frozen", False)),
                        "executable": sys.executable, "python": sys.version.split()[0]})
        config = ServiceConfig.from_env(host="127.0.0.1", port=0, num_parallel=1,
                                        n_threads=max(1, min(2, os.cpu_count() or 1)))
        service = ServiceThread(config).start()
        url = service.url
        _say("service", {"url": url, "version": _http(url + "/api/version").get("version")})
        names = [m["name"] for m in _http(url + "/api/tags").get("models", [])]
        _say("models", names)
        devices = _http(url + "/api/devices")
        _say("devices", {"devices": [d.get("id") for d in devices.get("devices", [])],
                         "cpu_cores": devices.get("cpu_cores")})
        if not args.no_gui:
            _say("qt", _qt_check(url, home))
        model_path = builtin_model_path()
        if model_path is None:
            _say("generate", {"skipped": "no default model in this bundle (build with --with-default-model)"})
        else:
            if DEFAULT_MODEL_NAME not in names:
                raise RuntimeError(f"{model_path} is bundled but /api/tags does not list {DEFAULT_MODEL_NAME}")
            _say("generate", _generate(url, DEFAULT_MODEL_NAME, args.prompt, args.num_predict))
    except Exception as e:  # noqa: BLE001 - the self-test reports whatever broke, with its type
        detail = e.read().decode(errors="replace")[:500] if hasattr(e, "read") else ""
        print(f"selftest: FAILED: {type(e).__name__}: {e} {detail}".rstrip(), flush=True)
        return 1
    finally:
        if service is not None:
            service.stop()
        shutil.rmtree(home, ignore_errors=True)
    print("selftest: ok", flush=True)
    return 0
