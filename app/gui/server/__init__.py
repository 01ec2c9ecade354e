"""The server room: the Server window (every API request live, its timeline and the service's plots) and the data
behind it. Covered by tests/gui/test_gui_server.py."""
