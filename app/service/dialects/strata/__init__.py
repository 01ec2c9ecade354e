"""Strata's own routes: devices, the what-if layout, imports, events, metrics, OpenAPI. A package marker (no code):
covered by its modules' tests (tests/unit/service/, tests/integration/service/)."""
