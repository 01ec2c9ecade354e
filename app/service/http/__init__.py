"""HTTP plumbing every route shares: errors, security middlewares, request/stream bodies, OpenAPI, metrics, events. It
imports no other room (docs/architecture.md, "The service's rooms"). A package marker (no code): covered by its
modules' tests (tests/unit/service/, tests/integration/service/)."""
