"""The ``specchat`` subcommands: headless generation, terminal chat, model management (no Qt imported here)."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import fields, replace
from functools import cache
from pathlib import Path
from typing import Callable

from app import __version__
from app.backends.worker import warm_up
from app.cli import BROKEN_PIPE, INTERRUPTED
from app.cli.context_notes import cut_of, overflow_notice, system_prompt_dropped_notice
from app.cli.options import add_model_options, decoding_settings, fit_n_ctx, llama_cpp_hint, model_folders
from app.cli.remote_cli import add_remote_options, connect
from app.cli.statistics import compare_speedup, describe, speedup_text, summary
from app.counts import ended_at_once, nothing_generated_text
from inference.advice import in_words
from inference.chat import ChatSession
from inference.engine import Engine
from inference.events import Finished, GenerationStats, PromptOverflow, TextDelta
from inference.model import ModelLoadError
from inference.models.default_head import repair_default_head
from inference.models.errors import CLI_ADVICE, ModelFetchError
from inference.rope import RopeUnsupportedError
from inference.settings import (
    ContextSettings,
    GenerationSettings,
    SamplingSettings,
    SettingError,
    SpeculativeSettings,
    top_k_given,
)

SAMPLING = SamplingSettings()  # the defaults
#: Starts and ends a message of several lines in ``specchat chat`` (as in ollama's terminal chat).
MULTILINE = '"""'

USER_ERRORS = (ValueError, ModelLoadError, RopeUnsupportedError, ModelFetchError)


def _add_engine_options(parser: argparse.ArgumentParser, modes: tuple[str, ...] = ("auto", "ar", "spec", "compare")) -> None:
    add_model_options(parser, modes)
    _add_sampling_options(parser)


def _add_sampling_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=SAMPLING.temperature, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=SAMPLING.top_p)
    parser.add_argument("--top-k", type=int, default=SAMPLING.top_k, help="0 or -1 = disabled")
    parser.add_argument("--min-p", type=float, default=SAMPLING.min_p,
                        help="drop tokens less likely than this times the likeliest, in [0, 1] (0 = disabled)")
    parser.add_argument("--seed", type=_seed, default=SAMPLING.seed, help="same seed, same reply; -1 = random (as llama.cpp)")
    parser.add_argument(
        "--max-new-tokens", "--max-tokens", type=int, default=SAMPLING.max_new_tokens,
        help="the most tokens a reply may have (--max-tokens, as specchat serve names it, is the same)",
    )
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument(
        "--repeat-penalty", type=float, default=SAMPLING.repetition_penalty,
        help="repetition penalty over the last --repeat-last-n tokens, prompt included (1 = off; 1.1 is common)",
    )
    parser.add_argument("--repeat-last-n", type=int, default=SAMPLING.repeat_last_n, help="tokens the repetition penalty looks back at")
    parser.add_argument("--presence-penalty", type=float, default=SAMPLING.presence_penalty, help="OpenAI's presence penalty over the reply's tokens, -2..2 (0 = off)")
    parser.add_argument("--frequency-penalty", type=float, default=SAMPLING.frequency_penalty, help="OpenAI's frequency penalty over the reply's tokens, -2..2 (0 = off)")
    parser.add_argument("--system", default="", help="system prompt (in chat, /system TEXT changes it for the next replies)")


def _seed(text: str) -> int | None:
    """``--seed``: an integer; -1 means a random seed (None), as in llama.cpp.

    Raises:
        argparse.ArgumentTypeError: not an integer.
    """
    try:
        seed = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer (-1 = random), got {text!r}") from None
    return None if seed == -1 else seed


def _folder_options(parser: argparse.ArgumentParser, default) -> argparse.ArgumentParser:
    parser.add_argument("--data-dir", type=Path, default=default, help="data folder: models and chat history (default: the platform's)")
    parser.add_argument("--config-dir", type=Path, default=default, help="config folder: settings.json (default: the platform's)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``specchat`` command.

    ``--data-dir`` and ``--config-dir`` are accepted before the subcommand and after it (``specchat --data-dir D
    generate ...`` and ``specchat generate --data-dir D ...``): each subcommand's copy defaults to "not given", so it
    never overrides the value given before it.
    """
    parser = _Parser(prog="specchat", description="Chat with local LLMs on OpenVINO, fast.")
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    _folder_options(parser, None)
    folders = [_folder_options(argparse.ArgumentParser(add_help=False), argparse.SUPPRESS)]
    commands = parser.add_subparsers(dest="command")
    generate = commands.add_parser("generate", parents=folders, help="stream one reply to stdout, statistics to stderr")
    generate.add_argument("prompt", nargs="?", help="the message (or give it with -f)")
    generate.add_argument(
        "-f", "--file", metavar="FILE", help="read the message from FILE (UTF-8), or from stdin with '-' (for long prompts)"
    )
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    _add_engine_options(generate)
    add_remote_options(generate)
    chat = commands.add_parser(
        "chat", parents=folders,
        help=f"multi-turn chat in the terminal (/help, /reset, /system, /exit or /bye; {MULTILINE} starts and ends a multi-line message)",
        description=f"Multi-turn chat in the terminal. Each line is a message; a message of several lines (pasted text) "
        f"starts with {MULTILINE} and ends with a line ending in {MULTILINE}. /help lists the commands, /reset clears the "
        "conversation, /system TEXT changes the system prompt (--system sets the first; /system --clear removes it), /exit or /bye quits (or Ctrl+D), Ctrl+C stops a reply; another /word is not sent (//text sends "
        "/text).",
    )
    _add_engine_options(chat, modes=("auto", "ar", "spec"))  # a comparison runs one message twice: generate only
    add_remote_options(chat)
    models = commands.add_parser("models", parents=folders, help="manage models: fetch-default, list, import, download, convert, remove, pair, catalogue")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    from app.cli.models import add_models_subcommands

    add_models_subcommands(models_commands, folders)
    from app.cli.serve import add_serve_parser

    add_serve_parser(commands, folders)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line, as every other error of the command line (argparse prints its
    whole usage first); its subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's, but arguments left over are refused by the subcommand given (``specchat chat: error:
        unrecognized arguments: x (see specchat chat --help)``), whose help lists its arguments, not by this parser
        (argparse's), whose help does not."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = self._chosen(parsed)
            hint = llama_cpp_hint(extras, chosen._option_string_actions) if "--k" in chosen._option_string_actions else ""
            chosen.error(f"unrecognized arguments: {' '.join(extras)}" + (f"; {hint}" if hint else ""))
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The parser of the deepest subcommand ``parsed`` names (``models list``'s), else this one."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and getattr(parsed, action.dest, None) in action.choices:
                chosen = action.choices[getattr(parsed, action.dest)]
                return chosen._chosen(parsed) if isinstance(chosen, _Parser) else chosen
        return self


def read_prompt(args: argparse.Namespace) -> str:
    """The message of ``specchat generate``: its argument, or the text of ``-f FILE`` (``-``: stdin).

    A file is read as UTF-8, without its final line break; one that is not UTF-8 is refused (newcomer trial: a
    Latin-1 file's bytes became U+FFFD without a word, and the reply answered garbage).

    Raises:
        ValueError: both or neither given, the file cannot be read or is not UTF-8 (the message names it), or the
            prompt holds no text.
    """
    if (args.prompt is None) == (args.file is None):
        both = args.prompt is not None
        raise ValueError(
            f"give the message {'either ' if both else ''}as an argument or with -f FILE ('-f -' reads stdin)"
            + (", not both" if both else "")
        )
    if args.file is None:
        return _not_empty(args.prompt, "the prompt is empty")
    if args.file == "-":
        stdin = getattr(sys.stdin, "buffer", None)
        if stdin is None:  # (a text stream: already decoded)
            return _not_empty(sys.stdin.read().rstrip("\r\n"), "stdin holds no text")
        data, name = stdin.read(), "stdin"
    else:
        try:
            data, name = Path(args.file).expanduser().read_bytes(), f"the prompt file {args.file}"
        except OSError as error:
            raise ValueError(f"cannot read the prompt file {args.file}: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{name} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start:,} is not UTF-8): "
            "save it as UTF-8 first, e.g. iconv -f LATIN1 -t UTF-8 FILE > FILE.utf8 for a Latin-1 file"
        ) from None
    return _not_empty(text.rstrip("\r\n"), f"{name} holds no text")


def _not_empty(prompt: str, what: str) -> str:
    """``prompt``, refused where it holds no text (before any model loads: a newcomer's empty prompt loaded the
    model, then was refused in the window's words)."""
    if not prompt.strip():
        raise ValueError(f"{what}: give a message as an argument or with -f FILE")
    return prompt


def read_message(read_line: Callable[[str], str] = input) -> str:
    """One message of ``specchat chat``: a line, or the lines from one that starts with MULTILINE to one that ends
    with it (ollama's convention for pasted text; ``\"\"\"one line\"\"\"`` works too).

    Args:
        read_line: shows a prompt and returns the next line without its line break (``input``).

    Raises:
        EOFError: the input ended before a message began (a multi-line message that input ends is returned).
    """
    line = read_line("> ")
    opened = line.lstrip()
    if not opened.startswith(MULTILINE):
        return line
    first = opened[len(MULTILINE) :]
    if first.rstrip().endswith(MULTILINE):
        return first.rstrip()[: -len(MULTILINE)]
    lines = [first] if first else []
    while True:
        try:
            line = read_line("... ")
        except EOFError:
            return "\n".join(lines)
        if line.rstrip().endswith(MULTILINE):
            last = line.rstrip()[: -len(MULTILINE)]
            return "\n".join(lines + ([last] if last else []))
        lines.append(line)


#: What follows ``/system`` in ``specchat chat`` to remove the system prompt (``/system ""`` does too).
CLEAR_SYSTEM = "--clear"
#: The commands of ``specchat chat`` and what each does (``/help`` lists them).
CHAT_COMMANDS = {
    "/help": "lists these commands",
    "/reset": "clears the conversation",
    "/system": "TEXT sets the system prompt for the next replies (--system sets the first) and keeps the "
    f"conversation; /system {CLEAR_SYSTEM} (or /system \"\") removes it; /system alone shows it",
    "/exit": "quits (or Ctrl+D)",
    "/bye": "quits, as /exit",
}


#: What ``specchat chat`` says of Ctrl+C at its prompt, which does not quit.
CTRL_C_AT_PROMPT = "Ctrl+C stops a reply: to quit, type /bye (or /exit) or press Ctrl+D"


def chat_help() -> str:
    """The commands of ``specchat chat``, one line, for ``/help`` and an unknown command."""
    listed = "; ".join(f"{name} {what}" for name, what in CHAT_COMMANDS.items())
    return f"{listed}; start a message with // to send one that starts with / (//etc sends /etc)"


def chat_input(text: str) -> tuple[str, str]:
    """What a message typed in ``specchat chat`` is: ``("command", "/exit")`` (one of :data:`CHAT_COMMANDS`, alone
    on its line; ``("command", "/system TEXT")`` for /system with its text), ``("unknown", "/word")`` (a line that starts with another ``/word``: not sent), or
    ``("message", text)`` to send (``//text`` sends ``/text``; a message of several lines is always sent), or
    ``("blank", "")`` for nothing but white space (ignored quietly; it answered "error: the message is empty")."""
    stripped = text.strip()
    if not stripped:  # a blank line: nothing to send, said nothing of, as other REPLs do
        return "blank", ""
    if "\n" in text or not stripped.startswith("/") or len(stripped) == 1 or stripped[1].isspace():
        return "message", text
    if stripped.startswith("//"):
        return "message", text.lstrip()[1:]
    word = stripped.split()[0]
    if stripped in CHAT_COMMANDS:
        return "command", stripped
    if word == "/system":
        return "command", f"/system {stripped[len(word):].strip()}"
    return "unknown", word


def _read_piped_line(_prompt: str) -> str:
    """The next line of piped input, without showing the prompt: prompts no one reads would run into the replies."""
    return input()


def _settings(args: argparse.Namespace, mode: str) -> GenerationSettings:
    settings = replace(
        decoding_settings(args, mode),
        sampling=SamplingSettings(
            temperature=args.temperature,
            top_k=top_k_given(args.top_k),
            top_p=args.top_p,
            min_p=args.min_p,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
            stop_strings=tuple(args.stop),
            repetition_penalty=args.repeat_penalty,
            repeat_last_n=args.repeat_last_n,
            presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty,
        ),
    )
    settings.validate()
    return settings


def _engine(args: argparse.Namespace, settings: dict[str, GenerationSettings]) -> Engine:
    """The engine of the model options, loaded once the settings of each mode fit the models found: their n_ctx
    fitted in place (``fit_n_ctx``)."""
    models = model_folders(args)
    for mode, each in settings.items():
        settings[mode] = fit_n_ctx(each, models, given=args.n_ctx is not None)
    if models.draft_dir is not None:
        repair_default_head(models.draft_dir)  # the shipped head, damaged, is reinstalled before it is loaded
    return Engine.load(models.target_dir, models.target_device, models.draft_dir, models.draft_device, models.precision,
                       models.threads)


@contextmanager
def _ctrl_c_cancels(cancel: threading.Event):
    """While generating, Ctrl+C stops the reply (keeping what was generated) instead of killing the program."""
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stream(events, out, settings: GenerationSettings, session, said: set[str] | None = None) -> GenerationStats:
    """Stream a reply's text to ``out`` (None: keep it), its notes to stderr in the window's words (a prompt cut to
    fit, :func:`overflow_notice` of the ``session`` that sends the events, a ``ChatSession`` or a remote server's, a
    system prompt that this reply or earlier ones dropped part of, a reply the model ended at once,
    ``app.counts.nothing_generated_text``); ``said``: the notes already said (a comparison's second run says none of
    its first's again: a newcomer read the same cut-prompt note twice); returns its stats."""
    said = set() if said is None else said

    def note(text: str) -> None:
        if text not in said:
            said.add(text)
            print(f"note: {text}", file=sys.stderr, flush=True)

    stats = overflow = None
    try:
        for event in events:
            if isinstance(event, PromptOverflow):
                overflow = event
                note(overflow_notice(event, *cut_of(session, event)))
            elif isinstance(event, TextDelta) and out is not None:
                out.write(event.text)
                out.flush()
            elif isinstance(event, Finished):
                stats = event.stats
    finally:  # (also before the error of a remote reply cut mid-way)
        if out is not None:
            out.write("\n")
    # (a cache that earlier rolls left without all of the system prompt: the engine flags only the reply's own)
    read_part = overflow is not None and 0 < overflow.head_tokens < (stats.system_prompt_tokens if stats else 0)
    if stats is not None and (stats.system_prompt_dropped or read_part):
        note(system_prompt_dropped_notice(stats.system_prompt_tokens, settings.context.n_ctx))
    if stats is not None and ended_at_once(stats.new_tokens, stats.stop_reason):
        note(nothing_generated_text(overflow is not None, "--n-ctx", "send your message again, or rephrase it"))
    return stats


def _generate(args: argparse.Namespace) -> int:
    prompt = read_prompt(args)
    if args.remote:
        return _generate_remote(args, prompt)
    modes = ["ar", "auto"] if args.mode == "compare" else [args.mode]
    settings = {mode: _settings(args, mode) for mode in modes}
    engine = _engine(args, settings)
    cancel = threading.Event()
    results, said = {}, set()  # (the notes said: a comparison's second run repeats none)
    precision = engine.target.precision.as_dict()
    if args.mode == "compare":
        warm_up(engine)  # else the run that goes first pays OpenVINO's one-time work and the speedup is inflated
    for mode in modes:
        engine.reset()
        session = ChatSession(engine, args.system)
        if args.mode == "compare" and not args.json:  # (on stdout, between the texts it separates)
            print(f"--- {'autoregressive' if mode == 'ar' else 'auto'}", flush=True)
        with _ctrl_c_cancels(cancel):
            events = session.send(prompt, settings[mode], cancel)
            results[mode] = _stream(events, None if args.json else sys.stdout, settings[mode], session, said)
        if not args.json:
            print(describe(results[mode]), file=sys.stderr)
        if results[mode].stop_reason == "cancelled":  # Ctrl+C: what came is shown, the status says it was cut
            if args.json:
                print(json.dumps({**summary(results[mode]), "precision": precision}))
            return INTERRUPTED
    if args.mode == "compare":
        ar, spec = results["ar"], results["auto"]
        speedup = compare_speedup(ar, spec)
        identical = ar.token_ids == spec.token_ids
        difference = _explain_difference(engine, args.system, prompt, settings["ar"], ar, spec)
        if args.json:
            print(json.dumps({
                "autoregressive": summary(ar),
                "speculative": summary(spec),
                "speedup": None if speedup is None else round(speedup, 3),
                "identical": identical,
                "first_difference": difference.as_dict() if difference else None,
                "precision": precision,
            }))
        else:
            print(f"{speedup_text(ar, spec, speedup)}, identical: {identical}", file=sys.stderr)
            if difference:
                print(difference.describe(), file=sys.stderr)
            elif not identical:
                print("the texts differ by design: sampling draws different random numbers in each mode", file=sys.stderr)
    elif args.json:
        print(json.dumps({**summary(results[args.mode]), "precision": precision}))
    return 0


def _generate_remote(args: argparse.Namespace, prompt: str) -> int:
    """``generate --remote URL``: one reply of a remote server (``app.cli.remote_cli``), as a local one is shown."""
    if args.mode == "compare":
        raise ValueError("--mode compare runs on a model on this computer: leave out --remote")
    settings = _settings(args, args.mode)
    session = connect(args)
    print(session.backend.target.describe(), file=sys.stderr, flush=True)
    cancel = threading.Event()
    with _ctrl_c_cancels(cancel):
        stats = _stream(session.send(prompt, settings, cancel), None if args.json else sys.stdout, settings, session)
    print(json.dumps(summary(stats)) if args.json else describe(stats), file=sys.stdout if args.json else sys.stderr)
    return INTERRUPTED if stats.stop_reason == "cancelled" else 0


def _explain_difference(
    engine: Engine, system: str, prompt: str, settings: GenerationSettings, ar: GenerationStats, spec: GenerationStats
):
    """For greedy replies that differ: where, and whether measured noise explains it (None otherwise)."""
    if not settings.sampling.greedy or ar.token_ids == spec.token_ids:
        return None
    session = ChatSession(engine, system, [{"role": "user", "content": prompt}])
    return session.first_difference(ar.token_ids, spec.token_ids, settings, max(spec.k_steps, default=0) or None)


def _chat(args: argparse.Namespace) -> int:
    by_mode = {args.mode: _settings(args, args.mode)}
    session = connect(args) if args.remote else ChatSession(_engine(args, by_mode), args.system)
    if args.remote:
        print(session.backend.target.describe(), file=sys.stderr)
    settings = by_mode[args.mode]
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="replace")  # invalid UTF-8 typed or piped in becomes U+FFFD, not a crash
    print(
        f"SpecChat terminal chat. {MULTILINE} starts and ends a message of several lines; /help lists the commands, "
        "/reset clears the conversation, /system TEXT changes the system prompt, /exit or /bye quits, Ctrl+C stops a "
        "reply.",
        file=sys.stderr,
    )
    terminal = sys.stdin.isatty()
    read_line = input if terminal else _read_piped_line
    while True:
        try:
            text = read_message(read_line)
        except KeyboardInterrupt:  # at a terminal's prompt: the line typed is dropped and the chat goes on (ollama's)
            print(file=sys.stderr)
            if not terminal:  # piped input: nothing else could stop it; generate's status for Ctrl+C
                return INTERRUPTED
            print(CTRL_C_AT_PROMPT, file=sys.stderr)
            continue
        except EOFError:
            print(file=sys.stderr)
            return 0
        kind, text = chat_input(text)
        if kind == "blank":
            continue
        if kind == "unknown":
            print(f"{text} is not a command: {chat_help()}", file=sys.stderr)
            continue
        if kind == "command":
            if text in ("/exit", "/bye"):
                return 0
            if text == "/help":
                print(chat_help(), file=sys.stderr)
            elif text.startswith("/system"):
                print(_system_command(session, text[len("/system"):].strip()), file=sys.stderr)
            else:  # /reset
                session.messages.clear()
                print("Cleared the conversation.", file=sys.stderr)
            continue
        cancel = threading.Event()
        try:
            with _ctrl_c_cancels(cancel):
                stats = _stream(session.send(text, settings, cancel), sys.stdout, settings, session)
        except SettingError as error:  # (refused by the engine before the reply: said as at start, by its flags)
            print(f"error: {flag_error(error)}", file=sys.stderr)
            continue
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            continue
        print(describe(stats), file=sys.stderr)
        if stats.stop_reason == "cancelled" and not (stats.token_ids or stats.text):  # (a remote reply has text only)
            print("stopped before the reply began: the message was not kept", file=sys.stderr)
        if stats.stop_reason == "cancelled" and not terminal:  # Ctrl+C ends piped input's chat, as it ends generate
            return INTERRUPTED


def _system_command(session: ChatSession, text: str) -> str:
    """``/system TEXT`` in ``specchat chat``: make ``text`` the ``session``'s system prompt (its next replies read it;
    the messages so far stay); ``/system --clear`` (or ``/system ""``) removes it; with no ``text`` name the current
    one and how to replace or remove it. Returns what to say."""
    if not text:
        current = session.system_prompt
        if not current:
            return "No system prompt (the model's chat template may add its own); /system TEXT sets one."
        return f"System prompt: {current}\n(/system TEXT replaces it; /system {CLEAR_SYSTEM} removes it)"
    if text in (CLEAR_SYSTEM, '""', "''"):
        session.system_prompt = ""
        return "System prompt removed: the next replies have none (the conversation so far is kept)."
    session.system_prompt = text
    return f"System prompt set for the next replies (the conversation so far is kept): {text}"


def _serve(args: argparse.Namespace) -> int:
    from app.cli.serve import run_serve

    return run_serve(args)


def _models(args: argparse.Namespace) -> int:
    from app.cli.models import run_models_command

    return run_models_command(args)


#: Setting names (``SettingError.field``) whose flag is not ``--`` + the name with dashes.
_FLAGS = {"repetition_penalty": "--repeat-penalty", "stop_strings": "--stop", "decoding": "--mode", "adaptive": "--adaptive-k"}


@cache
def _named() -> re.Pattern:
    """A setting's name of several words that has a flag, standing in a message, with the value given after ``=``
    (``n_ctx=64``, ``n_keep='auto'``)."""
    options = argparse.ArgumentParser(add_help=False)
    _add_engine_options(options)
    names = [f.name for part in (SamplingSettings, ContextSettings, SpeculativeSettings) for f in fields(part)
             if "_" in f.name and _flag(f.name) in options._option_string_actions]
    alternatives = "|".join(sorted(names, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])({alternatives})(?:=('[^']*'|-?\d+(?:\.\d+)?))?(?![\w-])")


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def flag_error(error: SettingError) -> str:
    """A setting's error as the command line says it, naming the flags (``--n-ctx must be in [16, 8192], got 9``;
    ``--n-keep auto pins the 126-token system prompt, which leaves no room in --n-ctx 64: raise --n-ctx, ...``)."""
    text = _named().sub(lambda match: _flag(match[1]) + (f" {match[2].strip(chr(39))}" if match[2] else ""), str(error))
    flag = _flag(error.field)
    return text if text.startswith(flag + " ") else SettingError(error.field, text).renamed(flag)


def _drop_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's flush at exit does not fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run_command(args: argparse.Namespace) -> int:
    """Run the subcommand ``args.command`` (``generate``, ``chat``, ``serve`` or ``models``); returns the exit status.

    Errors a user can fix (bad settings, a model that cannot be fetched or loaded, a data folder that cannot be
    written) print one line and give 2; Ctrl+C where no command handles it (a model loading) prints "stopped" and
    gives 130; stdout's reader leaving (``| head``) ends the command quietly with 141.
    """
    handlers = {"generate": _generate, "chat": _chat, "serve": _serve, "models": _models}
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:  # Ctrl+C before a reply began (while the model loads): no traceback, the shell's 130
        print("stopped", file=sys.stderr)
        return INTERRUPTED
    except SettingError as error:
        print(f"error: {flag_error(error)}", file=sys.stderr)
        return 2
    except USER_ERRORS as error:  # what to do in the command line's words (the engine's name no command)
        print(f"error: {in_words(error, CLI_ADVICE)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout left: nothing is wrong here, and nobody reads what would follow
        _drop_stdout()
        return BROKEN_PIPE
    except OSError as error:  # a data folder that cannot be created or written, a full disk...
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: {error.strerror or error}{where}: choose another folder with --data-dir", file=sys.stderr)
        return 2
