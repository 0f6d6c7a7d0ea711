"""One temperature range, [0, 2] (OpenAI's), with one message, wherever a temperature is set: the engine's
settings, the window's field, ``specchat generate`` and ``serve`` flags, and a server request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.commands import flag_error
from app.gui.settings_store import AppSettings
from app.server.chat_request import ChatCompletionRequest, chat_request
from app.server.errors import APIError
from app.server.request_common import ServerLimits, parse
from inference.settings import MAX_TEMPERATURE, GenerationSettings, SamplingSettings, SettingError

REPO = Path(__file__).resolve().parents[1]
MESSAGE = "temperature must be in [0, 2] (0 = greedy; OpenAI's range), got 5"


def test_the_engine_takes_0_to_2_and_says_so():
    assert MAX_TEMPERATURE == 2.0
    SamplingSettings(temperature=2.0).validate()
    with pytest.raises(SettingError) as refused:
        SamplingSettings(temperature=5.0).validate()
    assert (refused.value.field, str(refused.value)) == ("temperature", MESSAGE)
    assert flag_error(refused.value) == "--" + MESSAGE


def test_the_window_flags_a_temperature_past_2_with_the_same_words():
    assert AppSettings().with_values(temperature=5.0).field_errors(8192)["temperature"] == MESSAGE
    assert "temperature" not in AppSettings().with_values(temperature=2.0).field_errors(8192)


def test_a_request_past_2_gets_the_same_words():
    body = parse(ChatCompletionRequest, b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "temperature": 5}')
    with pytest.raises(APIError) as refused:
        chat_request(body, ServerLimits(GenerationSettings()))
    assert (refused.value.status, refused.value.param, refused.value.message) == (400, "temperature", MESSAGE)


@pytest.mark.parametrize("command", [["generate", "Hi"], ["serve"], ["chat"]])
def test_the_command_line_refuses_a_temperature_past_2_before_loading(command, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path), *command, "--temperature", "5"], cwd=REPO,
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2 and "--" + MESSAGE in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "models").exists()
