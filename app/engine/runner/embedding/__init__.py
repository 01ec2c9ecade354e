"""Embeddings in the runner: tokenizing, truncating and computing them (`embeddings`), and one embedding job
the loop runs between steps (`embed_job`).
Covered by tests/integration/engine/test_runner.py.
"""
