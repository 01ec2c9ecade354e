"""What a model's reply is made of once its markup is parsed: visible content, thinking, and tool calls."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ToolCall:
    name: str
    arguments: dict                       # always an object (parsed from the model's JSON)
    id: str | None = None                 # the model's own id when its format has one (Mistral); else set later


@dataclass
class Delta:
    """What one piece of output adds: text for `content`, text for `thinking`, and tool calls that are complete."""
    content: str = ""
    thinking: str = ""
    calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.thinking or self.calls)

    def extend(self, other: "Delta") -> "Delta":
        self.content += other.content
        self.thinking += other.thinking
        self.calls.extend(other.calls)
        return self
