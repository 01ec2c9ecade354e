"""The memory room: the memory window (where loaded models sit, predicted vs actual) and the what-if planner, their
painted widgets and their plain data. Covered by tests/gui/test_gui_memory.py and tests/gui/test_gui_whatif.py."""
