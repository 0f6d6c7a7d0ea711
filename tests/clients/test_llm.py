"""Simon Willison's ``llm`` against ``specchat serve`` on the default model, set up as its documentation says for an
OpenAI-compatible server (a model in ``extra-openai-models.yaml`` under ``LLM_USER_PATH``): the command line
streamed and not, with a system prompt and a continued conversation; through its Python API, structured output
(a schema) and tools offered to the model (llm cannot ask for a call: see the last test)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

llm = pytest.importorskip("llm", reason="comes with the test extra: pip install -e '.[test]'")

LLM = Path(sys.executable).with_name("llm")


@pytest.fixture
def user_dir(server, tmp_path, monkeypatch) -> Path:
    """An ``LLM_USER_PATH`` whose only extra model, ``specchat``, is the server, with schemas and tools on."""
    (tmp_path / "extra-openai-models.yaml").write_text(
        f"- model_id: specchat\n  model_name: specchat\n  api_base: {server.url}\n"
        "  supports_schema: true\n  supports_tools: true\n")
    monkeypatch.setenv("LLM_USER_PATH", str(tmp_path))
    return tmp_path


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
    """llm sends tools without a ``tool_choice`` (so "auto", and it has no option to ask for one): the default model
    then answers "What is the weather in Paris?" in text, so the chain is one response without calls (it answered
    all of ten such requests in text, greedy and sampled: ``bench/tool_call_rate.py``; no prompt wording tried made
    it call, and llama-server's all-JSON reply made it call for small talk too, README's Tools). The server takes the tools as given (no ``tools_unsupported``); calls and their results sent back are
    tested through the clients that can ask for a call (``tests/test_clients.py``, ``tests/test_server_tools.py``)."""
    asked = []

    def get_weather(city: str) -> str:
        """The weather in a city today."""
        asked.append(city)
        return f"Sunny in {city}, 24 C."

    chain = llm.get_model("specchat").chain("What is the weather in Paris?", tools=[get_weather],
                                            options={"temperature": 0, "max_tokens": 60})
    answer = chain.text()
    responses = list(chain.responses())
    assert len(responses) == 1 and responses[0].tool_calls() == [] and asked == []
    assert "Paris" in answer
    assert responses[0].prompt.tools[0].name == "get_weather"
