"""Structured output: `format: "json"` and JSON schemas turned into GBNF for llama.cpp's grammar sampler.

llama-cpp-python ships the converter (a port of llama.cpp's json-schema-to-grammar); we only validate input
and give clear errors, since a grammar llama.cpp cannot parse makes its sampler constructor return NULL.
"""
from __future__ import annotations

import json

from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf


class GrammarError(ValueError):
    """The requested format/schema cannot be turned into a grammar; the message says why."""


def grammar_for(json_mode: bool = False, json_schema: dict | None = None) -> str | None:
    """GBNF for the request, or None when output is unconstrained."""
    if json_schema is not None:
        if not isinstance(json_schema, dict):
            raise GrammarError(f"format must be \"json\" or a JSON schema object, got {type(json_schema).__name__}")
        try:
            return json_schema_to_gbnf(json.dumps(json_schema))
        except Exception as e:  # the converter raises assorted types on bad schemas
            raise GrammarError(f"unsupported JSON schema: {e}") from e
    if json_mode:
        return JSON_GBNF
    return None
