"""The ``specchat`` subcommands: headless generation, terminal chat, model management (no Qt imported here)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from app import __version__
from inference.chat import ChatSession
from inference.devices import available_devices
from inference.engine import Engine
from inference.events import Finished, GenerationStats, TextDelta
from inference.model import ModelLoadError
from inference.models import default_model, store
from inference.models.errors import ModelFetchError
from inference.precision import INFERENCE_PRECISIONS, KV_CACHE_PRECISIONS, SWITCHES, PrecisionSettings
from inference.rope import RopeUnsupportedError
from inference.settings import (
    MAX_K,
    ContextSettings,
    Decoding,
    GenerationSettings,
    SamplingSettings,
    SpeculativeSettings,
)

SAMPLING, CONTEXT, SPECULATIVE = SamplingSettings(), ContextSettings(), SpeculativeSettings()  # the defaults

USER_ERRORS = (ValueError, ModelLoadError, RopeUnsupportedError, ModelFetchError)


def _n_keep(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"n_keep must be 'auto' or a whole number of tokens, got {value!r}") from None


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, help="target model folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, default=4, help="bit-width of the default model")
    parser.add_argument("--mode", choices=("ar", "spec", "compare"), default="ar", help="autoregressive, speculative, or both side by side")
    parser.add_argument("--draft", default="lookup", help="draft model folder, or 'lookup' for prompt-lookup drafting")
    parser.add_argument("--k", type=int, default=SPECULATIVE.k, help=f"draft tokens per step (1..{MAX_K})")
    parser.add_argument("--adaptive-k", action="store_true", help="tune K from the acceptance rate; fall back to plain decoding when slower")
    parser.add_argument("--n-ctx", type=int, default=CONTEXT.n_ctx, help="KV-cache size in tokens; older tokens roll out past it")
    parser.add_argument("--n-keep", type=_n_keep, default=CONTEXT.n_keep, help="tokens kept at the start (attention sinks), or 'auto' = the system prompt")
    parser.add_argument("--n-discard", type=int, default=CONTEXT.n_discard, help="tokens dropped per roll (-1 = half of n_ctx - n_keep)")
    parser.add_argument("--device", default="CPU", help=f"target device ({', '.join(available_devices())})")
    parser.add_argument("--draft-device", default=None, help="draft device (default: same as --device)")
    parser.add_argument(
        "--precision", choices=INFERENCE_PRECISIONS, default="auto",
        help="compute precision of the target; auto = f32 (exact greedy speculation), with a bf16 prefill on CPUs with bf16",
    )
    parser.add_argument("--kv-cache-precision", choices=KV_CACHE_PRECISIONS, default="auto", help="KV-cache storage; auto = f32 with f32 compute, else the device's (u8)")
    parser.add_argument("--dynamic-quantization", choices=SWITCHES, default="auto", help="quantize activations on the fly; auto = off with f32 compute")
    parser.add_argument("--fast-prefill", choices=SWITCHES, default="auto", help="prefill long prompts with a bf16 copy of the model; auto = where the CPU has bf16")
    parser.add_argument("--threads", type=int, default=None, help="CPU inference threads (default: all cores)")
    parser.add_argument("--temperature", type=float, default=SAMPLING.temperature, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=SAMPLING.top_p)
    parser.add_argument("--top-k", type=int, default=SAMPLING.top_k, help="0 = disabled")
    parser.add_argument("--seed", type=int, default=SAMPLING.seed)
    parser.add_argument("--max-new-tokens", type=int, default=SAMPLING.max_new_tokens)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument(
        "--repeat-penalty", type=float, default=SAMPLING.repetition_penalty,
        help="repetition penalty over the last --repeat-last-n tokens, prompt included (1 = off; 1.1 is common)",
    )
    parser.add_argument("--repeat-last-n", type=int, default=SAMPLING.repeat_last_n, help="tokens the repetition penalty looks back at")
    parser.add_argument("--presence-penalty", type=float, default=SAMPLING.presence_penalty, help="OpenAI's presence penalty over the reply's tokens, -2..2 (0 = off)")
    parser.add_argument("--frequency-penalty", type=float, default=SAMPLING.frequency_penalty, help="OpenAI's frequency penalty over the reply's tokens, -2..2 (0 = off)")
    parser.add_argument("--system", default="", help="system prompt")


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
    parser = argparse.ArgumentParser(prog="specchat", description="Chat with local LLMs on OpenVINO, fast.")
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    _folder_options(parser, None)
    folders = [_folder_options(argparse.ArgumentParser(add_help=False), argparse.SUPPRESS)]
    commands = parser.add_subparsers(dest="command")
    generate = commands.add_parser("generate", parents=folders, help="stream one reply to stdout, statistics to stderr")
    generate.add_argument("prompt")
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of streaming")
    _add_engine_options(generate)
    chat = commands.add_parser("chat", parents=folders, help="multi-turn chat in the terminal (/reset, /exit)")
    _add_engine_options(chat)
    models = commands.add_parser("models", parents=folders, help="manage models: list, import, download, convert, remove, pair, catalogue")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    from app.cli.models import add_models_subcommands

    add_models_subcommands(models_commands, folders)
    fetch = models_commands.add_parser("fetch-default", parents=folders, help="fetch and convert the embedded default model")
    fetch.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, nargs="*", default=[4])
    return parser


def _decoding(args: argparse.Namespace, mode: str) -> Decoding:
    """``--mode ar|spec`` and ``--draft lookup|PATH`` as one decoding choice."""
    if mode == "ar":
        return Decoding.AUTOREGRESSIVE
    return Decoding.PROMPT_LOOKUP if args.draft == "lookup" else Decoding.DRAFT_MODEL


def _settings(args: argparse.Namespace, mode: str) -> GenerationSettings:
    settings = GenerationSettings(
        decoding=_decoding(args, mode),
        sampling=SamplingSettings(
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            max_new_tokens=args.max_new_tokens,
            stop_strings=tuple(args.stop),
            repetition_penalty=args.repeat_penalty,
            repeat_last_n=args.repeat_last_n,
            presence_penalty=args.presence_penalty,
            frequency_penalty=args.frequency_penalty,
        ),
        context=ContextSettings(n_ctx=args.n_ctx, n_keep=args.n_keep, n_discard=args.n_discard),
        speculative=SpeculativeSettings(k=args.k, adaptive=args.adaptive_k),
    )
    settings.validate()
    return settings


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _engine(args: argparse.Namespace) -> Engine:
    target = args.model or default_model.ensure_default_model(args.bits, progress=_progress)
    draft = None if args.draft == "lookup" or args.mode == "ar" else Path(args.draft)
    precision = PrecisionSettings(args.precision, args.kv_cache_precision, args.dynamic_quantization, args.fast_prefill)
    return Engine.load(target, args.device, draft, args.draft_device, precision, args.threads)


@contextmanager
def _ctrl_c_cancels(cancel: threading.Event):
    """While generating, Ctrl+C stops the reply (keeping what was generated) instead of killing the program."""
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stream(events, out) -> GenerationStats:
    stats = None
    for event in events:
        if isinstance(event, TextDelta) and out is not None:
            out.write(event.text)
            out.flush()
        elif isinstance(event, Finished):
            stats = event.stats
    if out is not None:
        out.write("\n")
    return stats


def describe(stats: GenerationStats) -> str:
    """One line of statistics for humans."""
    mode = stats.mode if stats.drafter is None else f"{stats.mode}/{stats.drafter}"
    line = f"[{mode}] {stats.new_tokens} tokens, TTFT {stats.ttft_ms:.1f} ms, {stats.decode_tokens_per_s:.1f} tokens/s"
    if stats.acceptance_rate is not None:
        line += f", acceptance {stats.acceptance_rate:.0%} ({stats.accepted}/{stats.drafted}), K {stats.final_k}"
    if stats.fallback_tokens:
        line += f", {stats.fallback_tokens} tokens by fallback to plain decoding"
    line += f", prefilled {stats.prefilled_tokens}/{stats.prompt_tokens}"
    if stats.fast_prefilled_tokens:
        line += f" ({stats.fast_prefilled_tokens} by the fast prefill)"
    line += f", discarded {stats.discarded_tokens} ({stats.rolls} rolls), stop: {stats.stop_reason}, precision: {stats.precision}"
    return line


def summary(stats: GenerationStats) -> dict:
    """The JSON object of one mode."""
    return {
        "mode": stats.mode,
        "text": stats.text,
        "new_tokens": stats.new_tokens,
        "ttft_ms": round(stats.ttft_ms, 3),
        "tokens_per_s": round(stats.decode_tokens_per_s, 3),
        "acceptance_rate": stats.acceptance_rate,
        "discarded_tokens": stats.discarded_tokens,
        "fast_prefilled_tokens": stats.fast_prefilled_tokens,
    }


def _generate(args: argparse.Namespace) -> int:
    modes = ["ar", "spec"] if args.mode == "compare" else [args.mode]
    settings = {mode: _settings(args, mode) for mode in modes}
    engine = _engine(args)
    cancel = threading.Event()
    results = {}
    precision = engine.target.precision.as_dict()
    for mode in modes:
        engine.reset()
        session = ChatSession(engine, args.system)
        if args.mode == "compare" and not args.json:
            print(f"--- {'autoregressive' if mode == 'ar' else 'speculative'}", file=sys.stderr)
        with _ctrl_c_cancels(cancel):
            events = session.send(args.prompt, settings[mode], cancel)
            results[mode] = _stream(events, None if args.json else sys.stdout)
        if not args.json:
            print(describe(results[mode]), file=sys.stderr)
    if args.mode == "compare":
        ar, spec = results["ar"], results["spec"]
        speedup = spec.decode_tokens_per_s / ar.decode_tokens_per_s if ar.decode_tokens_per_s else 0.0
        identical = ar.token_ids == spec.token_ids
        difference = _explain_difference(engine, args, settings["ar"], ar, spec)
        if args.json:
            print(json.dumps({
                "autoregressive": summary(ar),
                "speculative": summary(spec),
                "speedup": round(speedup, 3),
                "identical": identical,
                "first_difference": difference.as_dict() if difference else None,
                "precision": precision,
            }))
        else:
            print(f"speedup {speedup:.2f}x, identical: {identical}", file=sys.stderr)
            if difference:
                print(difference.describe(), file=sys.stderr)
            elif not identical:
                print("the texts differ by design: sampling draws different random numbers in each mode", file=sys.stderr)
    elif args.json:
        print(json.dumps({**summary(results[args.mode]), "precision": precision}))
    return 0


def _explain_difference(engine: Engine, args: argparse.Namespace, settings: GenerationSettings, ar: GenerationStats, spec: GenerationStats):
    """For greedy replies that differ: where, and whether measured noise explains it (None otherwise)."""
    if not settings.sampling.greedy or ar.token_ids == spec.token_ids:
        return None
    session = ChatSession(engine, args.system, [{"role": "user", "content": args.prompt}])
    return session.first_difference(ar.token_ids, spec.token_ids, settings)


def _chat(args: argparse.Namespace) -> int:
    mode = "spec" if args.mode == "spec" else "ar"
    settings = _settings(args, mode)
    session = ChatSession(_engine(args), args.system)
    print("SpecChat terminal chat. /reset clears the conversation, /exit quits, Ctrl+C stops a reply.", file=sys.stderr)
    while True:
        try:
            text = input("> ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return 0
        if text.strip() == "/exit":
            return 0
        if text.strip() == "/reset":
            session.messages.clear()
            continue
        cancel = threading.Event()
        try:
            with _ctrl_c_cancels(cancel):
                stats = _stream(session.send(text, settings, cancel), sys.stdout)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            continue
        print(describe(stats), file=sys.stderr)


def _models(args: argparse.Namespace) -> int:
    if args.models_command == "fetch-default":
        for bits in args.bits:
            print(default_model.ensure_default_model(bits, progress=_progress))
        return 0
    from app.cli.models import run_models_command

    return run_models_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run the subcommand ``args.command`` (``generate``, ``chat`` or ``models``); returns the exit status.

    Errors a user can fix (bad settings, a model that cannot be fetched or loaded, a data folder that cannot be
    written) print one line and give 2.
    """
    handlers = {"generate": _generate, "chat": _chat, "models": _models}
    try:
        return handlers[args.command](args)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a data folder that cannot be created or written, a full disk...
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: {error.strerror or error}{where}: choose another folder with --data-dir", file=sys.stderr)
        return 2
