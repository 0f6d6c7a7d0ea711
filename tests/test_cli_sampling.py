"""The command line's sampling options: penalties reach the engine settings, greedy stays the default."""

import pytest

from app.cli.commands import _settings, build_parser
from inference.settings import SettingError


def test_penalty_flags_reach_the_sampling_settings():
    args = build_parser().parse_args(
        ["generate", "hi", "--temperature", "0.7", "--repeat-penalty", "1.1", "--repeat-last-n", "32",
         "--presence-penalty", "0.5", "--frequency-penalty", "-0.25"]
    )
    sampling = _settings(args, "ar").sampling
    assert (sampling.repetition_penalty, sampling.repeat_last_n) == (1.1, 32)
    assert (sampling.presence_penalty, sampling.frequency_penalty) == (0.5, -0.25)


def test_the_command_line_defaults_to_greedy_without_penalties():
    sampling = _settings(build_parser().parse_args(["generate", "hi"]), "ar").sampling
    assert sampling.greedy and not sampling.penalized


def test_an_out_of_range_penalty_names_the_setting():
    with pytest.raises(SettingError, match=r"presence_penalty must be in \[-2, 2\]"):
        _settings(build_parser().parse_args(["generate", "hi", "--presence-penalty", "3"]), "ar")


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"]])
def test_min_p_reaches_the_sampling_settings_as_specchat_serve_s_does(command):
    """``specchat serve`` took --min-p and ``generate``/``chat`` refused it (newcomer trial): all three take it."""
    sampling = _settings(build_parser().parse_args([*command, "--temperature", "0.7", "--min-p", "0.05"]), "ar").sampling
    assert sampling.min_p == 0.05
    assert _settings(build_parser().parse_args(command), "ar").sampling.min_p == 0.0
    with pytest.raises(SettingError, match=r"min_p must be in \[0, 1\]"):
        _settings(build_parser().parse_args([*command, "--min-p", "1.5"]), "ar")


@pytest.mark.parametrize("command", [["generate", "hi"], ["chat"]])
def test_top_k_minus_one_is_off_as_the_server_takes_it(command):
    """Trial: `generate Hi --top-k -1` was refused ("--top-k must be >= 0 (0 = disabled), got -1"), where the server
    takes top_k -1 as off (llama-server's and vLLM's word for it): -1 is 0 on both, and the range is said alike."""
    from app.cli.commands import flag_error
    from app.server.chat_request import ChatCompletionRequest, chat_request
    from app.server.request_common import ServerLimits, parse

    sampling = _settings(build_parser().parse_args([*command, "--temperature", "0.7", "--top-k", "-1"]), "ar").sampling
    body = b'{"messages": [{"role": "user", "content": "hi"}], "top_k": -1}'
    served = chat_request(parse(ChatCompletionRequest, body), ServerLimits(_settings(build_parser().parse_args(command), "ar")))
    assert sampling.top_k == served.settings.sampling.top_k == 0
    with pytest.raises(SettingError) as refused:
        _settings(build_parser().parse_args([*command, "--top-k", "-5"]), "ar")
    assert flag_error(refused.value) == "--top-k must be >= 0 (0 or -1 = disabled), got -5"


def test_serve_top_k_minus_one_is_off_for_the_requests_too():
    """`serve --top-k -1` sets the requests' default top-k off, as a request's top_k -1 does."""
    from app.cli.serve import sampling_flags

    assert sampling_flags(build_parser().parse_args(["serve", "--top-k", "-1"])) == {"top_k": 0}
    with pytest.raises(ValueError, match=r"^--top-k must be >= 0 \(0 or -1 = disabled\), got -5$"):
        sampling_flags(build_parser().parse_args(["serve", "--top-k", "-5"]))
