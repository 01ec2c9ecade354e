"""Which models are loaded, where, and who may use them: the scheduler, one loaded model's state, keep_alive
(docs/architecture.md, "The service's rooms"). A package marker (no code): covered by its modules' tests
(tests/unit/service/, tests/integration/service/)."""
