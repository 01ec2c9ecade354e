"""Speculative decoding's draft model without a runner: the vocabulary rule (engine/gguf/vocab_match.py, llama.cpp's
common_speculative_are_compatible on GGUF metadata) and the draft's bytes in the plan (planner/draft.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from app.engine.gguf.model_info import read_model_info
from app.engine.gguf.vocab_match import vocab_mismatch
from app.engine.planner.draft import with_draft
from engine_util import cpu_layout


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory):
    """A loadable synthetic llama whose vocabulary differs from SmolLM2's in one token's text."""
    from gguf_factory import write_other_vocab_llama

    return write_other_vocab_llama(tmp_path_factory.mktemp("vocab") / "other-vocab.gguf")


def test_vocab_match_is_llamas_rule(smollm2_path, other_vocab, dense_gguf):
    assert vocab_mismatch(smollm2_path, smollm2_path) is None
    assert vocab_mismatch(smollm2_path, dense_gguf) is None        # SmolLM2's tokenizer, other weights
    why = vocab_mismatch(smollm2_path, other_vocab)
    assert why and "token 1000" in why


def test_the_plan_holds_the_draft_models_bytes(smollm2_path, dense_gguf):
    target = cpu_layout(smollm2_path, num_ctx=1024, num_parallel=2)
    info = read_model_info(dense_gguf)
    lay = with_draft(target, info, "tiny")
    d = lay.draft
    assert d.model_path == str(info.path) and d.device_id == "CPU" and d.name == "tiny"
    assert d.weights == info.weight_bytes > 0 and d.kv > 0 and d.compute > 0
    cpu = lay.devices[0]
    assert cpu.draft == d.total and cpu.total == target.devices[0].total + d.total
    assert lay.fits
    # a CPU budget the target fits but the draft does not: the layout does not fit, and says why
    tight = replace(target, devices=(replace(target.devices[0], budget=target.devices[0].total + d.total - 1),))
    squeezed = with_draft(tight, info, "tiny")
    assert not squeezed.fits and any("draft model does not fit" in r for r in squeezed.reasons)


def test_the_memory_views_data_shows_the_draft(smollm2_path, dense_gguf):
    """The memory window's bars and predicted-vs-actual rows (gui/memory/memory_data.py, from /api/ps's layout): the draft
    model's bytes are their own segment and kind, counted in what the model takes."""
    from app.gui.memory.memory_data import DRAFT, OUR_KINDS, device_columns, predicted_kinds_of

    lay = with_draft(cpu_layout(smollm2_path, num_ctx=1024, num_parallel=2), read_model_info(dense_gguf), "tiny")
    need = lay.draft.total
    inventory = {"host_ram_total": 64 << 30, "host_ram_available": 32 << 30, "devices": []}
    [cpu] = device_columns(inventory, lay.to_dict(), resident=True)
    assert cpu.get(DRAFT) == need > 0 and DRAFT in OUR_KINDS
    assert predicted_kinds_of(lay.to_dict())["CPU"]["draft"] == need
