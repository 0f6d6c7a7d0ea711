"""pydantic-ai's ``Agent`` against ``specchat serve`` on the default model (whose template renders no tools, so the
server's generic tool format carries them): structured output by its default method (an output tool), and a tool
round trip (a call, its result sent back, the answer); the same through its Responses model (``/v1/responses``)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

pytest.importorskip("pydantic_ai", reason="comes with the test extra: pip install -e '.[test]'")
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_ai.settings import ModelSettings  # noqa: E402


class Capital(BaseModel):
    """A country and its capital."""

    country: str = Field(description="the country's name")
    capital: str = Field(description="its capital city")


def _model(server) -> OpenAIChatModel:
    return OpenAIChatModel("specchat", provider=OpenAIProvider(base_url=server.url, api_key="unused"))


def test_structured_output_by_its_default_output_tool(server):
    agent = Agent(_model(server), output_type=Capital, model_settings=ModelSettings(temperature=0, max_tokens=80))
    result = agent.run_sync("What is the capital of France?")
    assert isinstance(result.output, Capital) and result.output.country and result.output.capital
    calls = [part for message in result.all_messages() for part in message.parts if isinstance(part, ToolCallPart)]
    assert calls and calls[-1].tool_name == "final_result", "the output came as a call of pydantic-ai's output tool"


def test_a_tool_round_trip(server):
    agent = Agent(_model(server), output_type=Capital, model_settings=ModelSettings(temperature=0, max_tokens=80))
    asked = []

    @agent.tool_plain
    def capital_of(country: str) -> str:
        """The capital city of a country."""
        asked.append(country)
        return "Paris" if "france" in country.lower() else "unknown"

    result = agent.run_sync("Use capital_of to look up the capital of France.")
    parts = [part for message in result.all_messages() for part in message.parts]
    returns = [part for part in parts if isinstance(part, ToolReturnPart) and part.tool_name == "capital_of"]
    assert asked and returns and returns[0].content in ("Paris", "unknown")
    assert isinstance(result.output, Capital)


def test_the_responses_model_gives_structured_output_and_runs_a_tool(server):
    """``OpenAIResponsesModel`` sends ``/v1/responses`` with function tools, ``function_call_output`` items and
    ``max_output_tokens``."""
    model = OpenAIResponsesModel("specchat", provider=OpenAIProvider(base_url=server.url, api_key="unused"))
    agent = Agent(model, output_type=Capital, model_settings=ModelSettings(temperature=0, max_tokens=80))
    asked = []

    @agent.tool_plain
    def capital_of(country: str) -> str:
        """The capital city of a country."""
        asked.append(country)
        return "Paris" if "france" in country.lower() else "unknown"

    result = agent.run_sync("Use capital_of to look up the capital of France.")
    parts = [part for message in result.all_messages() for part in message.parts]
    assert asked and any(isinstance(part, ToolReturnPart) and part.tool_name == "capital_of" for part in parts)
    assert isinstance(result.output, Capital) and result.output.capital
    calls = [part for part in parts if isinstance(part, ToolCallPart)]
    assert calls[-1].tool_name == "final_result"
