"""Reading a model's reply: tool calls and thinking, per model family, streamed.

`make_parser(family, tool_names)` gives a parser with `feed(text) -> Delta` and `finish() -> Delta`; the family
name comes from `app.engine.gguf.chat_facts` (detected from the chat template)."""
from __future__ import annotations

from .harmony import HarmonyParser
from .stream import OutputParser
from .types import Delta, ToolCall


def make_parser(family: str | None, tool_names=()):
    if family == "harmony":
        return HarmonyParser(tool_names)
    return OutputParser(family, tool_names)


def parse_all(family: str | None, text: str, tool_names=()) -> Delta:
    """The whole reply at once (what a non-streaming request returns)."""
    p = make_parser(family, tool_names)
    return p.feed(text).extend(p.finish())


__all__ = ["Delta", "ToolCall", "make_parser", "parse_all", "OutputParser", "HarmonyParser"]
