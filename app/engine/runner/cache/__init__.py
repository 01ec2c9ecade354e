"""The prompt cache: one door, `prompt_cache.PromptCache` (where a new sequence starts, what a released slot keeps,
context checkpoints, what goes to disk), over its parts: kept slots, host-RAM entries and checkpoints (`stores`), the
search for a prompt's cached prefix (`prefix_search`), what a memory can continue from (`continuation`), copying a
running sequence's cells (`sharing`), cache reuse after a change (`chunk_reuse`), states on disk (`disk_cache`) and
what is written there when (`disk_saver`). docs/prompt-cache.md. Outside this folder only the door is used
(tests/unit/test_cache_facade.py).
Covered by tests/unit/engine/runner/cache/test_prompt_cache_parts.py and
tests/integration/engine/test_prompt_cache.py.
"""
