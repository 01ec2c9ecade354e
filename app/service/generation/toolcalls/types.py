"""What a model's reply is made of once its markup is parsed: visible content, thinking, and tool calls (whole,
or in pieces as the model writes them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass
class ToolCall:
    name: str
    arguments: dict                       # always an object (parsed from the model's JSON)
    id: str | None = None                 # the model's own id when its format has one (Mistral); else set later


@dataclass(frozen=True)
class Open:
    """A call begins (streamed in pieces): its name is complete and names a supplied tool."""
    name: str


@dataclass(frozen=True)
class Args:
    """More of the open call's arguments, as JSON text (json.dumps's spelling, ensure_ascii=False)."""
    text: str


@dataclass(frozen=True)
class Done:
    """The open call is complete: `arguments` is what all its Args pieces add up to, parsed."""
    name: str
    arguments: dict


CallPart = Union[Open, Args, Done]
Item = Union[tuple[str, str], ToolCall, Open, Args, Done]     # ("content" | "thinking", text), a whole call, a part


@dataclass
class Delta:
    """What one piece of output adds: text for `content`, text for `thinking`, tool calls that are complete, and
    all of it in the order the model wrote it (`items`, where a call streamed in pieces shows as its parts)."""
    content: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.items:                   # made from its fields: thinking, content, calls
            self.items = [(k, t) for k, t in (("thinking", self.thinking), ("content", self.content)) if t]
            self.items += self.calls

    def __bool__(self) -> bool:
        return bool(self.content or self.thinking or self.calls or self.items)

    def add_text(self, kind: str, text: str) -> None:
        if not text:
            return
        if kind == "content":
            self.content += text
        else:
            self.thinking += text
        last = self.items[-1] if self.items else None
        if isinstance(last, tuple) and last[0] == kind:
            self.items[-1] = (kind, last[1] + text)
        else:
            self.items.append((kind, text))

    def add_call(self, call: ToolCall) -> None:
        self.calls.append(call)
        self.items.append(call)

    def add_part(self, part: CallPart) -> None:
        if isinstance(part, Done):
            self.calls.append(ToolCall(part.name, part.arguments))
        self.items.append(part)

    def extend(self, other: "Delta") -> "Delta":
        for item in other.items:
            if isinstance(item, tuple):
                self.add_text(*item)
            elif isinstance(item, ToolCall):
                self.add_call(item)
            else:
                self.add_part(item)
        return self
