"""The service thread (service/server.py): a port already taken is a clear error."""
from __future__ import annotations

import socket

import pytest

from app.service.config import ServiceConfig


def test_port_already_taken_is_a_clear_error():
    from app.service.server import ServiceError, ServiceThread

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    try:
        with pytest.raises(ServiceError, match="already in use"):
            ServiceThread(ServiceConfig(port=port)).start()
    finally:
        blocker.close()
