"""Chat templates from the GGUF (`tokenizer.chat_template`, Jinja), rendered the way Hugging Face does.

Same environment as llama-cpp-python's Jinja2ChatFormatter / transformers: sandboxed, trim_blocks,
lstrip_blocks, loopcontrols, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII. Models
without a template get ChatML, the most common convention.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class TemplateError(ValueError):
    """The chat template failed to render these messages; the message says why."""


class _IgnoreGenerationTags(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message):
    raise TemplateError(message)


@lru_cache(maxsize=16)
def _compile(template: str):
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
        extensions=[_IgnoreGenerationTags, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template does not parse: {e}") from e


def validate_messages(messages) -> list[dict]:
    if not isinstance(messages, list):
        raise TemplateError("messages must be a list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise TemplateError(f"message {i} must be an object with a string 'role'")
        content = m.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise TemplateError(f"message {i}: content must be a string")
        out.append({**m, "content": content})
    return out


# variables a request may set in the template (thinking switches); anything else is the template's own business
TEMPLATE_KWARGS = ("enable_thinking", "reasoning_effort", "thinking")


def render_chat(template: str | None, messages: list[dict], *, bos_token: str = "", eos_token: str = "",
                add_generation_prompt: bool = True, tools: list[dict] | None = None,
                template_kwargs: dict | None = None) -> str:
    """Render messages (Hugging Face shapes: tool_calls with object arguments, tool results) and `tools`
    (OpenAI function shape) the way transformers' apply_chat_template does."""
    tpl = _compile(template or CHATML)
    extra = {k: v for k, v in (template_kwargs or {}).items() if k in TEMPLATE_KWARGS}
    try:
        return tpl.render(messages=validate_messages(messages), bos_token=bos_token, eos_token=eos_token,
                          add_generation_prompt=add_generation_prompt, raise_exception=_raise,
                          strftime_now=lambda f: datetime.now().strftime(f), tools=tools or None, **extra)
    except TemplateError:
        raise
    except Exception as e:  # jinja runtime errors (undefined attributes, sandbox violations)
        raise TemplateError(f"chat template failed: {e}") from e


def prompt_messages(prompt: str, system: str | None) -> list[dict]:
    """A generate-style request (prompt + optional system) as chat messages."""
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": prompt})
    return msgs
