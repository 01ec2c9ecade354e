"""A request's fields checked for kind and range (generation/request.field): a 400 naming the field."""
from __future__ import annotations

import pytest

from app.service.generation.request import field
from app.service.http.errors import ApiError


@pytest.mark.parametrize("body,typ,ok", [
    ({"n": 2**31 - 1}, int, True), ({"n": 2**31}, int, False), ({"n": -(2**31)}, int, True), ({"n": 1e30}, int, False),
    ({"n": 3.0}, int, True), ({"n": 3.5}, int, False), ({"n": True}, int, False), ({"n": float("nan")}, float, False),
    ({"n": float("inf")}, float, False), ({"n": 10**400}, float, False), ({"n": 1.5}, float, True),
])
def test_request_fields_are_checked_for_kind_and_range(body, typ, ok):
    if ok:
        assert field(body, "n", typ) == body["n"]
        return
    with pytest.raises(ApiError) as e:
        field(body, "n", typ)
    assert e.value.status == 400 and e.value.param == "n" and "'n'" in e.value.message
