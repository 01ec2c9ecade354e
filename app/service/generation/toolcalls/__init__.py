"""Reading a model's reply: tool calls and thinking, per model family, streamed.

`make_parser(family, tool_names)` gives a parser with `feed(text) -> Delta` and `finish() -> Delta`: the one its
family's record names (`ChatFormat.reply_parser`, app/engine/chat/formats.py). The family name comes from
`app.engine.gguf.chat_facts` (detected from the chat template)."""
from __future__ import annotations

from typing import Callable, Iterable, Union

from app.engine.chat.formats import ChatFormat, format_for

from .harmony import HarmonyParser
from .stream import OutputParser
from .types import Delta, ToolCall

ReplyParser = Union[OutputParser, HarmonyParser]

# ChatFormat.reply_parser -> the parser for one reply: (the family's record, the supplied tools' names)
REPLY_PARSERS: dict[str, Callable[[ChatFormat, Iterable[str]], ReplyParser]] = {
    "sections": lambda fmt, names: OutputParser(fmt.name, names),
    "harmony": lambda fmt, names: HarmonyParser(names),
}


def make_parser(family: str | None, tool_names=()) -> ReplyParser:
    fmt = format_for(family)
    return REPLY_PARSERS[fmt.reply_parser](fmt, tool_names)


def parse_all(family: str | None, text: str, tool_names=()) -> Delta:
    """The whole reply at once (what a non-streaming request returns)."""
    p = make_parser(family, tool_names)
    return p.feed(text).extend(p.finish())


__all__ = ["Delta", "ToolCall", "make_parser", "parse_all", "OutputParser", "HarmonyParser"]
