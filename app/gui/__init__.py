"""The desktop app: PySide6 windows over the service's API (docs/architecture.md, "Layers and folders"), in rooms
by window: chat/, memory/, server/ and models/, over common/ (docs/architecture.md, "The desktop app's rooms").
Covered by tests/gui/ (the windows under Qt) and tests/unit/gui/ (their plain data, no Qt)."""
