"""`strata gui` under a real X server (Xvfb, Qt's xcb platform, not offscreen): keys sent to its window with
xdotool (XTEST, as from a keyboard) open the memory view, the model manager and the settings, found by their
window titles; Ctrl+Q ends the process (exit 0) and its service stops listening.

Needs Xvfb and xdotool (`.ci/run` installs them with the xcb libraries Qt loads); skipped where they are
missing, since no X server can be started there."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.skipif(not (shutil.which("Xvfb") and shutil.which("xdotool")),
                                reason="needs Xvfb and xdotool (apt-get install xvfb xdotool; .ci/run does)")

DEADLINE = 180.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def display(tmp_path):
    """A fresh Xvfb; yields its DISPLAY (":N", chosen by the server itself through -displayfd)."""
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=open(tmp_path / "xvfb.log", "w"))
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    assert number.isdigit(), (tmp_path / "xvfb.log").read_text()
    yield f":{number}"
    proc.terminate()
    proc.wait(30)


def xdotool(env, *args) -> str:
    out = subprocess.run(["xdotool", *args], env=env, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def window(env, title_regex: str, timeout: float = DEADLINE) -> str:
    """The id of the visible window whose title matches, once there is one."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = xdotool(env, "search", "--onlyvisible", "--name", title_regex)
        if found:
            return found.splitlines()[0]
        time.sleep(0.2)
    raise AssertionError(f"no window titled /{title_regex}/ appeared; windows: "
                         f"{xdotool(env, 'search', '--name', 'Strata')!r}")


def keys_to(env, wid: str, keys: str) -> None:
    """Give `wid` the keyboard focus, then type `keys` as a keyboard would (XTEST)."""
    xdotool(env, "windowfocus", "--sync", wid)
    xdotool(env, "key", "--clearmodifiers", keys)


def press_until(env, wid: str, keys: str, done, timeout: float = DEADLINE) -> None:
    """Send `keys` to `wid` until `done()` holds. Qt activates a window on the FocusIn it gets, which a busy
    machine may deliver after the keys: a press that landed too early is simply sent again (each of these
    shortcuts is idempotent: it shows a window or quits)."""
    end = time.monotonic() + timeout
    while True:
        keys_to(env, wid, keys)
        settle = time.monotonic() + 5
        while time.monotonic() < settle:
            if done():
                return
            time.sleep(0.1)
        assert time.monotonic() < end, f"{keys} to window {wid} had no effect in {timeout:.0f} s"


def visible(env, title_regex: str) -> bool:
    return bool(xdotool(env, "search", "--onlyvisible", "--name", title_regex))


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/api/version", timeout=2).close()
        return True
    except OSError:
        return False


def test_strata_gui_under_x_opens_windows_by_keyboard_and_quits_with_ctrl_q(display, tmp_path, smollm2_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", STRATA_HOST=f"127.0.0.1:{port}", STRATA_NUM_THREADS="1",
               STRATA_HOME=str(tmp_path / "home"), STRATA_USER_HOME=str(tmp_path / "user-home"), LANG="C.UTF-8")
    log = open(tmp_path / "gui.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "app", "gui"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        chat = window(env, "^Strata.*Chat$")
        end = time.monotonic() + DEADLINE
        while not answers(url):
            assert proc.poll() is None and time.monotonic() < end, open(tmp_path / "gui.log").read()
            time.sleep(0.2)
        for keys, title in (("ctrl+m", "^Strata.*Memory$"), ("ctrl+shift+m", "^Strata.*Models$"),
                            ("ctrl+comma", "^Strata.*Settings$")):
            press_until(env, chat, keys, lambda t=title: visible(env, t))
        press_until(env, chat, "ctrl+q", lambda: proc.poll() is not None)
        assert proc.wait(DEADLINE) == 0, open(tmp_path / "gui.log").read()
        assert not answers(url)                       # the service it hosted is gone with it
        assert "TypeError" not in open(tmp_path / "gui.log").read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
