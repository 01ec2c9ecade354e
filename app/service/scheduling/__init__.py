"""Which models are loaded, where, and who may use them: the scheduler (leases, queues, eviction), its pure fit
rules, the loader (what a load asks of the injected collaborators), one loaded model's state, the draft option's
check (docs/architecture.md, "The service's rooms"). A package marker (no code): covered by its modules' tests
(tests/unit/service/, tests/integration/service/)."""
