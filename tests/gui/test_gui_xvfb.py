"""`strata gui` under a real X server (Xvfb, Qt's xcb platform, not offscreen): keys sent with xdotool (XTEST,
as from a keyboard) to whichever window was opened last open the next one (the memory view from the chat, the
server window from the memory view, the model manager from there, the settings...), Ctrl+W and Esc close them,
Ctrl+0 brings the chat back, and Ctrl+Q from the last window opened ends the process (exit 0) and its service
stops listening.

A key reaches Qt only once it has handled the window's FocusIn, which nothing outside the process can see: each
step sends its keys and waits for what they do, and sends them again (only while the window they are meant for
still has the focus) if nothing happened in a while.

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


def visible(env, title_regex: str) -> str:
    """The id of the visible window whose title matches; "" when there is none."""
    found = xdotool(env, "search", "--onlyvisible", "--name", title_regex)
    return found.splitlines()[0] if found else ""


def wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = condition()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def window(env, title_regex: str, timeout: float = DEADLINE) -> str:
    """The id of the visible window whose title matches, once there is one."""
    try:
        return wait_for(lambda: visible(env, title_regex), timeout, title_regex)
    except AssertionError:
        raise AssertionError(f"no window titled /{title_regex}/ appeared; windows: "
                             f"{xdotool(env, 'search', '--name', 'Strata')!r}") from None


def focused(env) -> str:
    return xdotool(env, "getwindowfocus")


def keys_until(env, wid: str, keys: str, done, what: str, timeout: float = 120.0) -> None:
    """Focus `wid` and type `keys` (XTEST) until `done()` holds: again after 2 s, 4 s, 8 s... without effect, and
    only while `wid` is still shown and focused (so a late first press is never doubled onto another window)."""
    end = time.monotonic() + timeout
    wait = 2.0
    while True:
        if wid in xdotool(env, "search", "--onlyvisible", "--name", "Strata").splitlines():
            xdotool(env, "windowfocus", "--sync", wid)
            if focused(env) == wid:
                xdotool(env, "key", "--clearmodifiers", keys)
        try:
            wait_for(done, min(wait, max(0.1, end - time.monotonic())), what)
            return
        except AssertionError:
            if time.monotonic() >= end:
                raise AssertionError(f"{keys} on window {wid}: no {what} within {timeout:.0f} s") from None
        wait *= 2


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/api/version", timeout=2).close()
        return True
    except OSError:
        return False


def test_strata_gui_under_x_every_window_by_keyboard_and_quit_from_the_last(display, tmp_path, smollm2_path):
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
        def opened(title):
            return lambda: visible(env, title)

        def gone(title):
            return lambda: not visible(env, title)

        keys_until(env, chat, "ctrl+m", opened("^Strata.*Memory$"), "memory view")
        memory = window(env, "^Strata.*Memory$")
        keys_until(env, memory, "ctrl+shift+s", opened("^Strata.*Server$"), "server window")   # from the memory view
        server = window(env, "^Strata.*Server$")
        keys_until(env, server, "ctrl+shift+m", opened("^Strata.*Models$"), "model manager")   # from the server window
        models = window(env, "^Strata.*Models$")
        keys_until(env, models, "ctrl+w", gone("^Strata.*Models$"), "model manager closing")
        keys_until(env, server, "ctrl+w", gone("^Strata.*Server$"), "server window closing")
        keys_until(env, memory, "ctrl+comma", opened("^Strata.*Settings$"), "settings")
        settings = window(env, "^Strata.*Settings$")
        keys_until(env, settings, "Escape", gone("^Strata.*Settings$"), "settings closing")
        keys_until(env, memory, "ctrl+0", lambda: focused(env) == chat, "chat window focused")   # back to the chat
        keys_until(env, chat, "ctrl+comma", opened("^Strata.*Settings$"), "settings again")
        settings = window(env, "^Strata.*Settings$")
        assert visible(env, "^Strata.*Memory$") and visible(env, "^Strata.*Chat$")
        keys_until(env, settings, "ctrl+q", lambda: proc.poll() is not None, "exit")    # quit from the last one
        assert proc.wait(DEADLINE) == 0, open(tmp_path / "gui.log").read()
        assert not answers(url)                       # the service it hosted is gone with it
        assert "TypeError" not in open(tmp_path / "gui.log").read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_open_in_terminal_under_x(display):
    """Models -> Launch a coding agent -> Open in terminal, on Qt's xcb platform against this Xvfb: the offscreen
    test (a stand-in terminal that records its argv and runs the command, a stand-in agent that records what
    `strata launch` gave it) run again with QT_QPA_PLATFORM=xcb and this DISPLAY, where the button is clicked with
    the pointer through the X server (xdotool); it checks Qt's platform itself."""
    env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
    test = "tests/gui/test_gui_agent_launch.py::test_open_in_terminal_starts_the_agent_in_the_chosen_folder"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_server_window_explainer_and_history_under_x(display):
    """The Server window's cache-miss explainer, Copy as curl and Replay, and the earlier requests listed after a
    restart (tests/gui/test_gui_server.py), run again on Qt's xcb platform against this Xvfb; the first checks
    Qt's platform itself."""
    env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
    tests = ["tests/gui/test_gui_server.py::"
             "test_a_cache_miss_is_explained_on_the_request_which_copies_as_curl_and_replays",
             "tests/gui/test_gui_server.py::test_after_a_restart_the_window_lists_the_earlier_requests"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
