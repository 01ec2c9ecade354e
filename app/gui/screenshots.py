"""Render the desktop app's windows to PNGs (for the README): `python -m app.gui.screenshots OUTDIR [--url URL]`.

`make screenshots` runs this under Xvfb. Without --url it hosts the real service on a free port with a scratch
STRATA_HOME, chats with the built-in model, loads it, and plans a what-if on a simulated GPU, so the pictures
show real output.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

GiB = 1 << 30

# A simulated machine for the what-if pictures (same schema as STRATA_DEVICES files).
SIM_GPU = {"devices": [{"id": "CUDA0", "name": "Simulated RTX 4060 (8 GB)", "kind": "gpu", "backend": "SIM",
                        "total": 8 * GiB, "free": 7 * GiB}],
           "host_ram_total": 32 * GiB, "host_ram_available": 24 * GiB, "cpu_cores": 8, "cpu_name": "Simulated CPU",
           "simulated": True}
SIM_TINY = {"devices": [{"id": "CUDA0", "name": "Simulated 1 GB GPU", "kind": "gpu", "backend": "SIM",
                         "total": GiB, "free": 256 << 20}],
            "host_ram_total": 1 * GiB, "host_ram_available": 200 << 20, "cpu_cores": 2, "cpu_name": "Simulated CPU",
            "simulated": True}

PROMPT = "Write a Python function that checks whether a number is prime, then explain it in two sentences."


def wait(app, cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"screenshots: gave up waiting for {what}")
        app.processEvents()
        time.sleep(0.01)
    for _ in range(5):
        app.processEvents()


def settle(app, seconds: float = 0.3) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def save(widget, path: Path) -> None:
    pm = widget.grab()
    if not pm.save(str(path)):
        raise RuntimeError(f"could not write {path}")
    print(f"wrote {path} ({pm.width()}x{pm.height()})")


def save_screen(app, window, path: Path) -> None:
    g = window.frameGeometry()
    pm = app.primaryScreen().grabWindow(0, g.x(), g.y(), g.width(), g.height())
    if pm.isNull() or not pm.save(str(path)):
        save(window, path)          # no real screen (offscreen platform): the window alone
        return
    print(f"wrote {path} ({pm.width()}x{pm.height()}, screen)")


def hover_unsure_token(reply) -> None:
    """Move the mouse over the least certain token (of the first 40) so its alternatives tooltip shows."""
    from PySide6.QtGui import QTextCursor
    from PySide6.QtTest import QTest

    body = reply.body
    lps = reply.logprobs[:40]
    if not lps or not body.token_offsets:
        return
    i = min(range(len(lps)), key=lambda k: lps[k].get("logprob", 0.0) if lps[k].get("token", "").strip() else 0)
    cur = QTextCursor(body.document())
    cur.setPosition(body.token_offsets[i] + 1)
    r = body.cursorRect(cur)
    QTest.mouseMove(body.viewport(), r.center())


def save_whatif(app, mem, devices: dict, num_ctx: int, what: str, path: Path) -> None:
    """Plan `num_ctx` on the simulated `devices` in the what-if tab and save the memory window once the plan
    (or its refusal warning) shows."""
    w = mem.whatif
    w.num_ctx.setValue(num_ctx)
    w.devices_json.setPlainText(json.dumps(devices, indent=1))
    w.last_result = None
    w.plan()
    wait(app, lambda: w.last_result is not None or w.warning.isVisible(), 120, what)
    settle(app)
    save(mem, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m app.gui.screenshots")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--url", help="use a running service instead of hosting one")
    args = ap.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("STRATA_HOME"):
        os.environ["STRATA_HOME"] = tempfile.mkdtemp(prefix="strata-shots-")
    os.environ.setdefault("STRATA_NUM_THREADS", "2")

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    service = None
    url = args.url
    if not url:
        from app.service.config import ServiceConfig
        from app.service.server import ServiceThread

        service = ServiceThread(ServiceConfig.from_env(host="127.0.0.1", port=0))
        service.start()
        url = service.url

    from app.gui.desktop import Desktop

    desk = Desktop(url, service=service, use_tray=False, poll_ms=1000)
    try:
        chat = desk.open_chat()
        chat.resize(1180, 760)
        wait(app, lambda: desk.state.tags, 60, "the model list")
        chat.send(PROMPT)
        wait(app, lambda: not chat.busy, 300, "the reply")
        settle(app)
        save(chat, args.outdir / "chat.png")
        reply = chat.transcript.messages[-1]
        if reply.logprobs:
            reply.tokens_button.setChecked(True)
            settle(app)
            hover_unsure_token(reply)
            settle(app, 0.8)
            save_screen(app, chat, args.outdir / "chat-tokens.png")   # the screen: the tooltip is its own window
            reply.tokens_button.setChecked(False)

        mem = desk.open_memory()
        mem.resize(1100, 760)
        desk.state.refresh()
        desk.state.refresh_devices()
        wait(app, lambda: any((m.get("strata") or {}).get("layout") for m in desk.state.ps), 60, "a loaded layout")
        wait(app, lambda: desk.state.inventory is not None, 30, "the device inventory")
        mem.live.render()
        mem.live.view.zoom.setChecked(True)     # a small model in a big RAM: show its own bytes
        settle(app)
        save(mem, args.outdir / "memory-live.png")

        mem.tabs.setCurrentWidget(mem.whatif)
        mem.whatif.num_parallel.setValue(4)
        save_whatif(app, mem, SIM_GPU, 8192, "a what-if plan", args.outdir / "memory-whatif.png")
        save_whatif(app, mem, SIM_TINY, 131072, "a refused plan", args.outdir / "memory-whatif-refused.png")

        # the Models menu (the tray's menu; in the window when the desktop has no tray)
        menu = desk.tray.menu
        desk.tray.populate()
        menu.popup(chat.mapToGlobal(chat.rect().topLeft()) + chat.rect().center() / 4)
        settle(app, 0.5)
        save(menu, args.outdir / "tray-menu.png")
        menu.hide()
    finally:
        desk.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
