"""Clients of the module's `service` (a live server the test module starts, tests/support/service_util.py) that
the registry tests share: the official `ollama` client and a plain httpx client, one per test. A module whose
server fixture has another name, or wants other timeouts or scopes, defines its own `oc` / `http` (they win)."""
from __future__ import annotations

import httpx
import ollama
import pytest


@pytest.fixture
def oc(service):
    return ollama.Client(host=service.url, timeout=120)


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service.url, timeout=120) as c:
        yield c
