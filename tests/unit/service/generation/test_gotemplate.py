"""The subset of Go templates `/api/generate`'s `template` may use (generation/gotemplate.py)."""
from __future__ import annotations

import pytest


def test_go_template_subset():
    from app.service.generation.gotemplate import TemplateError, render

    t = "{{ if .System }}<s>{{ .System }}</s>\n{{ end }}USER: {{ .Prompt }}\nASSISTANT: {{- .Response }}"
    assert render(t, {"System": "be brief", "Prompt": "hi"}) == "<s>be brief</s>\nUSER: hi\nASSISTANT:"
    assert render(t, {"System": "", "Prompt": "hi"}) == "USER: hi\nASSISTANT:"
    assert render("{{ if .System }}A{{ else }}B{{ end }}", {}) == "B"
    for bad in ("{{ range .Messages }}x{{ end }}", "{{ if .System }}x", "{{ end }}", "{{ .Tools }}"):
        with pytest.raises(TemplateError):
            render(bad, {"Prompt": "p"})
