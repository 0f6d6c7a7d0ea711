"""The specchat command line, run as a user would (a subprocess), on the default model."""

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from inference.devices import device_computes
from inference.models.default_model import default_model_dir
from inference.settings import SettingError


def _specchat(*args, data_dir, timeout=300):
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_generate_json_one_mode(int4_dir, data_dir):
    result = _specchat("generate", "What is the capital of France?", "--json", "--max-new-tokens", "24", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert set(out) == {
        "mode", "drafter", "drafters", "k_steps", "text", "new_tokens", "ttft_ms", "tokens_per_s", "acceptance_rate",
        "discarded_tokens", "system_prompt_dropped", "fast_prefilled_tokens", "precision",
    }
    assert out["precision"]["exact"] is True and out["precision"]["inference"] == "f32"
    assert out["mode"] == "auto" and "Paris" in out["text"]  # Auto is the default decoding
    assert 1 <= out["new_tokens"] <= 24 and out["ttft_ms"] > 0
    # what Auto did adds up: every step is counted once per drafter and once per K, plain steps being K 0
    drafters, k_steps = out["drafters"], {int(k): n for k, n in out["k_steps"].items()}
    assert set(drafters) <= {"plain", "head", "model", "lookup"}
    assert sum(use["steps"] for use in drafters.values()) == sum(k_steps.values()) >= 1
    assert k_steps.get(0, 0) == drafters.get("plain", {"steps": 0})["steps"]
    drafted = sum(use["drafted"] for use in drafters.values())
    accepted = sum(use["accepted"] for use in drafters.values())
    assert drafted == sum(k * n for k, n in k_steps.items())
    assert out["acceptance_rate"] == (accepted / drafted if drafted else None)
    ranked = [(use["accepted"], use["steps"], name) for name, use in drafters.items() if name != "plain" and use["accepted"]]
    assert out["drafter"] == (max(ranked)[2] if ranked else None)  # the drafter of most accepted drafts, if any


def test_generate_compare_greedy_is_identical(int4_dir, data_dir):
    """Compare's two greedy replies are the same text, and the speculative side's counts add up. Whether Auto drafts
    at all in this 9-token reply follows measured times (a step that changes the pass width is charged half the
    measured price of the change, 17 ms on a loaded 2-core Xeon against 25 ms a pass, and short lookup matches do not
    pay that), so it is not asserted here: ``test_auto_decoding`` checks the choices on given costs."""
    result = _specchat(
        "generate", "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox.",
        "--mode", "compare", "--draft", "lookup", "--k", "3", "--json", "--max-new-tokens", "32", data_dir=data_dir,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    ar, spec = out["autoregressive"], out["speculative"]
    assert out["identical"] is True and out["first_difference"] is None
    assert ar["text"] == spec["text"] and ar["new_tokens"] == spec["new_tokens"] >= 1
    assert set(ar["drafters"]) == {"plain"} and ar["drafters"]["plain"]["drafted"] == 0
    assert ar["acceptance_rate"] is None
    drafted = sum(use["drafted"] for use in spec["drafters"].values())
    accepted = sum(use["accepted"] for use in spec["drafters"].values())
    assert set(spec["drafters"]) <= {"plain", "lookup"} and 0 <= accepted <= drafted
    assert spec["acceptance_rate"] == (accepted / drafted if drafted else None)
    assert sum(use["steps"] for use in spec["drafters"].values()) <= spec["new_tokens"]
    _assert_speedup_is_the_ratio_of_the_rates(out)


def _assert_speedup_is_the_ratio_of_the_rates(out: dict) -> None:
    """The JSON ``speedup`` is the speculative run's decode rate over the autoregressive run's (all three rounded
    to 3 decimals), each rate a real one."""
    ar, spec = out["autoregressive"]["tokens_per_s"], out["speculative"]["tokens_per_s"]
    assert ar > 0 and spec > 0, out
    assert out["speedup"] == pytest.approx(spec / ar, abs=1e-3), out


def test_streaming_output_and_statistics_on_stderr(int4_dir, data_dir):
    result = _specchat("generate", "Say hello.", "--max-new-tokens", "8", "--n-ctx", "32", "--n-keep", "4", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "tokens/s" in result.stderr and "TTFT" in result.stderr and "rolls" in result.stderr
    assert "precision: f32, KV cache f32, no dynamic quantization (exact)" in result.stderr


def test_compare_explains_a_greedy_difference(int4_dir, data_dir):
    """With the device's own u8 KV cache the two pass shapes round differently; wherever the texts then differ,
    the first difference comes with the gap and the noise bound measured there, and it must be a near-tie."""
    result = _specchat(
        "generate", "Tell me a story about a dragon.", "--mode", "compare", "--draft", "lookup", "--json",
        "--kv-cache-precision", "u8", "--max-new-tokens", "96", data_dir=data_dir,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["precision"]["kv_cache"] == "u8" and out["precision"]["exact"] is False
    _assert_speedup_is_the_ratio_of_the_rates(out)
    texts = out["autoregressive"]["text"], out["speculative"]["text"]
    assert out["identical"] is (texts[0] == texts[1]), texts  # (greedy: the same tokens give the same text)
    if out["identical"]:
        assert out["first_difference"] is None
    else:
        difference = out["first_difference"]
        assert set(difference) == {"token", "top2_gap", "noise_bound", "near_tie"}
        assert difference["near_tie"] is True and 0 <= difference["top2_gap"] <= difference["noise_bound"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--k", "0", "--mode", "spec"], "--k: K (draft tokens per step) must be in [1, 16]"),
        (["--n-ctx", "64", "--n-keep", "64"], "error: --n-keep must be"),
        (["--model", "/nonexistent/model"], "does not exist"),
    ],
)
def test_bad_settings_exit_2_with_a_clear_message(int4_dir, data_dir, args, message):
    result = _specchat("generate", "Hi", *args, data_dir=data_dir)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_precision_the_cpu_lacks_exits_2_and_names_it(int4_dir, data_dir):
    missing = [p for p in ("bf16", "f16") if not device_computes("CPU", p)]
    if not missing:
        pytest.skip("this CPU computes bf16 and f16 natively")
    result = _specchat("generate", "Hi", "--precision", missing[0], data_dir=data_dir)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"inference precision {missing[0]} is not native on CPU" in result.stderr and "choose auto or f32" in result.stderr


def test_models_list_shows_the_default_model(int4_dir, data_dir):
    from inference.models.default_head import ensure_default_head

    head_dir = ensure_default_head()  # installed with the default model
    result = _specchat("models", "list", data_dir=data_dir)
    assert result.returncode == 0
    assert str(default_model_dir(4)) in result.stdout and "4-bit" in result.stdout
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "USE", "BITS"]
    use, bits = header.index("USE"), header.index("BITS")  # the columns are aligned under their names
    uses = {row.split()[0]: row[use:bits].strip() for row in rows}  # a chat model, or a draft head (drafts only)
    assert uses[default_model_dir(4).name] == "chat"
    assert uses[head_dir.name] == "draft head for SmolLM2-135M-Instruct"


def test_version_and_the_folder_options_work_before_any_subcommand(tmp_path):
    """``--version``, ``--data-dir`` and ``--config-dir`` are options of the one entry point (the window's and the
    command line's alike); the data folder ``--data-dir`` names wins over ``SPECCHAT_DATA_DIR``."""
    from app import __version__

    version = subprocess.run([sys.executable, "-m", "app", "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"specchat {__version__}"
    chosen, environment = tmp_path / "chosen", tmp_path / "environment"
    (chosen / "models" / "probe").mkdir(parents=True)
    (chosen / "models" / "probe" / "specchat_manifest.json").write_text(json.dumps({"name": "probe", "bits": 4}))
    options = ("--data-dir", str(chosen), "--config-dir", str(tmp_path / "config"))
    listed = _specchat(*options, "models", "list", "--json", data_dir=environment)
    assert listed.returncode == 0, listed.stderr
    assert [model["name"] for model in json.loads(listed.stdout)] == ["probe"]
    assert json.loads(_specchat("models", "list", "--json", data_dir=environment).stdout) == []
    after = _specchat("models", "list", "--json", "--data-dir", str(chosen), data_dir=environment)  # after the subcommand
    assert [model["name"] for model in json.loads(after.stdout)] == ["probe"]
    removed = _specchat(*options, "models", "remove", "nothing-here", data_dir=environment)
    assert removed.returncode == 2 and "nothing-here" in removed.stderr and "Traceback" not in removed.stderr


def test_models_remove_asks_first_and_without_a_terminal_needs_yes(tmp_path):
    """The README's `specchat models remove NAME` asks first; with no terminal to ask at (a script, a pipe) it
    refuses and names --yes, the model kept; with --yes it removes it."""
    (tmp_path / "models" / "probe").mkdir(parents=True)
    (tmp_path / "models" / "probe" / "specchat_manifest.json").write_text(json.dumps({"name": "probe", "bits": 4}))
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path)}
    refused = subprocess.run([sys.executable, "-m", "app", "models", "remove", "probe"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert refused.returncode == 2 and "without confirmation; pass --yes" in refused.stderr
    assert (tmp_path / "models" / "probe").is_dir()
    removed = _specchat("models", "remove", "probe", "--yes", data_dir=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert not (tmp_path / "models" / "probe").exists()


@pytest.mark.parametrize("args", [["generate", "hi"], ["models", "list"], ["serve"]])
def test_a_data_folder_that_is_a_file_is_one_line_not_a_traceback(tmp_path, args):
    """Not "no models installed" (models list), nor an OSError deep in a fetch: the folder option is wrong."""
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    result = _specchat(*args, "--data-dir", str(not_a_folder), data_dir=tmp_path / "unused")
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"error: the data folder {not_a_folder} (--data-dir or $SPECCHAT_DATA_DIR) is a file: give a folder (created if missing)"
    ]
    config = _specchat("--config-dir", str(not_a_folder), *args, data_dir=tmp_path / "unused")
    assert config.returncode == 2 and "the config folder" in config.stderr and "Traceback" not in config.stderr


def test_seed_minus_one_is_a_random_seed_as_in_llama_cpp():
    from app.cli.commands import _settings, build_parser

    assert _settings(build_parser().parse_args(["generate", "hi", "--seed", "-1"]), "ar").sampling.seed is None
    assert _settings(build_parser().parse_args(["generate", "hi", "--seed", "7"]), "ar").sampling.seed == 7
    result = subprocess.run([sys.executable, "-m", "app", "generate", "hi", "--seed", "x"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "argument --seed: must be an integer (-1 = random), got 'x'" in result.stderr


def test_a_seed_out_of_range_is_told_that_minus_one_is_random():
    """Newcomer trial: a huge --seed was answered "--seed must be in [0, 2^63), got ...", leaving out the -1 taken as
    a random seed."""
    from app.cli.commands import _settings, build_parser, flag_error

    with pytest.raises(SettingError) as refused:
        _settings(build_parser().parse_args(["generate", "hi", "--seed", str(2**63)]), "ar")
    assert flag_error(refused.value) == f"--seed must be -1 (random) or in [0, 2^63), got {2**63}"


@pytest.mark.parametrize("args, line", [
    (["serve", "--port", "abc"], "specchat serve: error: argument --port: invalid int value: 'abc' (see specchat serve --help)"),
    (["generate", "--bits", "3", "Hi"], "specchat generate: error: argument --bits: invalid choice: 3 (choose from 4, 8, 16) "
                                         "(see specchat generate --help)"),
    # newcomer trial: an extra argument was sent to "specchat --help", which does not list the subcommand's options
    (["chat", "extra-arg"], "specchat chat: error: unrecognized arguments: extra-arg (see specchat chat --help)"),
    (["models", "list", "x", "--nope"], "specchat models list: error: unrecognized arguments: x --nope (see specchat "
                                        "models list --help)"),
    (["--nope"], "specchat: error: unrecognized arguments: --nope (see specchat --help)"),
])  # fmt: skip
def test_a_malformed_command_line_is_one_line_too(args, line):
    result = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.splitlines() == [line]  # no 20-line usage block first


@pytest.mark.parametrize("args, line", [
    (["generate", "Hi", "--draft-max", "8"], "specchat generate: error: unrecognized arguments: --draft-max 8; "
                                             "llama.cpp's --draft-max is --k here (see specchat generate --help)"),
    (["serve", "-md", "SmolLM2-135M-Instruct-int8"], "specchat serve: error: unrecognized arguments: -md "
     "SmolLM2-135M-Instruct-int8; llama.cpp's -md is --draft here (see specchat serve --help)"),
    (["chat", "--ctx-size=512"], "specchat chat: error: unrecognized arguments: --ctx-size=512; llama.cpp's "
                                 "--ctx-size is --n-ctx here (see specchat chat --help)"),
    (["generate", "Hi", "-c", "512", "-n", "16"], "specchat generate: error: unrecognized arguments: -c 512 -n 16; "
     "llama.cpp's -c is --n-ctx here, llama.cpp's -n is --max-new-tokens here (see specchat generate --help)"),
    (["generate", "Hi", "--draft-min", "2"], "specchat generate: error: unrecognized arguments: --draft-min 2; "
     "llama.cpp's --draft-min has no equivalent here: --mode auto (the default) and --adaptive-k choose K each step "
     "(see specchat generate --help)"),
])  # fmt: skip
def test_llama_cpps_names_of_the_decoding_options_are_answered_with_specchats(args, line):
    """A llama.cpp user's `generate Hi --draft-max 8`, `-md DRAFT`, `-c 512`, `-n 16` were "unrecognized arguments"
    and nothing more: the refusal names SpecChat's option for each llama.cpp name it knows."""
    result = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.splitlines() == [line]


def test_the_statistics_line_says_the_largest_k_drafted_not_the_last_steps():
    """A newcomer read "K 0" after `--mode spec --draft lookup --k 4`: the last step's K (lookup found nothing to
    copy there). A fixed mode's line says the largest K drafted; Auto's says K per drafter in its steps only."""
    from app.cli.statistics import describe
    from inference.events import GenerationStats

    fixed = GenerationStats(mode="spec", drafter="lookup", new_tokens=9)
    for drafted, accepted in ((4, 3), (2, 2), (0, 0)):
        fixed.count_step("lookup", 4, drafted, accepted, accepted + 1, speculative=True)
    assert ", drafts: 83% accepted (5/6), K up to 4," in describe(fixed) and "K 0" not in describe(fixed)
    auto = GenerationStats(mode="auto", drafter="head", new_tokens=4)
    auto.count_step("head", 2, 2, 1, 2, speculative=True)
    auto.count_step("plain", 0, 0, 0, 1, speculative=True)
    line = describe(auto)
    assert ", drafts: 50% accepted (1/2), steps: head 1 (K up to 2), plain 1," in line, line


def test_the_statistics_line_says_the_share_of_drafts_accepted_in_the_windows_words():
    """The line read "acceptance 75% (6/8)" and per drafter "(K up to 2, acceptance 50%)" where the window's footer
    reads "drafts: 75% accepted" ("all drafts: ..." where several drafters drafted, each one's share in Auto's
    steps; one drafter's share is the reply's, said once). ``--json`` keeps its keys."""
    from app.cli.statistics import describe, summary
    from inference.events import GenerationStats

    auto = GenerationStats(mode="auto", drafter="lookup", new_tokens=12)
    auto.count_step("head", 2, 2, 1, 2, speculative=True)
    auto.count_step("lookup", 4, 4, 4, 5, speculative=True)
    auto.count_step("lookup", 4, 2, 1, 2, speculative=True)
    auto.count_step("plain", 0, 0, 0, 1, speculative=True)
    line = describe(auto)
    assert ", all drafts: 75% accepted (6/8), steps: lookup 2 (K up to 4, 83% accepted), head 1 (K up to 2, " \
        "50% accepted), plain 1," in line, line
    assert "acceptance" not in line
    assert summary(auto)["acceptance_rate"] == 0.75


def test_the_statistics_line_of_a_one_token_reply_has_no_speed():
    """A newcomer read "[auto] 1 tokens, … 0.0 tokens/s, steps: none": one token has no decode interval to measure a
    speed over. Two tokens have one."""
    from app.cli.statistics import describe
    from inference.events import GenerationStats

    one = describe(GenerationStats(mode="auto", new_tokens=1, ttft_ms=41.0))
    assert one.startswith("[auto] 1 token, TTFT 41.0 ms, steps: none,") and "tokens/s" not in one, one
    two = describe(GenerationStats(mode="ar", new_tokens=2, ttft_ms=41.0, decode_tokens_per_s=20.0))
    assert two.startswith("[ar] 2 tokens, TTFT 41.0 ms, 20.0 tokens/s, prefilled"), two


def test_a_compare_whose_auto_run_drafted_nothing_claims_no_speedup():
    """A newcomer's `generate Hello --mode compare --temperature 0.8 --seed 1` printed "speedup 0.54x" where Auto
    took a plain step every time ("steps: plain 15"): both runs decoded plainly, and the ratio was the shared
    machine's load, read as Auto being twice as slow. The line says what the window's Compare says: no speedup,
    Auto decoded plainly, and the ratio as the machine's load; a run that drafted keeps its speedup."""
    from app.cli.statistics import speedup_text
    from inference.events import GenerationStats

    ar = GenerationStats(mode="ar", new_tokens=15, decode_tokens_per_s=45.2)
    plain = GenerationStats(mode="auto", new_tokens=15, decode_tokens_per_s=24.4)
    for _ in range(14):
        ar.count_step("plain", 0, 0, 0, 1, speculative=False)
        plain.count_step("plain", 0, 0, 0, 1, speculative=True)
    assert speedup_text(ar, plain, 24.4 / 45.2) == (
        "no speedup: Auto decoded plainly, drafts would not pay at these settings (the two plain runs' speeds "
        "0.54:1: the machine's load, not the decoding)")
    drafted = GenerationStats(mode="auto", drafter="head", new_tokens=15, decode_tokens_per_s=50.0)
    drafted.count_step("head", 2, 2, 0, 1, speculative=True)
    assert speedup_text(ar, drafted, 50.0 / 45.2) == "speedup 1.11x"


def test_the_statistics_line_counts_one_roll_in_the_singular():
    """Newcomer trial (``chat --n-ctx 256``, replies of 64 tokens): the third reply's line read "discarded 126
    (1 rolls)"."""
    from app.cli.statistics import describe
    from inference.events import GenerationStats

    one = describe(GenerationStats(mode="ar", new_tokens=2, ttft_ms=41.0, discarded_tokens=126, rolls=1))
    assert ", discarded 126 (1 roll), stop:" in one, one
    two = describe(GenerationStats(mode="ar", new_tokens=2, ttft_ms=41.0, discarded_tokens=252, rolls=2))
    assert ", discarded 252 (2 rolls), stop:" in two, two


def test_ctrl_c_during_generate_keeps_what_came_and_exits_130(int4_dir, data_dir):
    """A newcomer's script could not tell a reply Ctrl+C cut from a whole one: the command exited 0. It keeps what
    was generated and its statistics ("stop: cancelled"), and exits 130 (128 + SIGINT, as ``serve`` does)."""
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir)}
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "generate", "Write a long story about a lighthouse keeper.", "--mode", "ar",
         "--max-new-tokens", "400"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    first = process.stdout.read(1)  # the reply has begun streaming
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert first and "stop: cancelled" in err, err
    tokens = int(re.search(r"^\[\S+\] (\d+) tokens?", err, re.M).group(1))
    assert 1 <= tokens < 400, err


def test_ctrl_c_while_the_model_loads_prints_no_traceback_and_exits_130(monkeypatch, capsys):
    """Newcomer trial: Ctrl+C during `generate`'s or `chat`'s model load printed a KeyboardInterrupt traceback (from
    compile_model); `serve` said "stopped". Every command now does."""
    import argparse

    import app.cli.commands as commands

    def loading(args):
        raise KeyboardInterrupt

    for command in ("generate", "chat"):
        monkeypatch.setattr(commands, f"_{command}", loading)
        assert commands.run_command(argparse.Namespace(command=command)) == 130
        assert capsys.readouterr().err == "stopped\n"


def test_compare_warms_the_engine_up_before_either_measured_run(int4_dir, data_dir, monkeypatch, capsys):
    """Found by a newcomer: without it the autoregressive run, which goes first, paid OpenVINO's one-time work
    (TTFT 310 against 38 ms) and `--mode compare --draft lookup` reported 2.8x with no draft accepted."""
    import app.cli.commands as commands
    from inference.chat import ChatSession

    calls = []
    real_warm_up, real_send = commands.warm_up, ChatSession.send
    monkeypatch.setattr(commands, "warm_up", lambda engine: (calls.append("warm-up"), real_warm_up(engine))[1])
    monkeypatch.setattr(ChatSession, "send", lambda self, *a, **k: (calls.append("measured run"), real_send(self, *a, **k))[1])
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    for mode, expected in (("compare", ["warm-up", "measured run", "measured run"]), ("ar", ["measured run"])):
        calls.clear()
        args = commands.build_parser().parse_args(["generate", "Hi", "--mode", mode, "--draft", "lookup", "--json",
                                                   "--max-new-tokens", "4"])
        assert commands.run_command(args) == 0
        assert calls == expected
    _assert_speedup_is_the_ratio_of_the_rates(json.loads(capsys.readouterr().out.splitlines()[0]))
    # The same for people: the speedup line is the ratio of the two statistics lines' rates (1 and 2 decimals).
    args = commands.build_parser().parse_args(["generate", "Hi", "--mode", "compare", "--draft", "lookup",
                                               "--max-new-tokens", "4"])
    assert commands.run_command(args) == 0
    printed = capsys.readouterr()
    (ar_tokens, ar), (spec_tokens, spec) = (
        (int(tokens), float(rate))
        for tokens, rate in re.findall(r"^\[\S+\] (\d+) tokens, .*?, ([\d.]+) tokens/s", printed.err, re.M)
    )
    # (where Auto drafted nothing, lookup finding nothing to copy, the ratio is said as the machine's load)
    found = re.search(r"^(?:speedup ([\d.]+)x|no speedup: Auto decoded plainly, .* speeds ([\d.]+):1: the machine's "
                      r"load, not the decoding\)), identical: (True|False)$", printed.err, re.M)
    speedup, identical = found[1] or found[2], found[3]
    assert ar > 0 and abs(float(speedup) - spec / ar) <= 0.005 + spec / ar * (0.05 / spec + 0.05 / ar) + 1e-9, printed.err
    assert identical == "True" and ar_tokens == spec_tokens >= 1, printed.err  # greedy at the exact precision


def test_a_one_token_compare_claims_no_speedup(int4_dir, data_dir, monkeypatch, capsys):
    """A trial's `generate --mode compare --max-tokens 1` printed "speedup 0.00x": a 1-token reply has no decode
    speed, so there is no ratio to give. The line says why, and the JSON's speedup is null."""
    import app.cli.commands as commands

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    for extra in ((), ("--json",)):
        args = commands.build_parser().parse_args(["generate", "Hi", "--mode", "compare", "--max-tokens", "1", *extra])
        assert commands.run_command(args) == 0
        printed = capsys.readouterr()
        if extra:
            out = json.loads(printed.out)
            assert out["autoregressive"]["new_tokens"] == out["speculative"]["new_tokens"] == 1, out
            assert out["speedup"] is None and out["identical"] is True, out
        else:
            assert printed.err.splitlines()[-1] == ("no speedup to compare: plain decoding wrote 1 token and Auto 1 "
                                                    "token, and a decode speed needs 2 or more, identical: True"), printed.err


def test_the_json_of_a_one_token_reply_has_no_speed(int4_dir, data_dir, monkeypatch, capsys):
    """`generate --json --max-tokens 1` gave "tokens_per_s": 0.0, where the statistics line prints "1 token" and no
    speed (one token has no interval between tokens to measure it over): null, as a one-token compare's speedup."""
    import app.cli.commands as commands

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    for mode in ("auto", "compare"):
        args = commands.build_parser().parse_args(["generate", "Hi", "--mode", mode, "--max-tokens", "1", "--json"])
        assert commands.run_command(args) == 0
        out = json.loads(capsys.readouterr().out)
        for run in [out] if mode == "auto" else [out["autoregressive"], out["speculative"]]:
            assert run["new_tokens"] == 1 and run["tokens_per_s"] is None and run["ttft_ms"] > 0, run


def test_a_compare_printed_for_people_heads_each_text_on_stdout(int4_dir, data_dir):
    """A newcomer piped `generate --mode compare` and got both replies back to back: the headings that separate them
    went to stderr only."""
    result = _specchat("generate", "Say hello.", "--mode", "compare", "--max-new-tokens", "6", data_dir=data_dir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "--- autoregressive" and "--- auto" in lines[1:], lines
    first, second = result.stdout.split("--- auto\n")[0], result.stdout.split("--- auto\n")[1]
    assert first.removeprefix("--- autoregressive\n").strip() and second.strip()  # a text under each heading


def test_the_tokens_of_plain_steps_are_counted_in_a_fixed_k_reply_as_in_auto():
    """A fixed K's steps where prompt lookup found nothing to copy are plain steps (``drafters.plain``): their
    tokens count in ``fallback_tokens``, which the server reports and the CLI prints as "tokens by plain steps"
    (they counted only where Auto chose K 0, so a server's spec_lookup reply of 59 plain steps said 0); an
    autoregressive reply has none."""
    from app.cli.statistics import describe
    from inference.events import GenerationStats

    fixed = GenerationStats(mode="spec", drafter="lookup", new_tokens=7)
    for drafted, accepted, emitted in ((0, 0, 1), (4, 3, 4), (0, 0, 1), (0, 0, 0)):  # the last step hit EOS
        fixed.count_step("lookup", 4, drafted, accepted, emitted, speculative=True)
    assert fixed.fallback_tokens == 2 and fixed.by_drafter["plain"].steps == 3
    assert ", K up to 4, 2 tokens by plain steps," in describe(fixed)
    plain = GenerationStats(mode="ar", new_tokens=2)
    for _ in range(2):
        plain.count_step("plain", 0, 0, 0, 1, speculative=False)
    assert plain.fallback_tokens == 0 and "plain steps" not in describe(plain)


def test_one_token_by_plain_steps_is_said_in_the_singular():
    """A newcomer's `--mode spec --draft <a draft model>` read "K up to 4, 1 tokens by plain steps"."""
    from app.cli.statistics import describe
    from inference.events import GenerationStats

    fixed = GenerationStats(mode="spec", drafter="model", new_tokens=8)
    fixed.count_step("model", 4, 4, 0, 1, speculative=True)
    fixed.count_step("model", 4, 0, 0, 1, speculative=True)
    assert fixed.fallback_tokens == 1
    assert ", K up to 4, 1 token by plain steps, prefilled" in describe(fixed), describe(fixed)
    for _ in range(1199):
        fixed.count_step("model", 4, 0, 0, 1, speculative=True)
    assert ", K up to 4, 1,200 tokens by plain steps, prefilled" in describe(fixed), describe(fixed)


def test_autos_label_names_the_drafter_whose_drafts_gave_the_most_tokens():
    """`[auto/head]` named the drafter of most steps: a head drafting 30 steps for 10 tokens beside prompt lookup
    copying 40 tokens in 5 steps was named, though lookup gave most. The label (and the server's ``drafter``) names
    the drafter of most accepted tokens; none when no draft was accepted."""
    from app.cli.statistics import describe
    from inference.events import GenerationStats

    auto = GenerationStats(mode="auto", new_tokens=86)
    for step in range(30):
        accepted = 1 if step < 10 else 0
        auto.count_step("head", 2, 2, accepted, accepted + 1, speculative=True)
    for _ in range(5):
        auto.count_step("lookup", 8, 8, 8, 9, speculative=True)
    auto.count_step("plain", 0, 0, 0, 1, speculative=True)
    assert auto.by_drafter["head"].steps == 30 and auto.by_drafter["head"].accepted == 10
    assert auto.most_accepted_drafter() == "lookup"
    auto.drafter = auto.most_accepted_drafter()
    assert describe(auto).startswith("[auto/lookup] 86 tokens")
    tried = GenerationStats(mode="auto")
    tried.count_step("lookup", 1, 1, 0, 1, speculative=True)
    tried.count_step("plain", 0, 0, 0, 1, speculative=True)
    assert tried.most_accepted_drafter() is None


@pytest.mark.parametrize("args", [["generate", "Why is the sky blue?", "--max-new-tokens", "8"], ["models", "list"]])
def test_output_whose_reader_left_is_no_data_folder_error(int4_dir, data_dir, args):
    """Newcomer trial: `specchat generate ... | head -c 600` ended with "error: Broken pipe: choose another folder
    with --data-dir" and status 2, as if the data folder were at fault. A reader that leaves (head, less quit early)
    now ends the command quietly with 141, as a shell reports a command that SIGPIPE ended."""
    reader, writer = os.pipe()
    os.close(reader)  # the reader has left before the first byte
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir)}
    try:
        result = subprocess.run([sys.executable, "-m", "app", *args], stdout=writer, stderr=subprocess.PIPE,
                                text=True, env=env, timeout=300)
    finally:
        os.close(writer)
    assert result.returncode == 141, result.stderr
    assert "data-dir" not in result.stderr and "Broken pipe" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [["generate", "Hi"], ["chat"], ["serve", "--port", "0"]])
def test_an_n_ctx_past_the_models_length_is_refused_before_any_model_loads(int4_dir, data_dir, monkeypatch, capsys, command):
    """A README trial: `specchat serve --n-ctx 100000` printed "loading ..." and only after the model loaded
    "error: --n-ctx must be in [16, 8192]"; `chat` took the first message before saying it. The model's length is
    in its config.json: refused before anything loads, the message saying that the bound is this model's."""
    import app.cli.commands as commands
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    assert commands.run_command(commands.build_parser().parse_args([*command, "--n-ctx", "100000"])) == 2
    err = capsys.readouterr().err
    assert "loading" not in err
    assert err.splitlines()[-1] == (
        "error: --n-ctx must be in [16, 8192], got 100000: SmolLM2-135M-Instruct-int4 reads at most 8192 tokens")


def test_the_default_n_ctx_shrinks_to_a_shorter_models_length_and_a_given_one_is_refused(tmp_path):
    """A model trained on fewer tokens than the default n_ctx (4096; e.g. 2048) was refused unless --n-ctx was given,
    for a value the user never chose: the default shrinks to the model's length, as the window's Context length box
    does, and only a value given past it is refused."""
    from app.backends.worker import ModelSpec
    from app.cli.options import CONTEXT, fit_n_ctx
    from inference.precision import PrecisionSettings
    from inference.settings import GenerationSettings

    folder = tmp_path / "short-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    spec = ModelSpec(folder, "CPU", None, "CPU", PrecisionSettings(), None)
    default = GenerationSettings()
    assert default.context.n_ctx == CONTEXT.n_ctx == 4096
    assert fit_n_ctx(default, spec, given=False).context.n_ctx == 2048
    with pytest.raises(ValueError, match=r"--n-ctx must be in \[16, 2048\], got 4096: short-model reads at most 2048"):
        fit_n_ctx(default, spec, given=True)
    fitting = replace(default, context=replace(default.context, n_ctx=1024))
    assert fit_n_ctx(fitting, spec, given=True) is fitting
    too_many_kept = replace(default, context=replace(default.context, n_keep=3000))
    with pytest.raises(SettingError, match="n_keep"):
        fit_n_ctx(too_many_kept, spec, given=False)


def test_a_draft_models_shorter_window_is_checked_before_loading_and_a_draft_head_is_not(tmp_path):
    """The early --n-ctx check read the target's config.json only: a draft model attending to a smaller sliding
    window was refused only once both models had loaded, with the engine's "n_ctx must be in [16, 1024] for ...". Its
    window is checked before loading too, the message naming the draft; its trained length is no bound (the engine
    and the window run a draft past it), and a draft head has none (it follows the target)."""
    from app.backends.worker import ModelSpec
    from app.cli.options import fit_n_ctx
    from inference.draft_head import HEAD_MANIFEST
    from inference.precision import PrecisionSettings
    from inference.settings import GenerationSettings

    def folder(name, config):
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        return path

    target = folder("long-model", {"max_position_embeddings": 8192})
    windowed = folder("windowed-draft", {"max_position_embeddings": 8192, "sliding_window": 1024})
    short = folder("short-draft", {"max_position_embeddings": 2048})
    default = GenerationSettings()
    spec = ModelSpec(target, "CPU", windowed, "CPU", PrecisionSettings(), None)
    assert fit_n_ctx(default, spec, given=False).context.n_ctx == 1024  # the default fits the draft's window too
    with pytest.raises(ValueError, match=r"^--n-ctx must be in \[16, 1024\], got 4096: the draft model "
                                         r"windowed-draft reads at most 1024 tokens$"):
        fit_n_ctx(default, spec, given=True)
    spec = ModelSpec(target, "CPU", short, "CPU", PrecisionSettings(), None)  # past its trained length a draft only
    assert fit_n_ctx(default, spec, given=True) is default  # drafts worse (the engine runs it; so does the window)
    head = folder("a-head", {"max_position_embeddings": 512})  # (a head's config: not a bound of n_ctx)
    (head / HEAD_MANIFEST).write_text("{}")
    spec = ModelSpec(target, "CPU", head, "CPU", PrecisionSettings(), None)
    assert fit_n_ctx(default, spec, given=True) is default
    assert fit_n_ctx(default, spec, given=False) is default


@pytest.mark.parametrize("k", ["0", "17"])
@pytest.mark.parametrize("mode", [[], ["--mode", "ar"], ["--mode", "spec", "--adaptive-k"]])
def test_serve_refuses_a_k_out_of_range_at_start_whatever_its_mode(int4_dir, data_dir, monkeypatch, capsys, k, mode):
    """A newcomer trial: `specchat serve --k 0` started (Auto, its default mode, chooses its own K), and then every
    request for `spec_lookup` without a `k` of its own got a 400 blaming the client: "specchat.k: K (draft tokens
    per step) must be in [1, 16], got 0", a `k` it never sent. serve keeps --k as the K of requests that ask a
    fixed mode, so it is checked at start, before any model loads, whatever --mode serves by default."""
    import app.cli.commands as commands
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    assert commands.run_command(commands.build_parser().parse_args(["serve", "--port", "0", "--k", k, *mode])) == 2
    err = capsys.readouterr().err
    assert "loading" not in err
    assert err.splitlines()[-1] == f"error: --k: K (draft tokens per step) must be in [1, 16], got {k}"
