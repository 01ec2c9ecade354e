"""The output thread (`output_thread`) and what it makes of sampled tokens: text, stop strings and logprobs
(`text`); the typed port and queue items between it and the loop (`output_port`).
Covered by tests/unit/engine/runner/step/test_step_parts.py.
"""
