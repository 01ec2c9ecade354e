"""The one table from a family's call syntax to its reader: `Section.parser` in the family's chat record
(app/engine/chat/formats.py) names it. Each syntax has one reader; read whole, it is fed everything, then
closed (reader.SyntaxReader.read)."""
from __future__ import annotations

from typing import Iterable

from .json_calls import JsonCalls, Llama3Calls
from .mistral import MistralCalls
from .qwen_xml import QwenXmlCalls
from .reader import SyntaxReader
from .types import ToolCall
from .whole_calls import DeepSeekCall, DeepSeekCalls, FunctionGemmaCalls, PythonCalls

READERS: dict[str, type[SyntaxReader]] = {
    "hermes": JsonCalls, "qwen3_coder": QwenXmlCalls, "llama3": Llama3Calls, "mistral": MistralCalls,
    "deepseek": DeepSeekCalls, "deepseek_call": DeepSeekCall, "functiongemma": FunctionGemmaCalls,
    "pythonic": PythonCalls,
}


def reader_for(syntax: str, tool_names: Iterable[str]) -> SyntaxReader | None:
    """A reader that gives the calls of `syntax` in pieces (None: no tools to name, or a syntax read whole)."""
    names = tuple(tool_names)
    cls = READERS[syntax]
    return cls(names) if names and cls.streams else None


def read_calls(syntax: str, body: str) -> list[ToolCall] | None:
    """The calls of a whole body in `syntax`, or None when it is not a call in that syntax."""
    return READERS[syntax].read(body)
