"""The model manager's pull panel against Ollama's exact progress stream for POST /api/pull, served by a small
aiohttp stand-in on loopback (the panel against Strata's own /api/pull and a registry on loopback:
test_gui_manager.py) ("pulling manifest", per layer {status: "pulling <12 hex>", digest, total,
completed}, "verifying sha256 digest", "writing manifest", "success"; or an {"error"} line). The panel is driven
by typing a name and clicking its buttons: a bar per file, the status line, Cancel closing the stream."""
from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from gui_util import SHORT, WAIT, click

LAYERS = {"tiny:1b": [("sha256:" + "ab" * 32, 4 << 20), ("sha256:" + "cd" * 32, 300)],
          "stalls:1b": [("sha256:" + "ef" * 32, 64 << 20)]}


class StandIn:
    """POST /api/pull streaming Ollama's NDJSON; `disconnected` is set when a client leaves mid-stream."""

    def __init__(self):
        from app.gui.common.bridge import LoopThread

        self.loop_thread = LoopThread("pull-stand-in")
        self.disconnected = threading.Event()
        self.sent: list[dict] = []
        self.runner = self.loop_thread.submit(self._start()).result(30)

    async def _start(self):
        app = web.Application()
        app.router.add_post("/api/pull", self.pull)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return runner

    async def pull(self, request):
        body = await request.json()
        name = body.get("model")
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)

        async def send(obj):
            self.sent.append(obj)
            await resp.write((json.dumps(obj) + "\n").encode())

        try:
            await send({"status": "pulling manifest"})
            if name not in LAYERS:
                await send({"error": f"pull model manifest: file does not exist ({name})"})
                return resp
            stalls = name.startswith("stalls")
            for digest, size in LAYERS[name]:
                steps = 8
                for i in range(1, steps + 1):
                    await send({"status": f"pulling {digest[7:19]}", "digest": digest, "total": size,
                                "completed": size * i // steps})
                    if stalls and i == steps // 2:
                        await asyncio.sleep(3600)       # half way, until the client goes (a cancel comes in time)
                    await asyncio.sleep(0.005)
            for s in ("verifying sha256 digest", "writing manifest", "success"):
                await send({"status": s})
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnected.set()
            raise
        return resp

    def close(self):
        self.loop_thread.submit(self.runner.cleanup()).result(30)
        self.loop_thread.stop()


@pytest.fixture
def panel(qtbot):
    from app.gui.common.bridge import ServiceBridge
    from app.gui.models.transfers import PullPanel

    standin = StandIn()
    bridge = ServiceBridge(standin.url)
    p = PullPanel(bridge)
    qtbot.addWidget(p)
    p.show()
    p.standin = standin
    yield p
    bridge.close()
    standin.close()


def pull(qtbot, panel, name: str) -> None:
    panel.name.setFocus()
    QTest.keyClicks(panel.name, name)
    click(qtbot, panel.pull_button)


def test_a_bar_per_file_then_success(qtbot, panel):
    pulled = []
    panel.pulled.connect(pulled.append)
    pull(qtbot, panel, "tiny:1b")
    assert panel.busy and panel.cancel_button.isEnabled() and not panel.pull_button.isEnabled()
    qtbot.waitUntil(lambda: not panel.busy, timeout=WAIT)
    assert pulled == ["tiny:1b"] and panel.status.text() == "Pulled tiny:1b."
    assert list(panel.bars) == [d for d, _ in LAYERS["tiny:1b"]]          # one bar per file, in stream order
    for digest, size in LAYERS["tiny:1b"]:
        bar = panel.bars[digest]
        assert bar.value() == bar.maximum()
        assert bar.text().startswith(digest[7:19]) and "100%" in bar.text()
        assert panel.progress.files[digest].total == size
    assert panel.progress.fraction == 1.0
    assert [s["status"] for s in panel.standin.sent[-3:]] == ["verifying sha256 digest", "writing manifest",
                                                               "success"]


def test_cancel_closes_the_stream(qtbot, panel):
    pull(qtbot, panel, "stalls:1b")
    digest = LAYERS["stalls:1b"][0][0]
    qtbot.waitUntil(lambda: digest in panel.bars and panel.bars[digest].value() > 0, timeout=WAIT)
    click(qtbot, panel.cancel_button)
    qtbot.waitUntil(lambda: not panel.busy, timeout=WAIT)        # the cancel goes through the loop thread
    assert panel.status.text() == "Pull of stalls:1b cancelled."
    assert panel.standin.disconnected.wait(120)                # the server saw the client go
    assert panel.bars[digest].value() < panel.bars[digest].maximum()
    assert panel.pull_button.isEnabled() and not panel.cancel_button.isEnabled()


def test_an_error_line_is_shown(qtbot, panel):
    pull(qtbot, panel, "missing:7b")
    qtbot.waitUntil(lambda: not panel.busy, timeout=WAIT)
    assert panel.status.text() == ("Could not pull missing:7b: pull model manifest: file does not exist "
                                   "(missing:7b)")
    # Enter in the name field pulls too
    panel.name.clear()
    QTest.keyClicks(panel.name, "tiny:1b")
    QTest.keyClick(panel.name, Qt.Key_Return)
    qtbot.waitUntil(lambda: panel.status.text() == "Pulled tiny:1b.", timeout=WAIT)
