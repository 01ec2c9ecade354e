"""One generation, whichever dialect asked: the one request and result types, the pipeline, options, tools and
tool-call parsing. It knows no wire format and no store (docs/architecture.md, "The service's rooms"). A package
marker (no code): covered by its modules' tests (tests/unit/service/, tests/integration/service/)."""
