"""Everything the runner CHILD process runs. Never imported by the service process (docs/architecture.md)."""
