"""`strata gui` without a display: it starts the service headless and says where it listens."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request


def test_gui_without_a_display_serves_headless(strata_home):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["STRATA_HOST"] = "127.0.0.1:0"           # any free port; the message names the real one
    proc = subprocess.Popen([sys.executable, "-m", "app", "gui"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:               # ends if the process dies, so no hang on failure
            lines.append(line)
            if "listening at" in line:
                break
        text = "".join(lines)
        m = re.search(r"listening at (http://127\.0\.0\.1:(\d+))", text)
        assert m, text
        assert "no display" in text
        with urllib.request.urlopen(m.group(1) + "/api/version", timeout=30) as r:
            assert "version" in json.loads(r.read())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_gui_is_a_registered_command():
    from app.cli import build_parser

    args = build_parser().parse_args(["gui", "--url", "http://127.0.0.1:9", "--no-tray"])
    assert args.url == "http://127.0.0.1:9" and args.no_tray


def test_gui_without_a_display_says_when_a_service_already_listens(live_service, strata_home):
    with live_service.running() as svc:
        env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
        env["STRATA_HOST"] = f"127.0.0.1:{svc.port}"
        out = subprocess.run([sys.executable, "-m", "app", "gui"], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"already listens at {svc.url}" in out.stdout
