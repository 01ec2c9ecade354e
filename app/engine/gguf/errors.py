"""The one error type of GGUF reading, shared by the parser and ModelInfo (so neither imports the other for it)."""


class GGUFError(ValueError):
    """The file is not a GGUF llama.cpp can load; the message says why."""
