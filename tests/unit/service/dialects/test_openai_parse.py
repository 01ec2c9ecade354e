"""OpenAI's sampling fields and logit_bias as its dialect's parser reads them (dialects/openai/parse.py),
then the common options step."""
from __future__ import annotations

import pytest

from app.service.dialects.openai.parse import parse_logit_bias, sampling_options
from app.service.generation.pipeline import request_options
from app.service.http.errors import ApiError


def parse_openai_sampling(body: dict):
    """OpenAI's sampling fields as the dialect's parser translates them, then the common options step."""
    return request_options(sampling_options(body), None, parse_logit_bias(body))


def test_openai_sampling_and_logit_bias():
    ro = parse_openai_sampling({"temperature": 0.5, "max_completion_tokens": 9, "stop": "END", "seed": 3,
                                "logit_bias": {"42": -100}})
    assert ro.num_predict == 9 and ro.stop == ["END"] and ro.sampling.logit_bias == {42: -100.0}
    with pytest.raises(ApiError):
        parse_openai_sampling({"temperature": 3})
    with pytest.raises(ApiError):
        parse_openai_sampling({"logit_bias": {"not-a-token": 1}})
