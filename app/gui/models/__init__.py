"""The models room: the model manager (import, pull, copy, delete, load, pin), its transfers, and the coding-agent
launcher with the terminal it starts. Covered by tests/gui/test_gui_manager.py, tests/gui/test_gui_pull.py,
tests/gui/test_gui_agent_launch.py and tests/unit/gui/ (model rows, progress, terminal command lines)."""
