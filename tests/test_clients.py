"""LangChain's ``ChatOpenAI`` against ``specchat serve`` as a user would point it there: invoke, stream with usage,
structured output (JSON mode, a JSON schema from a pydantic model, function calling), a bound tool's round trip on
the default model (whose template renders no tools: the server's generic format carries them), and bound tools on
a tiny random model that carries Qwen2.5's tool template. Nothing leaves 127.0.0.1."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field
from server_process import ServerProcess
from tiny_models import QWEN25_TEMPLATE, write_tiny_llama

langchain_openai = pytest.importorskip("langchain_openai", reason="comes with the test extra: pip install -e '.[test]'")


class Capital(BaseModel):
    """A country and its capital."""

    country: str = Field(description="the country's name")
    capital: str = Field(description="its capital city")


def _chat(server, **options):
    return langchain_openai.ChatOpenAI(base_url=server.url, api_key="unused", model="specchat", max_retries=0,
                                       timeout=120, **options)


def test_invoke_and_stream_with_usage(server):
    llm = _chat(server, temperature=0, max_tokens=24, stream_usage=True)
    answer = llm.invoke("What is the capital of France?")
    assert "Paris" in answer.content
    assert answer.usage_metadata["input_tokens"] > 0 and answer.usage_metadata["output_tokens"] > 0
    chunks = list(llm.stream("What is the capital of France?"))
    assert "".join(chunk.content for chunk in chunks) == answer.content
    total = chunks[0]
    for chunk in chunks[1:]:
        total += chunk
    usage = {key: total.usage_metadata[key] for key in ("input_tokens", "output_tokens", "total_tokens")}
    assert usage == {key: answer.usage_metadata[key] for key in usage}


def test_structured_output_json_mode_and_json_schema(server):
    llm = _chat(server, temperature=0, max_tokens=120)
    data = llm.with_structured_output(method="json_mode").invoke(
        "Give me a JSON object with the name and the capital of France.")
    assert isinstance(data, dict) and data
    capital = llm.with_structured_output(Capital, method="json_schema").invoke("What is the capital of France?")
    assert isinstance(capital, Capital) and capital.country and capital.capital
    sampled = _chat(server, temperature=0.7, seed=3, max_tokens=120).with_structured_output(Capital).invoke(
        "What is the capital of Italy?")
    assert isinstance(sampled, Capital)


def test_structured_output_by_function_calling(server):
    llm = _chat(server, temperature=0, max_tokens=120)
    capital = llm.with_structured_output(Capital, method="function_calling").invoke("What is the capital of France?")
    assert isinstance(capital, Capital) and capital.country and capital.capital
    raw = llm.with_structured_output(Capital, method="function_calling", include_raw=True).invoke(
        "What is the capital of Italy?")
    assert raw["parsing_error"] is None and isinstance(raw["parsed"], Capital)
    assert [call["name"] for call in raw["raw"].tool_calls] == ["Capital"]


def test_a_bound_tool_round_trip_on_the_default_model(server):
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city today."""
        return f"Sunny and 24 degrees in {city}."

    ask = [HumanMessage("What is the weather in Paris?")]
    llm = _chat(server, temperature=0, max_tokens=60)
    call_message = llm.bind_tools([get_weather], tool_choice="required", parallel_tool_calls=False).invoke(ask)
    (call,) = call_message.tool_calls
    assert call["name"] == "get_weather" and set(call["args"]) == {"city"} and isinstance(call["args"]["city"], str)
    streamed = None
    for chunk in llm.bind_tools([get_weather], tool_choice="required", parallel_tool_calls=False).stream(ask):
        streamed = chunk if streamed is None else streamed + chunk
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == [(call["name"], call["args"])]
    result = get_weather.invoke(call)
    assert isinstance(result, ToolMessage) and result.tool_call_id == call["id"]
    # "none": the tiny model, shown its call, calls again under "auto"; the result is in the prompt either way
    unaided = llm.bind_tools([get_weather], tool_choice="none")
    answer = unaided.invoke(ask + [call_message, result])
    assert not answer.tool_calls and answer.content.strip()
    assert answer.usage_metadata["input_tokens"] > unaided.invoke(ask).usage_metadata["input_tokens"] + 20


@pytest.fixture(scope="module")
def tool_server(tiny_ir, tmp_path_factory):
    folder = write_tiny_llama(tiny_ir["gguf"], tmp_path_factory.mktemp("tiny-tools") / "tiny-qwen-tools",
                              chat_template=QWEN25_TEMPLATE)
    with ServerProcess(["--model", str(folder), "--n-ctx", "1024"]) as process:
        yield process


def test_bound_tools_come_back_as_tool_calls(tool_server):
    from langchain_core.tools import tool

    @tool
    def get_weather(city: Literal["Paris", "Rome"], days: Annotated[int, Field(ge=1, le=7)]) -> str:
        """The weather in a city over the next days."""
        return "sunny"

    # strict: no properties besides the function's (a random model would otherwise write a key of its own forever)
    llm = _chat(tool_server, temperature=0, max_tokens=60).bind_tools([get_weather], tool_choice="required",
                                                                      parallel_tool_calls=False, strict=True)
    message = llm.invoke("What is the weather in Paris for three days?")
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and set(call["args"]) == {"city", "days"}
    assert call["args"]["city"] in ("Paris", "Rome") and 1 <= call["args"]["days"] <= 7
    streamed = None
    for chunk in llm.stream("What is the weather in Paris for three days?"):
        streamed = chunk if streamed is None else streamed + chunk
    assert [c["name"] for c in streamed.tool_calls] == ["get_weather"]
