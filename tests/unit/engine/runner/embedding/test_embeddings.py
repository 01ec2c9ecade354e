"""Embedding inputs (runner/embedding/embeddings.py): truncated or refused past the context, as asked."""
from __future__ import annotations

import pytest

from app.engine.runner.embedding.embeddings import InputTooLong, fit_tokens


def test_embedding_truncation_rule():
    assert fit_tokens([1, 2, 3], 5, truncate=False) == [1, 2, 3]
    assert fit_tokens([1, 2, 3, 4, 5, 6], 4, truncate=True) == [1, 2, 3, 4]
    with pytest.raises(InputTooLong, match="6 tokens"):
        fit_tokens([1, 2, 3, 4, 5, 6], 4, truncate=False, index=0)
