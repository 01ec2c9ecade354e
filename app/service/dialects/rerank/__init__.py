"""Reranking in the shape llama-server, Jina and Cohere use (/v1/rerank). A package marker (no code): covered by its
modules' tests (tests/unit/service/, tests/integration/service/)."""
