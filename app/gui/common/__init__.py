"""What every room of the desktop app shares (docs/architecture.md, "The desktop app's rooms"): the Qt <-> asyncio
bridge, the service state the windows read, the theme, the application's actions and the item models' base. It
imports no room. Covered by tests/gui/test_gui_e2e.py (the bridge and the state, live) and
tests/gui/test_gui_actions.py (the shared actions)."""
