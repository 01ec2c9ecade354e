"""The small part of Go's text/template that Ollama prompt templates for /api/generate use:

    {{ .System }}  {{ .Prompt }}  {{ .Response }}  {{ if .X }}...{{ else }}...{{ end }}  and {{- / -}} trimming.

Templates that need more (`range .Messages`, functions, pipelines) raise TemplateError; the caller then keeps the
model's own (GGUF, Jinja) chat template for a Modelfile TEMPLATE, or answers 400 for a request's `template`.
"""
from __future__ import annotations

import re

_ACTION = re.compile(r"{{(-?)\s*(.*?)\s*(-?)}}", re.S)
_FIELDS = ("System", "Prompt", "Response")


class TemplateError(ValueError):
    pass


def _tokens(template: str) -> list[tuple[str, str]]:
    """[("text", s) | ("action", s)] with {{- -}} whitespace trimming applied."""
    out: list[tuple[str, str]] = []
    pos = 0
    trim_next = False
    for m in _ACTION.finditer(template):
        text = template[pos:m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", m.group(2).strip()))
        trim_next = bool(m.group(3))
        pos = m.end()
    text = template[pos:]
    out.append(("text", text.lstrip() if trim_next else text))
    return out


def _field(expr: str) -> str:
    m = re.fullmatch(r"\.(\w+)", expr)
    if not m or m.group(1) not in _FIELDS:
        raise TemplateError(f"template action {{{{ {expr} }}}} is not supported (only .System, .Prompt, .Response, "
                            "if/else/end)")
    return m.group(1)


def render(template: str, values: dict[str, str]) -> str:
    """Render; raises TemplateError for anything outside the subset or unbalanced if/end."""
    out: list[str] = []
    stack: list[bool] = []          # per open `if`: is this branch emitting?

    def emitting() -> bool:
        return all(stack)

    for kind, s in _tokens(template):
        if kind == "text":
            if emitting():
                out.append(s)
            continue
        if s.startswith("/*"):
            continue                 # comment
        if s.startswith("if "):
            stack.append(bool(values.get(_field(s[3:].strip()), "")))
        elif s == "else":
            if not stack:
                raise TemplateError("{{ else }} without {{ if }}")
            stack[-1] = not stack[-1]
        elif s == "end":
            if not stack:
                raise TemplateError("{{ end }} without {{ if }}")
            stack.pop()
        else:
            name = _field(s)
            if emitting():
                out.append(values.get(name, ""))
    if stack:
        raise TemplateError("{{ if }} without {{ end }}")
    return "".join(out)
