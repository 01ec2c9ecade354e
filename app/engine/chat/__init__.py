"""Chat formats: what each reply family writes (markers, call sections, thinking, the tool-call grammar's shape),
in one place for the runner (grammar, shown tokens) and the service (parsers). Free of llama.cpp.
Covered by tests/unit/engine/chat/test_chat_plan.py."""
