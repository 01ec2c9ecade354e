"""Run the service on its own asyncio loop in a background thread (used by `strata serve`, the GUI and tests).

    svc = ServiceThread(config); svc.start()     # returns once listening (or raises ServiceError)
    svc.url                                      # "http://127.0.0.1:11434"
    svc.stop()                                   # unloads models, closes the socket, joins the thread
"""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import threading
from dataclasses import replace

from aiohttp import web

from .app import create_app
from .config import ServiceConfig

log = logging.getLogger("strata.service")


class ServiceError(RuntimeError):
    """The service could not start (port taken, bad address); the message says what to do."""


class ServiceThread:
    def __init__(self, config: ServiceConfig | None = None, *, store_factory=None):
        self.config = config or ServiceConfig.from_env()
        self._store_factory = store_factory
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self.app: web.Application | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return replace(self.config, port=self.port or self.config.port).base_url

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def start(self, timeout: float = 60.0) -> "ServiceThread":
        self._thread = threading.Thread(target=self._run, name="strata-service", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise ServiceError(f"the service did not start within {timeout:.0f} s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            if not self._ready.is_set():
                self._error = e if isinstance(e, ServiceError) else ServiceError(f"service failed to start: {e}")
                self._ready.set()
            else:
                log.exception("service loop ended with an error")
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self.app = create_app(self.config, store_factory=self._store_factory)
        # handler_cancellation: a client that disconnects cancels its handler, which cancels its generation
        runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._runner = runner
        host, port = self.config.host, self.config.port
        try:
            sock = _bind(host, port)
        except OSError as e:
            await runner.cleanup()
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                what = "already in use" if e.errno == errno.EADDRINUSE else "not allowed"
                raise ServiceError(f"cannot listen on {host}:{port}: the port is {what} (is another Strata or "
                                   f"Ollama running?). Stop it, or set STRATA_HOST=127.0.0.1:<another port>") from None
            raise ServiceError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        site = web.SockSite(runner, sock)
        await site.start()
        self.port = sock.getsockname()[1]
        log.info("Strata service listening on %s", self.url)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    def call(self, coro, timeout: float | None = None):
        """Run a coroutine on the service loop from another thread (tests, GUI) and wait for its result."""
        if self._loop is None:
            raise RuntimeError("the service is not started")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    domain, type_, proto, _, addr = infos[0]
    sock = socket.socket(domain, type_, proto)
    try:
        if domain == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        # SO_REUSEADDR on POSIX only skips TIME_WAIT leftovers: a port another process listens on still fails.
        # (On Windows it would allow stealing a live port, so it is not set there.)
        if os.name != "nt":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(512)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
