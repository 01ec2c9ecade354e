"""Chat facts from a GGUF: the family from the template, capabilities, built-in templates for GGUFs without one."""
from __future__ import annotations

import pytest

from app.engine.gguf.builtin_templates import BUILTIN, PLAIN
from app.engine.gguf.chat_facts import cached_chat_facts, chat_facts, choose_builtin, detect_family, read_chat_facts
from app.engine.runner.prompt.chat_template import render_chat

# the distinguishing lines of each family's real template
SNIPPETS = {
    "hermes": "{% if tools %}...<tools>{{ tool | tojson }}</tools>...<tool_call>\\n{\"name\": ...}</tool_call>{% endif %}",
    "qwen3_coder": "{% if tools %}<tool_call>\\n<function=example_function_name>\\n<parameter=x>{% endif %}",
    "llama3": "<|start_header_id|>system<|end_header_id|>{% if tools is not none %}Respond in the format "
              "{\"name\": function name, \"parameters\": ...}{% endif %}<|eot_id|>",
    "mistral": "{%- if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]",
    "deepseek": "{% if tools %}<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{% endif %}<think>",
    "harmony": "{%- if tools %}namespace functions{% endif %}<|start|>assistant<|channel|>final<|message|>",
    "functiongemma": "{% if tools %}<start_function_declaration>{% endif %}<start_function_call>",
    "pythonic": "{% if tools %}[func_name1(params_name1=params_value1)]{% endif %}",
    "generic": "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>{% endfor %}",
}


@pytest.mark.parametrize("family", sorted(SNIPPETS))
def test_family_from_template(family):
    assert detect_family(SNIPPETS[family]) == family


def test_capabilities():
    f = chat_facts("qwen3", SNIPPETS["hermes"] + "{% if enable_thinking %}<think>{% endif %}", {"<|im_start|>"})
    assert f.capabilities == ("completion", "tools", "thinking")
    assert f.think_open == "<think>" and f.think_toggle == "enable_thinking" and f.family == "hermes"
    f = chat_facts("qwen2", SNIPPETS["generic"], {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"})
    assert f.capabilities == ("completion", "insert") and f.fim == ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    f = chat_facts("bert", None, set(), is_embedding=True)
    assert f.capabilities == ("embedding",)
    f = chat_facts("gpt-oss", SNIPPETS["harmony"], set())
    assert "thinking" in f.capabilities and "tools" in f.capabilities and f.think_toggle == "reasoning_effort"


def test_fim_by_gguf_keys():
    tokens = ["<a>", "<b>", "<c>", "x"]
    f = chat_facts("llama", SNIPPETS["generic"], set(tokens), fim_ids={"pre": 0, "suf": 1, "mid": 2},
                   token_list=tokens)
    assert f.fim == ("<a>", "<b>", "<c>") and "insert" in f.capabilities


def test_builtin_template_by_vocabulary():
    name, tpl, reason, stops = choose_builtin("gemma3", {"<start_of_turn>", "<end_of_turn>", "<bos>"})
    assert name == "gemma" and stops == ("<end_of_turn>",) and "gemma3" in reason
    text = render_chat(tpl, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                       bos_token="<bos>")
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert choose_builtin("llama", {"<|start_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"})[0] == "llama3"
    name, tpl, reason, stops = choose_builtin("llama", {"<s>", "</s>"})
    assert name == "plain" and "no chat markup" in reason and stops
    assert render_chat(tpl, [{"role": "user", "content": "Hi"}]) == "User: Hi\n\nAssistant:"


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_builtin_template_renders_a_conversation(name):
    tpl = BUILTIN[name][0]
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
            {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]
    text = render_chat(tpl, msgs, bos_token="<s>", eos_token="</s>")
    for part in ("S", "U1", "A1", "U2"):
        assert part in text
    assert render_chat(PLAIN, msgs).endswith("Assistant:")


def test_template_less_gguf_gets_a_builtin(tmp_path):
    from gguf_factory import write_minimal
    from gguf_variants import write_llama
    f = read_chat_facts(write_llama(tmp_path / "m.gguf", template=None, n_layer=1))
    # SmolLM2's vocabulary (copied by the factory) has the ChatML tokens
    assert f.template_source == "builtin:chatml" and "<|im_start|>" in f.template_reason
    assert f.stops == ("<|im_end|>",)
    f = read_chat_facts(write_minimal(tmp_path / "bare.gguf"))        # no vocabulary at all
    assert f.template_source == "builtin:plain"


def test_cached_facts_only_for_the_file_version_read(tmp_path):
    """cached_chat_facts (the service's per-request lookup, no thread hop) answers only what read_chat_facts
    read for this very file version: nothing before the read, nothing once the file changed."""
    import os
    from gguf_variants import write_llama
    path = write_llama(tmp_path / "c.gguf", template=None, n_layer=1)
    assert cached_chat_facts(path) is None
    f = read_chat_facts(path)
    assert cached_chat_facts(path) is f
    os.utime(path, ns=(1, 1))                                         # another version of the file
    assert cached_chat_facts(path) is None
    assert read_chat_facts(path) == f and cached_chat_facts(path) is not None


def test_fim_ids_make_insert(tmp_path):
    from gguf_variants import write_llama
    f = read_chat_facts(write_llama(tmp_path / "fim.gguf", fim=True, n_layer=1))
    assert "insert" in f.capabilities and f.fim == ("<repo_name>", "<reponame>", "<file_sep>")


def test_smollm2_facts(smollm2_path):
    f = read_chat_facts(smollm2_path)
    assert f.template_source == "gguf" and f.family == "generic" and f.capabilities == ("completion",)
