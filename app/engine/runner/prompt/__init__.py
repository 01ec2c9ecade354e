"""From a request to the prompt's tokens (admission, on the output thread): `admission` (template, tokenize,
fit, grammar, sampler chain), chat templates (`chat_template`), fitting the context (`context_fit`) and
the prompt's images (`media`).
Covered by tests/unit/engine/runner/prompt/test_admission.py.
"""
