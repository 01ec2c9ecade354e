"""Which markers each family's replies use: tool-call sections and thinking. The family name comes from
`app.engine.gguf.chat_facts.detect_family` (from the chat template); this maps it to what the parser looks for."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from app.engine.gguf.chat_facts import DEFAULT_THINK, THINK_MARKERS

from . import formats
from .types import ToolCall

SectionParser = Callable[[str], "list[ToolCall] | None"]


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


THINK = DEFAULT_THINK

SPECS: dict[str, FamilySpec] = {s.name: s for s in (
    FamilySpec("generic", think=THINK),
    FamilySpec("hermes", (Section("<tool_call>", "</tool_call>", formats.hermes),), THINK),
    FamilySpec("qwen3_coder", (Section("<tool_call>", "</tool_call>", formats.qwen3_coder),), THINK),
    FamilySpec("llama3", (Section("<|python_tag|>", None, formats.llama3),
                          Section("<|python_start|>", "<|python_end|>", formats.llama3))),     # Llama 4
    FamilySpec("mistral", (Section(formats.MISTRAL_CALLS, None, formats.mistral),), THINK_MARKERS["mistral"]),
    FamilySpec("command_r", (Section("<|START_ACTION|>", "<|END_ACTION|>", formats.hermes),),
               THINK_MARKERS["command_r"], strip=("<|START_RESPONSE|>", "<|END_RESPONSE|>")),
    FamilySpec("deepseek", (Section("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", formats.deepseek),
                            Section(formats.DS_CALL_BEGIN, formats.DS_CALL_END,
                                    lambda b: formats.deepseek(formats.DS_CALL_BEGIN + b))), THINK),
    FamilySpec("functiongemma", (Section("<start_function_call>", "<end_function_call>", formats.functiongemma),)),
    FamilySpec("pythonic", (Section("```tool_code", "```", formats.pythonic),), bare_pythonic=True),
)}


def spec_for(family: str | None) -> FamilySpec:
    return SPECS.get(family or "generic", SPECS["generic"])
