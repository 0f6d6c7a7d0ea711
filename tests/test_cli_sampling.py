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
