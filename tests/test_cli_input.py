"""How the command line takes its input: long prompts from a file or stdin, multi-line chat messages, invalid
UTF-8, unused or invalid options, Ctrl+C during a long prefill, and a read-only data folder."""

import ast
import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import bound_by_permissions

import app.cli
from app.cli.commands import build_parser, chat_input, read_message, read_prompt
from app.cli.options import unused_options
from inference.prefill import FIRST_PREFILL_PASS, prefill_pass_size

BIG_PROMPT_BYTES = 140 * 1024  # more than one argument may hold (Linux: 128 KiB)


def _env(data_dir):
    return {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir)}


def _specchat(*args, data_dir, stdin=None, timeout=300):
    command = [sys.executable, "-m", "app", *args]
    return subprocess.run(command, input=stdin, capture_output=True, env=_env(data_dir), timeout=timeout)


def _lines(text_of_read_line):
    lines = iter(text_of_read_line)

    def read_line(prompt):
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    return read_line


def test_read_message_takes_triple_quoted_lines_as_one_message():
    assert read_message(_lines(["hello"])) == "hello"
    assert read_message(_lines(['"""', "first line", "", "  second", '"""'])) == "first line\n\n  second"
    assert read_message(_lines(['"""first', 'last"""'])) == "first\nlast"
    assert read_message(_lines(['"""one line"""'])) == "one line"
    assert read_message(_lines(['"""', "cut by the end of input"])) == "cut by the end of input"
    with pytest.raises(EOFError):
        read_message(_lines([]))


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Hello", ("message", "Hello")),
        ("/exit", ("command", "/exit")),
        ("  /bye ", ("command", "/bye")),
        ("/reset", ("command", "/reset")),
        ("/help", ("command", "/help")),
        ("/system", ("command", "/system")),
        ("  /system  Answer in French. ", ("command", "/system Answer in French.")),
        ("/systems", ("unknown", "/systems")),
        ("/?", ("unknown", "/?")),
        ("/clear the chat", ("unknown", "/clear")),
        ("//etc/hosts is a file", ("message", "/etc/hosts is a file")),
        ("/", ("message", "/")),
        ("a/b", ("message", "a/b")),
        ("/notes\nsecond line", ("message", "/notes\nsecond line")),  # a pasted message of several lines is sent
        ("", ("blank", "")),  # a blank line is ignored quietly (it answered "error: the message is empty")
        ("  \t ", ("blank", "")),
        (" \n ", ("blank", "")),
    ],
)
def test_chat_input_tells_commands_from_messages(text, expected):
    assert chat_input(text) == expected


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_max_tokens_is_max_new_tokens_as_serve_names_it(command):
    """Newcomer trial: ``specchat generate "Hi" --max-tokens 60`` failed with "unrecognized arguments"."""
    args = build_parser().parse_args([command, *(["Hi"] if command == "generate" else []), "--max-tokens", "60"])
    assert args.max_new_tokens == 60


def test_chat_help_bye_and_an_unknown_command_are_not_sent(int4_dir, data_dir):
    session = b"\n/help\n   \n/clear\n//exit\n/bye\nnever read\n"  # (blank lines: nothing said, as other REPLs)
    result = _specchat("chat", "--max-tokens", "2", data_dir=data_dir, stdin=session)  # (--max-tokens: as serve's)
    stderr = result.stderr.decode()
    assert result.returncode == 0 and "Traceback" not in stderr and "error" not in stderr, stderr
    assert "/help lists these commands" in stderr and "/bye quits" in stderr
    assert "/clear is not a command" in stderr and "//" in stderr
    assert stderr.count("[auto] ") == 1  # only "//exit" was sent (as "/exit"); /bye quit before "never read"


def test_chat_says_reset_cleared_and_how_to_quit_after_ctrl_c_at_the_prompt(monkeypatch, capsys):
    """Newcomer trial: ``/reset`` said nothing (ollama says "Cleared session context"), and Ctrl+C at the prompt left
    the chat with only ``^C`` on the screen. Ctrl+C at a terminal's prompt now drops the line typed and says how to
    quit (as ollama); the chat goes on. Piped input still ends at Ctrl+C (nothing else could stop it)."""
    import app.cli.commands as commands

    class Session:
        def __init__(self, engine, system):
            self.messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    def typed(*lines):
        def read_line(prompt):
            line = next(lines_left)
            if isinstance(line, type) and issubclass(line, BaseException):
                raise line
            return line
        lines_left = iter(lines)
        return read_line

    sessions = []
    monkeypatch.setattr(commands, "ChatSession", lambda *args: sessions.append(Session(*args)) or sessions[-1])
    monkeypatch.setattr(commands, "_engine", lambda *args: None)
    monkeypatch.setattr(commands, "_settings", lambda args, mode: None)
    monkeypatch.setattr(commands.sys, "stdin", Terminal())
    monkeypatch.setattr(commands, "input", typed(KeyboardInterrupt, "/reset", EOFError), raising=False)
    args = build_parser().parse_args(["chat"])
    assert commands._chat(args) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["", "Ctrl+C stops a reply: to quit, type /bye (or /exit) or press Ctrl+D",
                       "Cleared the conversation.", ""], err
    assert sessions[0].messages == []
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO())  # piped
    monkeypatch.setattr(commands, "_read_piped_line", typed(KeyboardInterrupt, "never read"))
    assert commands._chat(args) == app.cli.INTERRUPTED  # (it gave 0, where generate's Ctrl+C gives 130)
    assert capsys.readouterr().err.splitlines()[1:] == [""]


def test_ctrl_c_during_a_piped_chats_reply_keeps_what_came_and_exits_130(monkeypatch, capsys):
    """Trial: `specchat chat` with piped input stopped by Ctrl+C exited 0, where `generate` gives 130. Ctrl+C during
    a reply to piped input ends the chat as it ends generate: the reply so far and its statistics, then 130 (it
    went on to the next line, or to the end of input its writer, stopped by the same Ctrl+C, left: status 0). At a
    terminal the chat goes on after the cancelled reply."""
    import app.cli.commands as commands
    from inference.events import Finished, GenerationStats, TextDelta

    class Session:
        def __init__(self, engine, system):
            self.messages, self.sent = [], []

        def send(self, text, settings, cancel):
            self.sent.append(text)
            yield TextDelta("Once", 1, False)
            yield Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="cancelled", token_ids=[1]))

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    sessions = []
    monkeypatch.setattr(commands, "ChatSession", lambda *args: sessions.append(Session(*args)) or sessions[-1])
    monkeypatch.setattr(commands, "_engine", lambda *args: None)
    monkeypatch.setattr(commands, "_settings", lambda args, mode: None)
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO("Tell a story.\nnever read\n"))  # piped
    args = build_parser().parse_args(["chat"])
    assert commands._chat(args) == app.cli.INTERRUPTED
    captured = capsys.readouterr()
    assert captured.out == "Once\n" and "stop: cancelled" in captured.err
    assert sessions[0].sent == ["Tell a story."]
    lines = iter(["Tell a story.", "/bye"])
    monkeypatch.setattr(commands.sys, "stdin", Terminal())
    monkeypatch.setattr(commands, "input", lambda prompt: next(lines), raising=False)
    assert commands._chat(args) == 0 and sessions[1].sent == ["Tell a story."]


def test_a_setting_refused_during_a_chat_is_said_by_its_flags_and_the_chat_goes_on(monkeypatch, capsys):
    """Trial: `specchat chat --n-ctx 64 --n-keep auto --system "<126 tokens>"` answered each message with "error:
    n_keep='auto' pins the 126-token system prompt, which leaves no room in n_ctx=64: raise n_ctx, ...", the engine's
    names where the start-up check says the flags. A setting the engine refuses during a chat (that one no longer
    is: auto now pins the sinks only, ``ContextSettings.resolve``; a grammar found unfollowable mid-reply still is)
    is said as at start: here the engine's words for an n_discard past n_ctx."""
    import app.cli.commands as commands
    from inference.settings import ContextSettings

    class Session:
        def __init__(self, engine, system):
            self.messages, self.sent = [], []

        def send(self, text, settings, cancel):
            self.sent.append(text)
            ContextSettings(n_ctx=64, n_keep=4, n_discard=60).resolve()  # (raises: as the engine does before any token)
            yield

    sessions = []
    monkeypatch.setattr(commands, "ChatSession", lambda *args: sessions.append(Session(*args)) or sessions[-1])
    monkeypatch.setattr(commands, "_engine", lambda *args: None)
    monkeypatch.setattr(commands, "_settings", lambda args, mode: None)
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO("Hello\nHi again\n"))  # piped
    assert commands._chat(build_parser().parse_args(["chat"])) == 0
    said = "error: --n-discard must be -1 or in [1, 59] (--n-keep + --n-discard < --n-ctx), got 60"
    assert capsys.readouterr().err.splitlines()[1:] == [said, said, ""]
    assert sessions[0].sent == ["Hello", "Hi again"]  # the chat went on


def _chat_recording_what_is_sent(monkeypatch, typed: str, *options: str) -> list:
    """Run ``specchat chat OPTIONS`` on piped ``typed`` lines with a session that answers "ok" to each message and
    records ``(system prompt, earlier message texts, message)`` per message sent; returns the sessions made."""
    import app.cli.commands as commands
    from inference.events import Finished, GenerationStats, TextDelta

    class Session:
        def __init__(self, engine, system):
            self.system_prompt, self.messages, self.sent = system, [], []

        def send(self, text, settings, cancel):
            self.sent.append((self.system_prompt, [m["content"] for m in self.messages], text))
            self.messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]
            yield TextDelta("ok", 1, False)
            yield Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="eos", token_ids=[1]))

    sessions = []
    monkeypatch.setattr(commands, "ChatSession", lambda *args: sessions.append(Session(*args)) or sessions[-1])
    monkeypatch.setattr(commands, "_engine", lambda *args: None)
    monkeypatch.setattr(commands, "_settings", lambda args, mode: None)
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO(typed))  # piped
    assert commands._chat(build_parser().parse_args(["chat", *options])) == 0
    return sessions


def test_system_sets_the_system_prompt_mid_chat_and_keeps_the_conversation(monkeypatch, capsys):
    """Trial: ollama's users type ``/set system <text>`` mid-chat; ``specchat chat`` had no such command and /help
    did not say that --system held for the whole session. ``/system TEXT`` sets the system prompt of the next replies
    (the conversation so far kept); ``/system`` alone shows the current one."""
    typed = "/system\nHello\n/system   Answer in French.\n/system\nHi again\n/help\n"
    sessions = _chat_recording_what_is_sent(monkeypatch, typed, "--system", "Be brief.")
    assert sessions[0].sent == [("Be brief.", [], "Hello"), ("Answer in French.", ["Hello", "ok"], "Hi again")]
    said = capsys.readouterr().err.splitlines()
    assert said[1] == "System prompt: Be brief."
    assert said[4] == "System prompt set for the next replies (the conversation so far is kept): Answer in French."
    assert said[5] == "System prompt: Answer in French."
    assert "/system TEXT sets the system prompt for the next replies (--system sets the first)" in said[8]
    assert "/system alone shows it" in said[8]
    capsys.readouterr()
    _chat_recording_what_is_sent(monkeypatch, "/system\n")
    assert capsys.readouterr().err.splitlines()[1] == (
        "No system prompt (the model's chat template may add its own); /system TEXT sets one."
    )


def test_system_clear_removes_the_system_prompt_and_system_alone_says_how(monkeypatch, capsys):
    """A user who set ``/system TEXT`` (or ``--system``) had no way back to no system prompt: ``/system ""`` set the
    two quotes as the prompt. ``/system --clear`` (and ``/system ""``) removes it for the next replies, the
    conversation kept; ``/system`` alone shows the current one and says how to replace or remove it; /help says so."""
    typed = '/system\n/system --clear\n/system\nHello\n/system Be terse.\n/system ""\nHi\n/help\n'
    sessions = _chat_recording_what_is_sent(monkeypatch, typed, "--system", "Be brief.")
    assert sessions[0].sent == [("", [], "Hello"), ("", ["Hello", "ok"], "Hi")]
    said = capsys.readouterr().err.splitlines()
    assert said[1:4] == [
        "System prompt: Be brief.",
        "(/system TEXT replaces it; /system --clear removes it)",
        "System prompt removed: the next replies have none (the conversation so far is kept).",
    ]
    assert said[4] == "No system prompt (the model's chat template may add its own); /system TEXT sets one."
    assert said[7] == "System prompt removed: the next replies have none (the conversation so far is kept)."
    assert '/system --clear (or /system "") removes it' in said[9]


def test_read_prompt_from_an_argument_a_file_or_stdin(tmp_path, monkeypatch):
    parser = build_parser()
    assert read_prompt(parser.parse_args(["generate", "Hi"])) == "Hi"
    path = tmp_path / "prompt.txt"
    path.write_text("line one\nline \u00e9 two\n", encoding="utf-8")
    assert read_prompt(parser.parse_args(["generate", "-f", str(path)])) == "line one\nline \u00e9 two"
    latin = tmp_path / "latin-1.txt"  # (newcomer trial: its bytes became U+FFFD without a word)
    latin.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin-1.txt is not UTF-8 text \(byte 0xe9 at offset 3 is not UTF-8\): save it"):
        read_prompt(parser.parse_args(["generate", "-f", str(latin)]))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe")))
    with pytest.raises(ValueError, match="stdin is not UTF-8 text"):
        read_prompt(parser.parse_args(["generate", "-f", "-"]))
    monkeypatch.setattr(sys, "stdin", io.StringIO("from stdin\n"))
    assert read_prompt(parser.parse_args(["generate", "-f", "-"])) == "from stdin"
    with pytest.raises(ValueError, match="as an argument or with -f FILE"):
        read_prompt(parser.parse_args(["generate"]))
    with pytest.raises(ValueError, match="not both"):
        read_prompt(parser.parse_args(["generate", "Hi", "-f", str(path)]))
    with pytest.raises(ValueError, match="cannot read the prompt file .*missing.txt: No such file"):
        read_prompt(parser.parse_args(["generate", "-f", str(tmp_path / "missing.txt")]))


@pytest.mark.parametrize("given", [[""], ["  \n "], ["-f", "EMPTY"]])
@pytest.mark.parametrize("mode", ["auto", "compare"])
def test_an_empty_prompt_is_refused_before_any_model_loads(tmp_path, monkeypatch, capsys, given, mode):
    """A newcomer's `generate ""` loaded the model for 6 s, then said "the message is empty: type something before
    sending" (the window's words: there is no sending here), and `--mode compare` printed "--- autoregressive"
    above it. The command line says it in its own words, before anything loads."""
    import app.cli.commands as commands
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "empty.txt").write_text("\n", encoding="utf-8")
    given = [str(tmp_path / "empty.txt") if part == "EMPTY" else part for part in given]
    assert commands.run_command(build_parser().parse_args(["generate", *given, "--mode", mode])) == 2
    printed = capsys.readouterr()
    assert printed.out == ""
    what = f"the prompt file {given[1]} holds no text" if given[0] == "-f" else "the prompt is empty"
    assert printed.err.splitlines() == [f"error: {what}: give a message as an argument or with -f FILE"]


def test_compare_says_a_cut_prompts_note_once(int4_dir, data_dir, tmp_path, monkeypatch, capsys):
    """A newcomer's `generate -f long.txt --n-ctx 64 --mode compare` printed "note: the prompt is 2725 tokens, more
    than n_ctx 64: ..." twice, once per run, the same words about the same prompt (and a dropped system prompt's
    note likewise): each note is said once, where it first comes."""
    import app.cli.commands as commands

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    prompt = tmp_path / "long.txt"
    prompt.write_text("Summarize this: " + " ".join(f"item{i} is red." for i in range(60)), encoding="utf-8")
    for given, n_ctx, tokens, expected in ((["-f", str(prompt)], "64", "4", ["your message is too long"]),
                                           (["Hi"], "16", "24", ["your message is too long", "the context was full and part "
                                                                 "of the system prompt"])):
        args = build_parser().parse_args(["generate", *given, "--n-ctx", n_ctx, "--mode", "compare", "--draft",
                                          "lookup", "--max-new-tokens", tokens])
        assert commands.run_command(args) == 0
        notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
        assert [note[6:][:len(start)] for note, start in zip(notes, expected)] == expected and len(notes) == len(
            expected), notes


@pytest.mark.parametrize("command", [["generate", "Hi"], ["serve", "--port", "0"]])
def test_an_unknown_draft_says_lookup_is_a_choice_too(int4_dir, data_dir, monkeypatch, capsys, command):
    """A newcomer read "[spec/head]" in the statistics and tried `--draft head`: "no installed model named 'head'
    (installed: ...)" said nothing of `lookup`, the other thing --draft takes. The refusal names all three."""
    import app.cli.commands as commands
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    assert commands.run_command(build_parser().parse_args([*command, "--mode", "spec", "--draft", "head"])) == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("error: --draft takes lookup (prompt lookup), an installed model's name or a model "
                           "folder: no installed model named 'head' (installed: "), line
    assert "SmolLM2-135M-Instruct-head" in line and line.endswith("see `specchat models list`"), line


def test_the_default_model_named_by_its_name_or_folder_drafts_with_its_head_as_with_bits(int4_dir, int8_dir, tmp_path):
    """A newcomer's `generate Hi --bits 8 --mode spec` drafted with the draft head ("[spec/head]"), but `--model
    SmolLM2-135M-Instruct-int8 --mode spec`, the same model named as `models list` names it, drafted with prompt
    lookup ("[spec/lookup] ... 7 tokens by plain steps"), and Auto lost the head the same way. The default model
    named by its name or folder, at any bit-width, drafts with its head as --bits does; another model with lookup."""
    from app.cli.options import _default_k, draft_choice
    from inference.draft_head import HEAD_K
    from inference.models.default_head import DEFAULT_HEAD_NAME

    for given in ([], ["--bits", "8"], ["--model", int4_dir.name], ["--model", int8_dir.name], ["--model", str(int8_dir)]):
        for mode in ("auto", "spec"):
            args = build_parser().parse_args(["generate", "Hi", "--mode", mode, *given])
            assert draft_choice(args) == DEFAULT_HEAD_NAME, (given, mode)
            assert _default_k(args) == HEAD_K, (given, mode)
    other = tmp_path / "other-model"  # (not the default model: no head of its own)
    assert draft_choice(build_parser().parse_args(["generate", "Hi", "--model", str(other)])) == "lookup"
    assert draft_choice(build_parser().parse_args(["generate", "Hi", "--model", "no-such-model"])) == "lookup"


@pytest.mark.parametrize(
    "args,unused",
    [
        (["--draft", "/some/draft"], []),  # Auto (the default) drafts with it
        (["--k", "3", "--adaptive-k", "--draft-device", "CPU"], ["--adaptive-k", "--k"]),  # the default head runs there
        (["--mode", "compare", "--draft", "lookup", "--k", "3"], ["--k"]),
        (["--mode", "compare", "--adaptive-k"], ["--adaptive-k"]),  # compare runs Auto, which chooses K itself
        (["--mode", "spec", "--k", "3", "--adaptive-k"], ["--k"]),
        (["--mode", "ar", "--k", "3", "--adaptive-k", "--draft-device", "CPU"], ["--draft-device", "--k", "--adaptive-k"]),
        (["--mode", "ar", "--draft", "/some/draft"], ["--draft"]),
        (["--mode", "spec", "--draft", "lookup", "--draft-device", "CPU"], ["--draft-device"]),
        (["--model", "/some/model", "--mode", "spec", "--draft-device", "CPU"], ["--draft-device"]),
        (["--model", "/some/model", "--bits", "8"], ["--bits"]),
        (["--mode", "spec", "--draft", "/some/draft", "--k", "3", "--draft-device", "CPU"], []),
        (["--top-k", "0", "--top-p", "0.5"], ["--top-p"]),  # greedy (temperature 0, the default): no sampling
        (["--temperature", "0", "--seed", "5"], ["--seed"]),
        (["--seed", "5", "--min-p", "0.1", "--top-k", "40"], ["--top-k", "--min-p", "--seed"]),
        (["--mode", "ar", "--k", "3", "--top-p", "0.9"], ["--k", "--top-p"]),
        (["--temperature", "0.8", "--top-p", "0.5", "--top-k", "40", "--min-p", "0.1", "--seed", "5"], []),
        (["--seed", "-1", "--repeat-penalty", "1.1", "--presence-penalty", "0.5"], []),  # penalties change the argmax
    ],
)
def test_options_the_run_would_ignore_are_named(args, unused):
    notes = unused_options(build_parser().parse_args(["generate", "Hi", *args]))
    assert [note.split()[0] for note in notes] == unused


def test_sampling_options_under_greedy_decoding_are_named_unused_by_generate_and_chat_not_by_serve():
    """Newcomer trial: `generate "Hi" --top-k 0 --top-p 0.5` and `--temperature 0 --seed 5` ran greedy with no note.
    `serve --temperature 0 --top-p 0.5` uses --top-p: the default of requests that send a temperature above 0."""
    note = ("--top-p is unused with greedy decoding (temperature 0 takes the likeliest token at each step); give "
            "--temperature above 0 to sample")
    for command in (["generate", "Hi"], ["chat"]):
        assert unused_options(build_parser().parse_args([*command, "--top-p", "0.5"])) == [note]
    assert unused_options(build_parser().parse_args(["serve", "--temperature", "0", "--top-p", "0.5"])) == []


@pytest.mark.parametrize("command", [["generate", "Hi"], ["chat"], ["serve", "--port", "0"]])
@pytest.mark.parametrize("flag", ["--model", "--draft"])
def test_an_empty_model_or_draft_is_refused_not_taken_for_the_default(tmp_path, monkeypatch, capsys, command, flag):
    """`generate Hi --model "$MODEL"` with MODEL unset ran the default model without a word, and `--draft ""` ran
    Auto without its draft head (as llama.cpp refuses `-m ""`, an empty name is refused, before anything loads)."""
    import app.cli.commands as commands
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    for value in ("", "  "):
        assert commands.run_command(build_parser().parse_args([*command, flag, value])) == 2
        what = "an installed model's name or a model folder" + (", or lookup" if flag == "--draft" else "")
        assert capsys.readouterr().err.splitlines() == [
            f"error: {flag} is empty: give {what}, or leave {flag} out for the default"]


def test_the_help_of_draft_names_only_the_modes_the_command_takes():
    """`specchat serve --help` and `chat --help` said "--draft: with --mode auto, spec or compare", a mode neither
    takes (`chat --mode compare`: "invalid choice: 'compare'")."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices

    def draft_help(command: str) -> str:
        return next(a.help for a in commands[command]._actions if a.dest == "draft")

    assert draft_help("generate").startswith("with --mode auto, spec or compare: a draft model or head")
    for command in ("chat", "serve"):
        assert draft_help(command).startswith("with --mode auto or spec: a draft model or head"), command


@pytest.mark.parametrize("args", [["--adaptive-k"], ["--mode", "ar", "--k", "3"], ["--mode", "ar", "--adaptive-k"]])
def test_serve_never_calls_k_or_adaptive_k_unused_they_are_the_default_of_requests(args):
    """`specchat serve --adaptive-k` printed "note: --adaptive-k is unused with --mode auto", and `serve --mode ar
    --k 3` "note: --k is unused with --mode ar", yet both are the defaults of every request that asks
    spec_lookup or spec_model (`specchat.mode`), as --k already is under Auto. serve names neither unused; generate
    still does."""
    assert unused_options(build_parser().parse_args(["serve", *args])) == []
    assert [note.split()[0] for note in unused_options(build_parser().parse_args(["generate", "Hi", *args]))] == [
        arg for arg in args if arg in ("--k", "--adaptive-k")]


def test_adaptive_k_with_compare_is_named_unused_as_with_auto():
    """`generate --mode compare --adaptive-k` ran plain decoding and Auto, which always chooses K, without a word
    about --adaptive-k (it was named unused with --mode auto only)."""
    notes = unused_options(build_parser().parse_args(["generate", "Hi", "--mode", "compare", "--adaptive-k"]))
    assert notes == ["--adaptive-k is unused with --mode compare (compare runs plain decoding and Auto, which always "
                     "chooses K); it applies to --mode spec"]


def test_k_with_auto_is_named_unused_by_generate_not_by_serve():
    """`generate --mode auto --k 4` took --k silently (Auto chooses its own K, as the server's response now says of
    ``specchat.k``); `serve --mode auto --k 4` uses it: the K of requests that ask a fixed mode."""
    notes = unused_options(build_parser().parse_args(["generate", "Hi", "--k", "4"]))
    assert notes == ["--k is unused with --mode auto (Auto chooses K per step, 0 to 16); it is the K of --mode spec"]
    assert unused_options(build_parser().parse_args(["serve", "--k", "4"])) == []


def test_a_prompt_file_larger_than_an_argument_is_read_whole_and_ctrl_c_stops_its_prefill(int4_dir, data_dir, tmp_path):
    """140 KiB of text (~35k tokens; the ~4,000 that fit in n_ctx take tens of seconds of prefill on 2 cores): the
    overflow is announced before the prefill, and SIGINT (Ctrl+C) sent then ends the run within a prefill pass,
    with the exit status of an interrupted command, 130.

    Nothing here depends on how fast the machine is: the signal goes as soon as the note is read, and the bound is
    on the prompt tokens read, not on seconds. (It used to sleep 3 s and require the exit within 15 s: on a loaded
    2-core machine the first pass, 1,024 tokens, alone can take longer than that.)"""
    genesis = (os.path.dirname(__file__) + "/../bench/data/kjv_genesis.txt")
    text = open(genesis, encoding="utf-8").read()
    path = tmp_path / "long.txt"
    path.write_text((text * (BIG_PROMPT_BYTES // len(text) + 1))[:BIG_PROMPT_BYTES], encoding="utf-8")
    command = [sys.executable, "-m", "app", "generate", "-f", str(path), "--max-new-tokens", "8"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(data_dir), text=True)
    try:
        note = process.stderr.readline()
        while note and not note.startswith("note: your message is too long"):
            note = process.stderr.readline()
        process.send_signal(signal.SIGINT)  # during the first prefill pass, or before it starts
        stdout, stderr = process.communicate(timeout=300)  # only a guard against a hang: the bound is below
    finally:
        process.kill()
    assert "the model reads at most 8,192 tokens, so no --n-ctx keeps the rest: shorten the prompt" in note, note
    assert int(re.search(r"of the conversation's ([\d,]+) tokens", note).group(1).replace(",", "")) > 30_000
    assert process.returncode == 130, stderr
    assert "0 tokens" in stderr and "stop: cancelled" in stderr and "Traceback" not in stderr
    # Cancel is checked before each pass: the pass running when the signal came ends, no other starts. One more
    # pass is allowed for a test process slow to send the signal; the whole prefill would read ~4,000 tokens.
    read = int(re.search(r"prefilled (\d+)/", stderr).group(1))
    assert read <= FIRST_PREFILL_PASS + prefill_pass_size(FIRST_PREFILL_PASS, fast=False), stderr


def test_generate_reads_stdin_and_takes_invalid_utf8_arguments(int4_dir, data_dir):
    piped = _specchat("generate", "-f", "-", "--max-new-tokens", "6", "--json", data_dir=data_dir, stdin=b"What is the capital of France?\n")
    assert piped.returncode == 0, piped.stderr
    assert b'"new_tokens"' in piped.stdout
    raw = _specchat("generate", b"Hello \xff\xfe world", "--max-new-tokens", "4", data_dir=data_dir)
    assert raw.returncode == 0 and b"Traceback" not in raw.stderr, raw.stderr.decode(errors="replace")
    assert b"stop: " in raw.stderr


def test_chat_sends_a_triple_quoted_paste_as_one_message(int4_dir, data_dir):
    session = b'"""\nFirst line of a pasted text.\n\nIts second paragraph.\n"""\n\xff bad byte\n/exit\n'
    result = _specchat("chat", "--max-new-tokens", "4", data_dir=data_dir, stdin=session)
    stderr = result.stderr.decode()
    assert result.returncode == 0 and "Traceback" not in stderr, stderr
    # two messages, the paste, then the line with the invalid byte: two statistics lines of Auto, the default
    # (``[auto/head]``, or ``[auto]`` when no draft was accepted)
    assert stderr.count("[auto") == 2, stderr


def test_piped_chat_prints_each_reply_on_its_own_lines_without_prompts(int4_dir, data_dir):
    session = b"Hi.\nWhat is 2+2?\n/exit\n"
    result = _specchat("chat", "--max-new-tokens", "20", "--temperature", "0", data_dir=data_dir, stdin=session)
    assert result.returncode == 0, result.stderr.decode()
    first, second, after = result.stdout.split(b"\n")  # each of the two replies ends with a line break; nothing after
    assert first.strip() and second.strip() and after == b"", result.stdout
    assert not first.startswith(b">") and not second.startswith(b">"), result.stdout  # no "> " prompts


@pytest.mark.parametrize(
    "args,message",
    [
        (["--threads", "-1"], "threads must be in [1, "),
        (["--threads", "0"], "threads must be in [1, "),
    ],
)
def test_an_invalid_thread_count_is_a_setting_error(int4_dir, data_dir, args, message):
    result = _specchat("generate", "Hi", *args, data_dir=data_dir)
    stderr = result.stderr.decode()
    assert result.returncode == 2 and message in stderr and "Traceback" not in stderr
    assert "corrupt" not in stderr


def test_a_device_openvino_does_not_find_is_said_before_any_model_loads(int4_dir, data_dir):
    """Newcomer trial: `--device GPU` on a machine without OpenCL failed while the draft head loaded, saying
    "reinstall it". A device OpenVINO does not find is named, with the devices it finds."""
    from inference.devices import core

    found = {name.split(".")[0] for name in core().available_devices}  # (GPU.0 and GPU.1 on a machine with two)
    missing = next(name for name in ("NPU", "GPU", "FPGA") if name not in found)
    for flag in ("--device", "--draft-device"):
        result = _specchat("generate", "Hi", flag, missing, "--max-new-tokens", "2", data_dir=data_dir)
        stderr = result.stderr.decode()
        assert result.returncode == 2 and "Traceback" not in stderr, stderr
        assert f"error: {flag}: device {missing} is not available here: OpenVINO finds CPU" in stderr, stderr
        assert "reinstall" not in stderr
    unused = _specchat("generate", "Hi", "--mode", "ar", "--draft-device", missing, "--max-new-tokens", "2",
                       data_dir=data_dir)
    assert unused.returncode == 0 and b"note: --draft-device is unused" in unused.stderr, unused.stderr  # a note only


def test_unused_options_are_said_on_stderr(int4_dir, data_dir):
    result = _specchat("generate", "Hi", "--mode", "ar", "--draft", "/nowhere/draft", "--max-new-tokens", "2", data_dir=data_dir)
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert "note: --draft is unused with --mode ar" in stderr


def test_chat_neither_offers_nor_takes_compare_mode(data_dir):
    """A comparison runs one message twice (generate only): chat's help lists auto, ar and spec, and refuses compare."""
    result = _specchat("chat", "--mode", "compare", data_dir=data_dir, stdin=b"")
    assert result.returncode == 2 and b"Traceback" not in result.stderr
    assert b"argument --mode: invalid choice: 'compare' (choose from 'auto', 'ar', 'spec')" in result.stderr
    assert b"--mode {auto,ar,spec}" in _specchat("chat", "--help", data_dir=data_dir, stdin=b"").stdout


@pytest.mark.parametrize("args", [["generate", "Hi"], ["chat"], ["models", "fetch-default"], ["models", "list"]])
def test_a_read_only_data_folder_is_one_line_not_a_traceback(tmp_path, args):
    """An empty data folder nothing can be written to (mode 555; root, as CI runs, held to it by
    helpers.bound_by_permissions): what needs the default model says so in one line (exit 2); listing models needs
    no writing."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    command = [sys.executable, "-m", "app", "--data-dir", str(folder), "--config-dir", str(tmp_path / "config"), *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
                                **bound_by_permissions())  # fmt: skip
    finally:
        folder.chmod(0o755)
    assert list(folder.iterdir()) == []  # nothing was written there
    assert "Traceback" not in result.stderr, result.stderr
    if args == ["models", "list"]:
        assert result.returncode == 0 and "no models installed" in result.stderr
        return
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and last.startswith("error: ") and "--data-dir" in last
    assert "Permission denied" in last


def test_the_overflow_note_advises_a_larger_n_ctx_only_where_one_keeps_the_prompt():
    from app.cli.context_notes import overflow_notice
    from inference.events import PromptOverflow

    fits = overflow_notice(PromptOverflow(prompt_tokens=6000, n_ctx=4096, discarded_tokens=2000, head_tokens=4, message_tokens=0,
                                          tail_tokens=3996, max_n_ctx=8192), 4, "earlier_turns")
    assert fits == ("earlier turns no longer fit: the model read 4,000 of the conversation's 6,000 tokens (the system "
                    "prompt's 4 tokens and the last 3,996); raise --n-ctx to keep the rest")
    too_long = overflow_notice(PromptOverflow(prompt_tokens=9504, n_ctx=4096, discarded_tokens=6138, head_tokens=25, message_tokens=256,
                                              tail_tokens=3085, max_n_ctx=8192), 25, "message")
    assert too_long == (
        "your message is too long: the model read 3,366 of the conversation's 9,504 tokens (the system prompt's 25 "
        "tokens, your message's first 256 and the last 3,085); the model reads at most 8,192 tokens, so no --n-ctx "
        "keeps the rest: shorten the prompt"
    )
    unknown = overflow_notice(PromptOverflow(prompt_tokens=9504, n_ctx=4096, discarded_tokens=6138, head_tokens=4,
                                             message_tokens=0, tail_tokens=3362))
    assert unknown.endswith("(the first 4 and the last 3,362); raise --n-ctx to keep the rest")


def test_the_exit_status_of_ctrl_c_is_one_constant():
    """``generate``, ``serve`` and ``models`` exit with ``app.cli.INTERRUPTED`` after Ctrl+C: no module of the
    command line writes 130 itself (``serve`` and ``models`` each did, beside ``commands``' constant)."""
    assert app.cli.INTERRUPTED == 128 + signal.SIGINT
    literal = [
        f"{path.name}:{node.lineno}"
        for path in sorted(Path(app.cli.__file__).parent.glob("*.py")) if path.name != "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value == app.cli.INTERRUPTED
    ]
    assert literal == []


def test_a_long_chats_note_says_what_the_model_skips_not_what_this_reply_discarded(int4_dir, data_dir, monkeypatch,
                                                                                     capsys):
    """A trial's long chat at --n-ctx 256 read "note: ... discards the 242 in the middle before the reply" and then,
    for the same reply, "discarded 0 (0 rolls)": earlier replies' rolls had dropped them, this one dropped nothing.
    The note now says what the model reads of the conversation (in the window's footer's words), and the statistics
    what this reply discarded."""
    import io

    import app.cli.commands as commands

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    turns = "".join(f"Write a short paragraph about animal number {i}.\n" for i in range(1, 9))
    monkeypatch.setattr("sys.stdin", io.StringIO(turns + "/exit\n"))
    args = commands.build_parser().parse_args(["chat", "--mode", "ar", "--n-ctx", "128", "--max-new-tokens", "30",
                                               "--system", "Always answer in French."])
    assert commands.run_command(args) == 0
    lines = capsys.readouterr().err.splitlines()
    pairs = []  # (what the note says the model skips, what the reply's statistics say it discarded)
    for note, line in zip(lines, lines[1:]):
        if note.startswith("note: earlier turns no longer fit: the model read ") and line.startswith("[ar]"):
            read, total = map(int, re.search(r"read (\d+) of the conversation's (\d+) tokens", note).groups())
            pairs.append((note, total - read, int(re.search(r"discarded (\d+) \(", line).group(1))))
    assert any(skipped != discarded for _, skipped, discarded in pairs), pairs  # the trial's case happens here
    assert all("(the system prompt's " in note for note, _, _ in pairs), pairs  # (--n-keep auto pins it)


def test_the_chats_banner_names_every_command(monkeypatch, capsys):
    """A trial: the banner printed when `specchat chat` starts listed /help, /reset and /exit only, after /system came;
    it now names every command of CHAT_COMMANDS."""
    import app.cli.commands as commands

    monkeypatch.setattr(commands, "ChatSession", lambda *args: None)
    monkeypatch.setattr(commands, "_engine", lambda *args: None)
    monkeypatch.setattr(commands, "_settings", lambda args, mode: None)
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO("/exit\n"))  # piped
    assert commands._chat(build_parser().parse_args(["chat"])) == 0
    banner = capsys.readouterr().err.splitlines()[0]
    assert banner.startswith("SpecChat terminal chat.")
    assert [name for name in commands.CHAT_COMMANDS if name not in banner] == []


def test_a_reply_the_model_ends_at_once_is_said_in_the_windows_words(capsys):
    """A long paste at --n-ctx 256 whose reply the model ended at once printed an empty line and "[auto] 0 tokens":
    the note says so, in the window's words (``app.counts.nothing_generated_text``), with the flag that helps."""
    import io

    from app.cli.commands import _stream
    from inference.events import Finished, GenerationStats, PromptOverflow
    from inference.settings import GenerationSettings

    overflow = PromptOverflow(prompt_tokens=616, n_ctx=256, discarded_tokens=424, head_tokens=24, message_tokens=24,
                              tail_tokens=144, max_n_ctx=8192)
    empty = Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=0, prompt_tokens=616))
    session = SimpleNamespace(system_prompt="", messages=[{"role": "user", "content": "x" * 2000}],
                              system_prompt_tokens=lambda: 24)
    _stream([overflow, empty], io.StringIO(), GenerationSettings(), session)
    notes = capsys.readouterr().err.splitlines()
    assert notes[-1] == ("note: The model ended its reply at once (nothing generated): it read only part of a "
                         "conversation longer than the context length; raise --n-ctx, or send a shorter message"), notes
    _stream([Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=0, prompt_tokens=16))], io.StringIO(),
            GenerationSettings(), session)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "note: The model ended its reply at once (nothing generated): send your message again, or rephrase it")
    _stream([Finished(GenerationStats(mode="ar", stop_reason="eos", new_tokens=3, prompt_tokens=16))], io.StringIO(),
            GenerationSettings(), session)
    assert "nothing generated" not in capsys.readouterr().err


def test_chat_says_a_prompt_cut_to_fit_in_the_windows_words(monkeypatch, capsys):
    """Trial: ``specchat generate --n-ctx 256 -f`` a 600-token file said "the model keeps its first 53 (the last
    message's first 29 among them) and its last 183", where the window's footer says "your message is too long: the
    model read 236 of the conversation's 705 tokens (the system prompt's 24 tokens, your message's first 29 and the
    last 183)". The command line now says it in the footer's words (``app.counts.cut_text``), with why: a long
    message, earlier turns that no longer fit, a system prompt longer than a chat's first message."""
    import app.cli.commands as commands
    from inference.events import Finished, GenerationStats, PromptOverflow

    overflows = iter([
        PromptOverflow(prompt_tokens=705, n_ctx=256, discarded_tokens=469, head_tokens=24, message_tokens=29,
                       tail_tokens=183, max_n_ctx=8192, system_prompt_tokens=24),
        PromptOverflow(prompt_tokens=900, n_ctx=256, discarded_tokens=668, head_tokens=24, message_tokens=0,
                       tail_tokens=208, max_n_ctx=8192, system_prompt_tokens=24),
        PromptOverflow(prompt_tokens=9000, n_ctx=256, discarded_tokens=8768, head_tokens=30, message_tokens=0,
                       tail_tokens=202, max_n_ctx=8192, system_prompt_tokens=4000),
    ])

    class Session:
        def __init__(self, engine, system):
            self.system_prompt, self.messages = system, []

        def send(self, text, settings, cancel):
            self.messages.append({"role": "user", "content": text})
            yield next(overflows)
            self.messages.append({"role": "assistant", "content": "ok"})
            yield Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="eos", token_ids=[1]))

    sessions = []
    monkeypatch.setattr(commands, "ChatSession", lambda *args: sessions.append(Session(*args)) or sessions[-1])
    monkeypatch.setattr(commands, "_engine", lambda *args: None)
    monkeypatch.setattr(commands, "_settings", lambda args, mode: None)
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO("A long text\nAnd then?\n"))  # piped
    assert commands._chat(build_parser().parse_args(["chat", "--system", "Be brief."])) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert notes == [
        "note: your message is too long: the model read 236 of the conversation's 705 tokens (the system prompt's 24 "
        "tokens, your message's first 29 and the last 183); raise --n-ctx to keep the rest",
        "note: earlier turns no longer fit: the model read 232 of the conversation's 900 tokens (the system prompt's 24 "
        "tokens and the last 208); raise --n-ctx to keep the rest",
    ]
    monkeypatch.setattr(commands.sys, "stdin", io.StringIO("Hi\n"))
    assert commands._chat(build_parser().parse_args(["chat", "--system", "Answer at length. " * 20])) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert notes[0] == (
        "note: your system prompt is too long: the model read 232 of the conversation's 9,000 tokens (the first 30 and "
        "the last 202); the model reads at most 8,192 tokens, so no --n-ctx keeps the rest: shorten the prompt"
    )


def test_a_reply_reading_a_memory_without_all_of_the_system_prompt_says_so(capsys):
    """A 159-token system prompt at --n-ctx 256 (--n-keep auto pins 128): a reply that read the cache earlier rolls
    left (the first 128 tokens and the last 66), without a roll of its own, printed no note that the model no longer
    reads all of the system prompt (the reply whose roll dropped it did), as the window's footer did not."""
    from app.cli.commands import _stream
    from inference.events import Finished, GenerationStats, PromptOverflow
    from inference.settings import ContextSettings, GenerationSettings

    overflow = PromptOverflow(prompt_tokens=322, n_ctx=256, discarded_tokens=128, head_tokens=128, message_tokens=0,
                              tail_tokens=66, max_n_ctx=8192)
    done = Finished(GenerationStats(mode="ar", stop_reason="max_new_tokens", new_tokens=60, prompt_tokens=322,
                                    system_prompt_tokens=159))
    session = SimpleNamespace(system_prompt="Rules. " * 40, system_prompt_tokens=lambda: 159, messages=[
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "And?"}])
    _stream([overflow, done], io.StringIO(), GenerationSettings(context=ContextSettings(n_ctx=256)), session)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "note: the context was full and part of the system prompt (159 tokens) was dropped with it, so the model no "
        "longer reads all of it: --n-ctx 318 or more keeps it (--n-keep auto keeps a system prompt of up to half of "
        "n_ctx), or --n-keep 159 keeps it at this --n-ctx, leaving 97 tokens to the rest")
