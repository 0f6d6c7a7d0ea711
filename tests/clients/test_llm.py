"""Simon Willison's ``llm`` against ``specchat serve`` on the default model, set up as its documentation says for an
OpenAI-compatible server (a model in ``extra-openai-models.yaml`` under ``LLM_USER_PATH``): the command line
streamed and not, with a system prompt and a continued conversation; through its Python API, structured output
(a schema), tools under the server's default (``auto``: the model answers in text), and a tool round trip against a
server started with ``--tool-choice-default call-then-answer`` (llm 0.36 sends no ``tool_choice`` and has no option
or extra body field that could: its options model forbids unknown keys)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_process import ServerProcess

llm = pytest.importorskip("llm", reason="comes with the test extra: pip install -e '.[test]'")

LLM = Path(sys.executable).with_name("llm")


def use_server(url: str, folder: Path, monkeypatch) -> Path:
    """Make ``folder`` the ``LLM_USER_PATH`` whose only extra model, ``specchat``, is the server at ``url``, with
    schemas and tools on; returns it."""
    (folder / "extra-openai-models.yaml").write_text(
        f"- model_id: specchat\n  model_name: specchat\n  api_base: {url}\n"
        "  supports_schema: true\n  supports_tools: true\n")
    monkeypatch.setenv("LLM_USER_PATH", str(folder))
    return folder


@pytest.fixture
def user_dir(server, tmp_path, monkeypatch) -> Path:
    return use_server(server.url, tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def calling_server(data_dir, int4_dir):
    """A server whose requests without ``tool_choice`` call a tool, then answer from its result, and whose request
    log keeps each request's last message."""
    with ServerProcess(["--tool-choice-default", "call-then-answer", "--log-prompts"]) as process:
        yield process


def run_llm(*args: str) -> str:
    command = [str(LLM) if LLM.exists() else shutil.which("llm"), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_command_line_streamed_and_not_with_a_system_prompt_and_a_continued_chat(user_dir):
    answer = run_llm("-m", "specchat", "-s", "Answer in one word.", "-o", "temperature", "0", "-o", "max_tokens",
                     "20", "What is the capital of France?")
    assert "Paris" in answer
    same = run_llm("-m", "specchat", "--no-stream", "-s", "Answer in one word.", "-o", "temperature", "0", "-o",
                   "max_tokens", "20", "What is the capital of France?")
    assert same == answer  # greedy: streamed and whole replies are the same text
    follow_up = run_llm("-c", "-o", "temperature", "0", "-o", "max_tokens", "30", "And of Italy?")
    assert "Rome" in follow_up
    logged = json.loads(run_llm("logs", "-n", "1", "--json"))
    assert logged[0]["prompt"] == "And of Italy?" and logged[0]["model"] == "specchat"


def test_structured_output_with_a_schema(user_dir):
    model = llm.get_model("specchat")
    response = model.prompt("What is the capital of France?", schema=llm.schema_dsl("country, capital"),
                            temperature=0, max_tokens=60)
    capital = json.loads(response.text())
    assert set(capital) == {"country", "capital"} and "Paris" in capital["capital"]


def test_tools_are_offered_and_a_text_answer_ends_the_chain(user_dir):
    """Under the server's default, llm's tools without a ``tool_choice`` mean "auto", and the default model then
    answers "What is the weather in Paris?" in text, so the chain is one response without calls (it answered all of
    ten such requests in text, greedy and sampled: ``bench/tool_call_rate.py``; no prompt wording tried made it
    call, and llama-server's all-JSON reply made it call for small talk too, README's Tools)."""
    asked = []

    def get_weather(city: str) -> str:
        """The weather in a city today."""
        asked.append(city)
        return f"Sunny in {city}, 24 C."

    chain = llm.get_model("specchat").chain("What is the weather in Paris?", tools=[get_weather],
                                            options={"temperature": 0, "max_tokens": 60})
    responses = list(chain.responses())  # each walk of the chain runs it anew: walked once
    assert len(responses) == 1 and responses[0].tool_calls() == [] and asked == []
    assert "Paris" in responses[0].text()
    assert responses[0].prompt.tools[0].name == "get_weather"


def _logged_prompts(server: ServerProcess, count: int) -> list[str]:
    """The prompts (last messages) of the server's first ``count`` chat requests, from its request log (a line is
    written once its response has ended: waited for up to 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in list(server.stderr_lines) if " POST /v1/chat/completions 200 " in line]
        if len(lines) >= count or time.monotonic() > deadline:
            return [json.loads(line.split(" prompt=", 1)[1]) for line in lines[:count]]
        time.sleep(0.1)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_tool_round_trip_on_a_server_that_calls_then_answers(calling_server, tmp_path, monkeypatch, stream):
    """llm's chain: the first request (tools, no ``tool_choice``, the user's question last) gets ``required``, so the
    model calls ``get_weather`` with the city asked about (greedy: "Paris" leads its rivals by 4.7 nats of
    log-probability, the quote that opens it by 1.3); llm runs the tool and sends its result back as a ``tool``
    message; that second request gets ``none``, so the model answers in text and the chain ends. (The model lists
    a second call of its own after the first, for another city, and whether a third follows is a near-tie (0.2
    nats): only the first call's arguments are checked, and ``max_tokens`` leaves room for more calls.)"""
    use_server(calling_server.url, tmp_path, monkeypatch)
    calling_server.stderr_lines.clear()
    asked = []

    def get_weather(city: str) -> str:
        """The weather in a city today."""
        asked.append(city)
        return f"Sunny in {city}, 24 C."

    chain = llm.get_model("specchat").chain("What is the weather in Paris?", tools=[get_weather], stream=stream,
                                            options={"temperature": 0, "max_tokens": 200})
    first, second = chain.responses()  # a call, then the answer: two responses (a walk of the chain runs it anew)
    calls = first.tool_calls()
    assert calls and all(call.name == "get_weather" for call in calls)
    assert calls[0].arguments == {"city": "Paris"} and asked == [call.arguments["city"] for call in calls]
    results = second.prompt.tool_results
    assert [result.tool_call_id for result in results] == [call.tool_call_id for call in calls]
    assert [result.output for result in results] == [f"Sunny in {city}, 24 C." for city in asked]
    assert second.tool_calls() == [] and second.text().strip()
    # what the server received: the question, then (last in the second request) the last call's result
    assert _logged_prompts(calling_server, 2) == ["What is the weather in Paris?", f"Sunny in {asked[-1]}, 24 C."]
