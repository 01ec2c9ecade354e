"""The chat room: the chat window, its reply flow, its widgets and dialogs, the chat history in SQLite, file
attachments and MCP tools. Covered by tests/gui/ (test_gui_e2e.py, test_gui_chat_*.py, test_gui_mcp.py...) and
tests/unit/gui/ (the history, exports and replies as plain data)."""
