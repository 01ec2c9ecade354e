"""Modelfiles (store/modelfile.py): every form parsed and rendered back, and errors that name the problem."""
from __future__ import annotations

import pytest

from app.service.store.modelfile import ModelfileError, parse_modelfile, render_modelfile


def test_modelfile_parse_all_forms():
    mf = parse_modelfile('# comment\nFROM smollm2:135m\nPARAMETER temperature 0.3\nPARAMETER stop "<|im_end|>"\n'
                         'PARAMETER stop END\nPARAMETER num_ctx 2048\nSYSTEM """You are\nbrief."""\n'
                         'TEMPLATE "{{ .Prompt }}"\nMESSAGE user hello\n')
    assert mf.from_ == "smollm2:135m"
    assert mf.parameters == {"temperature": 0.3, "stop": ["<|im_end|>", "END"], "num_ctx": 2048}
    assert mf.system == "You are\nbrief." and mf.template == "{{ .Prompt }}"
    assert mf.messages == [{"role": "user", "content": "hello"}]
    again = parse_modelfile(render_modelfile(mf.from_, mf.parameters, mf.template, mf.system))
    assert (again.parameters, again.system, again.template) == (mf.parameters, mf.system, mf.template)


@pytest.mark.parametrize("text,word", [
    ("PARAMETER temperature 1", "FROM"), ("FROM x\nPARAMETER temperature warm", "temperature"),
    ("FROM x\nPARAMETER bogus 1", "bogus"), ("FROM x\nSYSTEM \"\"\"never closed", "unterminated"),
    ("FROM x\nFROBNICATE y", "FROBNICATE"), ("FROM x\nADAPTER", "ADAPTER"),
])
def test_modelfile_errors_name_the_problem(text, word):
    with pytest.raises(ModelfileError, match=word):
        parse_modelfile(text)
