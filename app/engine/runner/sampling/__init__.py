"""Sampling: the llama.cpp sampler chain of a request (`chain`), grammars (`grammar`: JSON schema and format;
`tool_grammar`: tool calls), the grammar kept out of the chain and fed only tokens it accepts
(`constrained`), and the thinking budget (`think_budget`).
Covered by tests/unit/engine/runner/sampling/test_tool_grammar.py.
"""
