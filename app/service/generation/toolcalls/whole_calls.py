"""Call syntaxes read whole, never in pieces: the call is given once complete.
- pythonic (Llama 4, Gemma 3 `tool_code`): `[get_weather(city="Paris"), ...]`; arguments must be Python literals
  (no code is run);
- deepseek: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>` (R1/V3) or
  `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (V3.1);
- functiongemma: `<start_function_call>call:NAME{key:<escape>text<escape>,n:1}<end_function_call>`.

Covered by tests/unit/service/generation/toolcalls/test_section_parsers.py (each syntax read whole) and
test_toolcall_pieces.py (in pieces).
"""
from __future__ import annotations

import ast
import json
import re

from app.engine.chat.formats import DS_CALL, DS_SEP

from .jsonscan import loads_lenient
from .reader import SyntaxReader
from .types import ToolCall


def _py_value(node):
    return ast.literal_eval(node)


def _py_call(node) -> ToolCall | None:
    if not isinstance(node, ast.Call) or node.args and not node.keywords and len(node.args) > 1:
        return None
    f = node.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name):
        return None
    parts.append(f.id)
    parts.reverse()
    if len(parts) == 2 and parts[1] == "call":    # Llama 3 built-in tools: brave_search.call(query=...)
        parts = parts[:1]
    try:
        args = {kw.arg: _py_value(kw.value) for kw in node.keywords if kw.arg}
    except (ValueError, SyntaxError, TypeError):
        return None
    if node.args:                                  # f({"city": "Paris"}): one positional dict
        try:
            only = _py_value(node.args[0])
        except (ValueError, SyntaxError, TypeError):
            return None
        if not isinstance(only, dict) or args:
            return None
        args = only
    return ToolCall(".".join(parts), args)


class PythonCalls(SyntaxReader):
    """Python calls: a list of them, or one (a ```tool_code fence around them is dropped)."""

    streams = False

    def _whole(self, body: str) -> list[ToolCall] | None:
        text = body.strip()
        if text.startswith("```"):
            text = text.strip("`").removeprefix("tool_code").removeprefix("python").strip()
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError):
            return None
        node = tree.body
        nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
        calls = [c for c in (_py_call(n) for n in nodes) if c is not None]
        return calls if calls and len(calls) == len(nodes) else None


DS_CALL_BEGIN, DS_CALL_END = DS_CALL
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*(?:```|$)", re.S)


class DeepSeekCalls(SyntaxReader):
    """DeepSeek's calls section: its calls, each between its own begin and end markers."""

    streams = False

    def _whole(self, body: str) -> list[ToolCall] | None:
        calls: list[ToolCall] = []
        for chunk in body.split(DS_CALL_BEGIN):
            chunk = chunk.split(DS_CALL_END)[0].strip()
            if not chunk:
                continue
            if DS_SEP not in chunk:
                return calls or None
            head, rest = chunk.split(DS_SEP, 1)
            head = head.strip()
            if head == "function":                     # R1 / V3: function<sep>NAME\n```json\n{...}\n```
                name, _, rest = rest.partition("\n")
            else:                                      # V3.1: NAME<sep>{...}
                name = head
            fenced = _FENCE.search(rest)
            args = loads_lenient(fenced.group(1) if fenced else rest)
            if not isinstance(args, dict) or not name.strip():
                return calls or None
            calls.append(ToolCall(name.strip(), args))
        return calls or None


class DeepSeekCall(DeepSeekCalls):
    """One DeepSeek call, its begin marker consumed."""

    def _whole(self, body: str) -> list[ToolCall] | None:
        return super()._whole(DS_CALL_BEGIN + body)


GEMMA_ESC = "<escape>"


class _FGReader:
    """FunctionGemma's argument syntax: {key:value,...}; strings between <escape> marks, bare numbers/booleans,
    nested {...} and [...]."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.ws()
        s = self.s
        if s.startswith(GEMMA_ESC, self.i):
            j = s.find(GEMMA_ESC, self.i + len(GEMMA_ESC))
            if j < 0:
                raise ValueError("unterminated string")
            v = s[self.i + len(GEMMA_ESC):j]
            self.i = j + len(GEMMA_ESC)
            return v
        if s.startswith("{", self.i):
            return self.obj()
        if s.startswith("[", self.i):
            self.i += 1
            out = []
            while True:
                self.ws()
                if s.startswith("]", self.i):
                    self.i += 1
                    return out
                out.append(self.value())
                self.ws()
                if s.startswith(",", self.i):
                    self.i += 1
        m = re.compile(r"[^,}\]]*").match(s, self.i)
        self.i = m.end()
        word = m.group(0).strip()
        try:
            return json.loads(word, strict=False)
        except ValueError:
            return word

    def obj(self) -> dict:
        self.i += 1                                  # '{'
        out: dict = {}
        while True:
            self.ws()
            if self.i >= len(self.s):
                return out                           # cut off: what was read so far
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            j = self.s.find(":", self.i)
            if j < 0:
                raise ValueError("key without value")
            key = self.s[self.i:j].strip()
            self.i = j + 1
            out[key] = self.value()
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1


class FunctionGemmaCalls(SyntaxReader):
    """`call:NAME{...}`, its arguments in FunctionGemma's own syntax (`_FGReader`)."""

    streams = False

    def _whole(self, body: str) -> list[ToolCall] | None:
        text = body.strip()
        if not text.startswith("call:"):
            return None
        brace = text.find("{")
        name = (text[5:brace] if brace >= 0 else text[5:]).strip()
        if not name:
            return None
        try:
            args = _FGReader(text[brace:]).obj() if brace >= 0 else {}
        except (ValueError, IndexError):
            return None
        return [ToolCall(name, args)]
