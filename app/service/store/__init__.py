"""Models on disk: the SQLite store and its blobs, its event-loop face (proxy.AsyncStore), names, Modelfiles, other
apps' models and the registry clients (docs/architecture.md, "The service's rooms"). A package marker (no code):
covered by its modules' tests (tests/unit/service/, tests/integration/service/)."""
