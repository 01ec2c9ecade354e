"""Speculative decoding: whether and what to draft after each step's sampling (`drafting`), the proposer
interface (`proposer`) and its two proposers, prompt lookup (`ngram_draft`, weighed by `draft_policy`)
and a draft model (`draft_model`). docs/architecture.md, "Speculative decoding".
Covered by tests/unit/engine/runner/speculation/test_draft_policy.py and
tests/integration/engine/test_speculative.py.
"""
