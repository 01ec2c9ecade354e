"""The prompt cache: where a new sequence starts and how much of its prompt its slot already holds
(`slot_placement`), kept slots, host-RAM entries and context checkpoints (`prompt_cache`), and states on
disk (`disk_cache`). docs/prompt-cache.md.
Covered by tests/unit/engine/runner/cache/test_prompt_cache_parts.py and
tests/integration/engine/test_prompt_cache.py.
"""
