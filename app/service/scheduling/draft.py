"""A model's `draft` option (speculative decoding's draft model) checked before it is used: the model named must
exist here and have the target's vocabulary (compared by the injected `vocab_mismatch` collaborator from both
GGUFs' metadata, no load; the loader hands it in with the other collaborators). A failed check is the client's 400 naming the `draft` field, at /api/create and at a load alike, so a
draft model deleted or replaced since the Modelfile was written fails its request with a clear message and
never reaches the runner.
Covered by tests/integration/service/test_draft_model_api.py and tests/unit/service/scheduling/test_scheduler_units.py.
"""
from __future__ import annotations

from app.engine.planner.memory import kv_shape_of

from ..http.errors import ApiError


async def check_draft(resolve, model_info, vocab_mismatch, target_path, target_name: str, draft_name: str):
    """The draft model's (record, ModelInfo) for `target_name` (`resolve`: name -> record, raising an ApiError;
    `model_info`: path -> ModelInfo; `vocab_mismatch`: (target path, draft path) -> what differs or None: the
    collaborators', collaborators.py); ApiError 400 with param "draft" when it cannot draft for the target."""
    try:
        record = await resolve(draft_name)
    except ApiError as e:
        raise ApiError(400, f"draft: {e.message}", param="draft") from None
    try:
        why = await vocab_mismatch(target_path, record.path)
        info = await model_info(record.path)
    except Exception as e:  # noqa: BLE001 - GGUFError, a file gone since
        raise ApiError(400, f"draft: model {draft_name!r} cannot be read: {e}", param="draft") from None
    if why:
        raise ApiError(400, f"draft: model {draft_name!r} cannot draft for {target_name!r}: the vocabularies "
                            f"differ ({why})", param="draft")
    for who, i in ((target_name, await model_info(target_path)), (draft_name, info)):
        if _recurrent(i):
            raise ApiError(400, f"draft: {who!r} has a recurrent state, which cannot drop rejected draft tokens: "
                                f"no speculative decoding with a draft model for it", param="draft")
    return record, info


def _recurrent(info) -> bool:
    """A recurrent or hybrid model (llama.cpp keeps one state per sequence, not cells by position)."""
    return "state" in kv_shape_of(info).cache
