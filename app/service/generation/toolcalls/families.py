"""The parsers' view of each family (app/engine/chat/formats.py, where its markers are spelled): call sections
with their parser functions, thinking markers, and what is stripped. The family name comes from
`app.engine.chat.formats.detect_family` (from the chat template)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from app.engine.chat.formats import FORMATS, ChatFormat

from . import formats
from .types import ToolCall

SectionParser = Callable[[str], "list[ToolCall] | None"]

PARSERS: dict[str, SectionParser] = {
    "hermes": formats.hermes, "qwen3_coder": formats.qwen3_coder, "llama3": formats.llama3,
    "mistral": formats.mistral, "deepseek": formats.deepseek, "functiongemma": formats.functiongemma,
    "pythonic": formats.pythonic,
    "deepseek_call": lambda b: formats.deepseek(formats.DS_CALL_BEGIN + b),     # one call, its marker consumed
}


@dataclass(frozen=True)
class Section:
    start: str
    end: str | None            # None: the section runs to the end of the reply
    parse: SectionParser


@dataclass(frozen=True)
class FamilySpec:
    name: str
    sections: tuple[Section, ...] = ()
    think: tuple[str, str] | None = None
    bare_pythonic: bool = False   # a reply that starts with `[name(` is a call list (Gemma 3)
    strip: tuple[str, ...] = ()   # markup around plain content, removed (Command R's <|START_RESPONSE|>)


def _spec(f: ChatFormat) -> FamilySpec:
    return FamilySpec(f.name, tuple(Section(s.start, s.end, PARSERS[s.parser]) for s in f.sections), f.think,
                      f.bare_pythonic, f.strip)


SPECS: dict[str, FamilySpec] = {name: _spec(f) for name, f in FORMATS.items()}


def spec_for(family: str | None) -> FamilySpec:
    return SPECS.get(family or "generic", SPECS["generic"])
