"""GGUF facts: the bounds-checked header parser and ModelInfo, with their error type.
Covered by tests/unit/engine/gguf/."""
