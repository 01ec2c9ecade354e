"""The desktop app: PySide6 windows over the service's API (docs/architecture.md, "Layers and folders").
Covered by tests/gui/ (the windows under Qt) and tests/unit/gui/ (their plain data, no Qt)."""
