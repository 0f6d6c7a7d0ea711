"""instructor against ``specchat serve`` on the default model: structured output by its default mode
(``Mode.TOOLS``: the model is made to call a function whose parameters are the response model), not streamed and
streamed as partial objects (the arguments arrive in fragments)."""

from __future__ import annotations

import openai
import pytest
from pydantic import BaseModel, Field

instructor = pytest.importorskip("instructor", reason="comes with the test extra: pip install -e '.[test]'")


class Capital(BaseModel):
    """A country and its capital."""

    country: str = Field(description="the country's name")
    capital: str = Field(description="its capital city")


ASK = [{"role": "user", "content": "What is the capital of France?"}]


def _client(server):
    client = instructor.from_openai(openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=180))
    assert client.mode is instructor.Mode.TOOLS, "instructor's default mode is the one tested"
    return client


def test_structured_output_by_its_default_tools_mode(server):
    capital, completion = _client(server).chat.completions.create_with_completion(
        model="specchat", response_model=Capital, messages=ASK, temperature=0, max_tokens=80, max_retries=0)
    assert isinstance(capital, Capital) and capital.country and capital.capital
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.tool_calls[0].function.name == "Capital"


def test_partial_objects_stream_until_the_object_is_whole(server):
    """(instructor sends the partial model's schema, its fields optional, so the reply may differ from the one
    above.)"""
    partials = list(_client(server).chat.completions.create_partial(
        model="specchat", response_model=Capital, messages=ASK, temperature=0, max_tokens=80, max_retries=0))
    assert len(partials) > 1 and partials[0].country is None
    assert Capital.model_validate(partials[-1].model_dump()).capital
