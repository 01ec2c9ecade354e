"""Reading a model's reply: tool calls and thinking, per model family, streamed.

`make_parser(family, tool_names)` gives a parser with `feed(text) -> Delta` and `finish() -> Delta`: the one its
family's record names (`ChatFormat.reply_parser`, app/engine/chat/formats.py). The family name comes from
`app.engine.gguf.chat_facts` (detected from the chat template)."""
from __future__ import annotations

from typing import Callable, Iterable, Union

from app.engine.chat.formats import ChatFormat, format_for

from .harmony import HarmonyParser
from .stream import OutputParser
from .types import Args, Delta, Done, Open, ToolCall

ReplyParser = Union[OutputParser, HarmonyParser]

# ChatFormat.reply_parser -> the parser for one reply: (the family's record, the supplied tools' names, whether
# calls are given in pieces as they are written)
REPLY_PARSERS: dict[str, Callable[[ChatFormat, Iterable[str], bool], ReplyParser]] = {
    "sections": lambda fmt, names, pieces: OutputParser(fmt.name, names, pieces),
    "harmony": lambda fmt, names, pieces: HarmonyParser(names, pieces),
}


def make_parser(family: str | None, tool_names=(), stream_calls: bool = False) -> ReplyParser:
    """`stream_calls`: a call is given as Open / Args... / Done parts as the model writes it (where its syntax
    allows; reader.py), not once complete."""
    fmt = format_for(family)
    return REPLY_PARSERS[fmt.reply_parser](fmt, tool_names, stream_calls)


def parse_all(family: str | None, text: str, tool_names=()) -> Delta:
    """The whole reply at once (what a non-streaming request returns)."""
    p = make_parser(family, tool_names)
    return p.feed(text).extend(p.finish())


__all__ = ["Args", "Delta", "Done", "Open", "ToolCall", "make_parser", "parse_all", "OutputParser", "HarmonyParser"]
