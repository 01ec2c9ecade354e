"""Ollama's API: the generation routes (routes, parse, render) and all of its other routes (manage_routes,
transfer_routes, schema). A package marker (no code): covered by its modules' tests (tests/unit/service/,
tests/integration/service/)."""
