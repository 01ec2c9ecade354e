"""A chat as a file: Markdown to read or share, JSON to keep or move to another machine (and import back).

Both hold the branch shown (what the model saw last), with the chat's settings; the JSON keeps each message's
stats and thinking/tool-call blocks too. No Qt here.
"""
from __future__ import annotations

import json

from app.gui.chat.history import AUTO_CTX, ChatHistory, Conversation, Message

FORMAT = "strata-chat"
VERSION = 1
ROLES = ("user", "assistant", "tool", "error")
HEADINGS = {"user": "You", "assistant": "Assistant", "tool": "Tool result", "error": "Error"}


def to_markdown(conv: Conversation, messages: list[Message]) -> str:
    lines = [f"# {conv.title}", ""]
    if conv.model:
        lines += [f"Model: `{conv.model}`", ""]
    if conv.system.strip():
        lines += ["## System", "", conv.system.strip(), ""]
    for m in messages:
        lines += [f"## {HEADINGS.get(m.role, m.role.title())}", ""]
        if m.blocks.get("thinking"):
            lines += ["<details><summary>Thinking</summary>", "", m.blocks["thinking"].strip(), "", "</details>", ""]
        lines += [m.content.rstrip(), ""]
        for call in m.blocks.get("tool_calls") or ():
            lines += ["```json", json.dumps(call, ensure_ascii=False), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_json(conv: Conversation, messages: list[Message]) -> dict:
    return {"format": FORMAT, "version": VERSION, "title": conv.title, "model": conv.model, "system": conv.system,
            "temperature": conv.temperature, "num_ctx": conv.num_ctx, "options": conv.options,
            "messages": [{"role": m.role, "content": m.content, "stats": m.stats, "blocks": m.blocks}
                         for m in messages]}


def _field(obj: dict, name: str, kind, where: str, default=None):
    value = obj.get(name, default)
    if isinstance(kind, tuple) and float in kind and isinstance(value, bool):
        value = None
    if not isinstance(value, kind):
        raise ValueError(f"{where}{name}: expected {getattr(kind, '__name__', 'a number')}, "
                         f"got {type(value).__name__}")
    return value


def import_json(history: ChatHistory, data) -> Conversation:
    """Make a new chat from `to_json`'s shape. A malformed file raises ValueError naming the field."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a Strata chat file (its 'format' is not {FORMAT!r})")
    messages = _field(data, "messages", list, "")
    checked = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]."
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}]: expected an object")
        role = _field(m, "role", str, where)
        if role not in ROLES:
            raise ValueError(f"{where}role: {role!r} is not one of {', '.join(ROLES)}")
        checked.append((role, _field(m, "content", str, where), _field(m, "stats", dict, where, {}),
                        _field(m, "blocks", dict, where, {})))
    conv = history.create(title=_field(data, "title", str, "", "Imported chat").strip() or "Imported chat",
                          model=_field(data, "model", str, "", ""), system=_field(data, "system", str, "", ""),
                          temperature=float(_field(data, "temperature", (int, float), "", 0.8)),
                          num_ctx=int(_field(data, "num_ctx", (int, float), "", AUTO_CTX)),
                          options=_field(data, "options", dict, "", {}))
    for role, content, stats, blocks in checked:
        history.add_message(conv.id, role, content, stats, None, blocks)
    return history.get(conv.id)
