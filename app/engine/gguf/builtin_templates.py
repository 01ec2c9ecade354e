"""Chat templates for GGUFs that carry no `tokenizer.chat_template`, in Jinja, following llama.cpp's built-in
ones (`llama_chat_builtin_templates`, src/llama-chat.cpp): the markup each family's vocabulary was trained on.

Each entry: (Jinja template, the special tokens its markup needs, end-of-turn strings to stop on).
"""
from __future__ import annotations

_SYS_FIRST = ("{%- set sys = messages[0]['content'] if messages and messages[0]['role'] == 'system' else '' -%}"
              "{%- set msgs = messages[1:] if sys else messages -%}")
# Newlines are written as '\n' expressions: Jinja's whitespace control ({%- -%}) would eat literal ones.

GEMMA = (
    "{{ bos_token }}" + _SYS_FIRST +
    "{%- for m in msgs -%}"
    "{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else 'user') + '\n' }}"
    "{%- if loop.first and sys -%}{{ sys + '\n\n' }}{%- endif -%}"
    "{{ m['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

LLAMA3 = (
    "{{ bos_token }}{%- for m in messages -%}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' }}{{ m['content'] | trim }}{{ '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif -%}"
)

CHATML = (
    "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)

MISTRAL = (
    "{{ bos_token }}" + _SYS_FIRST +
    "{%- for m in msgs -%}"
    "{%- if m['role'] == 'assistant' -%}{{ ' ' + (m['content'] | trim) + eos_token }}"
    "{%- else -%}{{ '[INST] ' + (sys + '\n\n' if loop.last and sys else '') + (m['content'] | trim) + ' [/INST]' }}"
    "{%- endif -%}{%- endfor -%}"
)

PHI3 = (
    "{%- for m in messages -%}{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|end|>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"
)

DEEPSEEK3 = (
    "{{ bos_token }}" + _SYS_FIRST + "{{ sys }}"
    "{%- for m in msgs -%}"
    "{%- if m['role'] == 'user' -%}{{ '<｜User｜>' + m['content'] }}"
    "{%- else -%}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<｜Assistant｜>' }}{%- endif -%}"
)

# No chat markup in the vocabulary at all (a base model): plain labelled turns, and stop when the model starts
# writing the user's next turn.
PLAIN = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{{ m['content'] + '\n\n' }}"
    "{%- elif m['role'] == 'user' -%}{{ 'User: ' + m['content'] + '\n\n' }}"
    "{%- else -%}{{ 'Assistant: ' + m['content'] + '\n\n' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"
)

# name -> (template, tokens the vocabulary must have, end-of-turn stop strings); checked in this order
BUILTIN = {
    "gemma": (GEMMA, ("<start_of_turn>", "<end_of_turn>"), ("<end_of_turn>",)),
    "llama3": (LLAMA3, ("<|start_header_id|>", "<|eot_id|>"), ("<|eot_id|>",)),
    "deepseek3": (DEEPSEEK3, ("<｜User｜>", "<｜Assistant｜>"), ("<｜end▁of▁sentence｜>",)),
    "phi3": (PHI3, ("<|user|>", "<|assistant|>", "<|end|>"), ("<|end|>",)),
    "chatml": (CHATML, ("<|im_start|>", "<|im_end|>"), ("<|im_end|>",)),
    "mistral": (MISTRAL, ("[INST]", "[/INST]"), ()),
}
PLAIN_STOPS = ("\nUser:",)
