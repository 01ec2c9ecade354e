"""Chat templates rendered in the runner (runner/prompt/chat_template.py): SmolLM2's own, its errors, the
ChatML fallback."""
from __future__ import annotations

import pytest
from llama_cpp import llama_cpp as L

from app.engine.runner.prompt.chat_template import TemplateError, render_chat


def test_chat_template_renders_smollm2_template(llama):
    model = llama[0]
    tpl = L.llama_model_chat_template(model, None).decode()
    out = render_chat(tpl, [{"role": "user", "content": "Hi"}])
    assert "<|im_start|>user\nHi<|im_end|>" in out and out.endswith("<|im_start|>assistant\n")
    assert "You are a helpful AI assistant" in out                   # the template's default system prompt
    out2 = render_chat(tpl, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert "Be brief." in out2 and "helpful AI assistant" not in out2
    with pytest.raises(TemplateError):
        render_chat(tpl, [{"content": "no role"}])
    with pytest.raises(TemplateError, match="nope"):
        render_chat("{{ raise_exception('nope') }}", [])
    with pytest.raises(TemplateError):
        render_chat("{% for %}", [])
    assert render_chat(None, [{"role": "user", "content": "x"}]).startswith("<|im_start|>user\nx")   # ChatML fallback
