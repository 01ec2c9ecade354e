"""`strata gui`: the desktop app, hosting the service in the same process.

With no display (Linux without DISPLAY/WAYLAND_DISPLAY and no QT_QPA_PLATFORM) it starts the service headless
and says where it listens, like `strata serve`. If the address is already served by a running Strata (or any
Ollama-compatible server), the window attaches to it instead of failing.
Covered by tests/gui/test_gui_cli.py and tests/gui/test_gui_xvfb.py (`strata gui`).
"""
from __future__ import annotations

import signal
import sys
import threading

from app.api_client import ApiClient
from app.service.config import ConfigError, ServiceConfig
from app.service.server import ServiceError, ServiceThread

from .loop_thread import LoopThread


def register(sub) -> None:
    p = sub.add_parser("gui", help="open the desktop app (chat, memory view, tray); headless service without a display")
    p.add_argument("--url", help="attach to a running service at this URL instead of starting one")
    p.add_argument("--no-tray", action="store_true", help="do not use the system tray (menus go in the window)")
    p.set_defaults(func=run)


def _answers(url: str, api_key: str | None) -> bool:
    loop, client = LoopThread(), ApiClient(url, api_key)
    try:
        return loop.run(client.alive())
    finally:
        loop.run(client.close())
        loop.close()


def start_service(config):
    """Start the hosted service; returns (service or None, url). None when another server already answers."""
    service = ServiceThread(config)
    try:
        service.start()
    except (ServiceError, OSError) as e:
        if _answers(config.base_url, config.api_key):
            print(f"strata: {config.base_url} is already served; attaching to it", file=sys.stderr)
            return None, config.base_url
        raise SystemExit(f"strata: {e}") from None
    return service, service.url


def run(args) -> int:
    # Qt and the GUI are imported here, not at the top: every `strata` command imports this module to build
    # the parser, and the others must neither pay for Qt nor fail where it cannot load.
    from app.gui.desktop import has_display

    try:
        config = ServiceConfig.from_env()
    except ConfigError as e:
        print(f"strata: {e}", file=sys.stderr)
        return 2
    if not has_display():
        return run_headless(config)

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Strata")
    app.setQuitOnLastWindowClosed(False)   # the tray keeps running; Quit (menu or tray) ends it
    service, url = (None, args.url.rstrip("/")) if args.url else start_service(config)

    from app.gui.desktop import Desktop

    desk = Desktop(url, config.api_key, service=service, use_tray=False if args.no_tray else None)
    if desk.tray.tray is None:
        app.setQuitOnLastWindowClosed(True)  # no tray to come back from: closing the window quits
    app.aboutToQuit.connect(desk.shutdown)
    _quit_on_signals(desk)
    desk.open_chat()
    return app.exec()


def _quit_on_signals(desk) -> None:
    """Ctrl+C / SIGTERM quit cleanly (service stopped, runners ended). Python runs signal handlers only when it
    gets control, so a cheap timer hands it control a few times a second while Qt's loop waits."""
    from PySide6.QtCore import QTimer   # late: Qt only for the gui command (see run())

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: desk.quit())
    timer = QTimer(desk)
    timer.timeout.connect(lambda: None)
    timer.start(250)


def run_headless(config) -> int:
    service, url = start_service(config)
    if service is None:
        print(f"strata: no display; a service already listens at {url}")
        return 0
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())   # before saying where: a caller may stop it at once
    print(f"strata: no display found (DISPLAY/WAYLAND_DISPLAY unset); service listening at {url}", flush=True)
    print("strata: press Ctrl+C to stop", flush=True)
    try:
        while not done.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0
