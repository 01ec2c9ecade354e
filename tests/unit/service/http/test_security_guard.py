"""The Host and Origin rules (http/security.Guard): DNS rebinding blocked, origins allowed by list and pattern."""
from __future__ import annotations

from app.service.config import ServiceConfig
from app.service.http.security import Guard


def test_host_header_rules_block_dns_rebinding():
    g = Guard(ServiceConfig(origins=("https://app.example.com",)))
    for ok in ("localhost:11434", "127.0.0.1:11434", "[::1]:11434", "10.0.0.5", "foo.localhost", "app.example.com",
               None):
        assert g.host_allowed(ok), ok
    for bad in ("evil.example", "attacker.com:11434", "127.0.0.1.nip.io"):
        assert not g.host_allowed(bad), bad


def test_origin_rules():
    g = Guard(ServiceConfig(origins=("https://app.example.com", "http://tool.local:*")))
    for ok in ("http://localhost:3000", "https://127.0.0.1", "http://[::1]:8080", "app://strata",
               "https://app.example.com", "http://tool.local:5173"):
        assert g.origin_allowed(ok), ok
    for bad in ("https://evil.example", "http://localhost.evil.example", "https://app.example.com.evil.io",
                "http://tool.local.evil:80"):
        assert not g.origin_allowed(bad), bad
    assert Guard(ServiceConfig(origins=("*",))).origin_allowed("https://anything.example")
