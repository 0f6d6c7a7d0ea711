"""The model options that ``specchat generate``, ``chat`` and ``serve`` share (``add_model_options``), and what they
mean: the decoding settings (``decoding_settings``) and the models to load (``model_folders``). Its own module so that
``app.cli.commands`` and ``app.cli.serve`` both import it and neither imports the other at import time."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from app.backends.worker import ModelSpec
from inference.advice import restated
from inference.devices import available_devices, unavailable_device
from inference.draft_head import HEAD_K, is_head_folder
from inference.model import sliding_window_of
from inference.models import default_model, store
from inference.models.default_head import DEFAULT_HEAD_NAME, ensure_default_head, shipped_head
from inference.models.errors import ModelImportError
from inference.models.inspect import check_head_made_for, check_pair_manifests, max_context_of, read_config
from inference.precision import INFERENCE_PRECISIONS, KV_CACHE_PRECISIONS, SWITCHES, PrecisionSettings
from inference.settings import (
    GREEDY_UNUSED,
    GREEDY_WHY,
    MAX_K,
    MIN_N_CTX,
    ContextSettings,
    Decoding,
    GenerationSettings,
    SamplingSettings,
    SpeculativeSettings,
    check_threads,
)

CONTEXT, SPECULATIVE, SAMPLING = ContextSettings(), SpeculativeSettings(), SamplingSettings()  # the defaults
DEFAULT_BITS = 4
#: The sampling options greedy decoding does not use (``GREEDY_UNUSED``), by flag: their ``SamplingSettings`` fields.
SAMPLING_ONLY = {f"--{name.replace('_', '-')}": name for name in GREEDY_UNUSED}


def _n_keep(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"n_keep must be 'auto' or a whole number of tokens, got {value!r}") from None


def add_model_options(parser: argparse.ArgumentParser, modes: tuple[str, ...] = ("auto", "ar", "spec", "compare")) -> None:
    """The options that choose and load the models, the decoding mode and the rolling context (``generate``,
    ``chat`` and ``serve`` share them; ``modes``: the choices of ``--mode``)."""
    parser.add_argument("--model", help="target model: an installed model's name (`specchat models list`) or a folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, default=None, help="bit-width of the default model (default 4)")
    parser.add_argument("--mode", choices=modes, default="auto", help="auto (the default: each step drafts with the draft head or prompt lookup, or not at all, whichever measures fastest), autoregressive, speculative with a fixed K" + (", or plain against auto side by side" if "compare" in modes else ""))
    parser.add_argument("--draft", default=None, help=f"with --mode {'auto, spec or compare' if 'compare' in modes else 'auto or spec'}: a draft model or head (an installed model's name or a folder), or 'lookup' for prompt-lookup drafting (default: {DEFAULT_HEAD_NAME} for the default model, else lookup)")
    parser.add_argument("--k", type=int, default=None, help=f"draft tokens per step of --mode spec; auto chooses its own (1..{MAX_K}, default {HEAD_K} with a draft head, else {SPECULATIVE.k})")
    parser.add_argument("--adaptive-k", action="store_true", help="with --mode spec: choose K per step as auto does, with the one drafter given")
    parser.add_argument("--n-ctx", type=int, default=None, help=f"KV-cache size in tokens; older tokens roll out past it (default {CONTEXT.n_ctx}, or the model's trained length where shorter)")
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
    parser.add_argument("--threads", type=int, default=None, help="CPU inference threads, 1 to the machine's logical CPUs (default: all)")


def draft_choice(args: argparse.Namespace) -> str:
    """``--draft`` as given; without it, the default model's draft head when the target is the default model (left
    out, or named: :func:`_is_the_default_model`) and this build of SpecChat ships one (it is installed with the
    model), else ``lookup``."""
    if args.draft is not None:
        return args.draft
    return DEFAULT_HEAD_NAME if _is_the_default_model(args.model) and shipped_head() is not None else "lookup"


def _is_the_default_model(model: str | None) -> bool:
    """Whether ``--model`` leaves the default model in place, or names it (by its name or folder, at any
    bit-width): its draft head drafts for it either way (a newcomer's `--model SmolLM2-135M-Instruct-int8` drafted
    with lookup where `--bits 8` drafted with the head)."""
    if model is None:
        return True
    try:
        folder = store.find_model(model).resolve()
    except ModelImportError:  # said when the models load
        return False
    return any(folder == default_model.default_model_dir(bits).resolve() for bits in (4, 8, 16))


def decoding_of(args: argparse.Namespace, mode: str) -> Decoding:
    """``--mode auto|ar|spec`` and ``--draft lookup|NAME|PATH`` as one decoding choice (Auto drafts with the draft
    model or head ``--draft`` names, if any, and prompt lookup)."""
    if mode == "auto":
        return Decoding.AUTO
    if mode == "ar":
        return Decoding.AUTOREGRESSIVE
    return Decoding.PROMPT_LOOKUP if draft_choice(args) == "lookup" else Decoding.DRAFT_MODEL


def _draft_name(args: argparse.Namespace) -> str | None:
    """The draft model or head the run uses (``--draft NAME|FOLDER``, or the default head, with a speculative
    mode), else None."""
    choice = draft_choice(args)
    return choice if args.mode != "ar" and choice != "lookup" else None


def _default_k(args: argparse.Namespace) -> int:
    """K without ``--k``: a draft head's (each of its drafts costs a pass of its own), else the general default."""
    name = _draft_name(args)
    if name is None:
        return SPECULATIVE.k
    if name == DEFAULT_HEAD_NAME:
        return HEAD_K
    try:
        return HEAD_K if is_head_folder(store.find_model(name)) else SPECULATIVE.k
    except ModelImportError:  # said when the models load
        return SPECULATIVE.k


def unused_options(args: argparse.Namespace) -> list[str]:
    """One note per option given that the run will not use (so that nothing is ignored silently)."""
    notes = []
    serve = getattr(args, "command", None) == "serve"  # (its --k and --adaptive-k: the defaults of requests for a fixed mode)
    if args.mode == "ar":
        given = [("--draft", args.draft), ("--draft-device", args.draft_device)]
        if not serve:
            given += [("--k", args.k), ("--adaptive-k", args.adaptive_k or None)]
        notes += [
            f"{option} is unused with --mode ar (autoregressive decoding drafts nothing); add --mode spec to use it"
            for option, value in given
            if value is not None
        ]
    elif args.draft_device is not None and _draft_name(args) is None:
        notes.append("--draft-device is unused: prompt lookup runs no draft model; give --draft PATH to use one")
    if args.mode in ("auto", "compare") and args.adaptive_k and not serve:
        run = "Auto" if args.mode == "auto" else "compare runs plain decoding and Auto, which"
        notes.append(f"--adaptive-k is unused with --mode {args.mode} ({run} always chooses K); it applies to --mode spec")
    if args.k is not None and not serve:
        if args.mode in ("auto", "compare"):
            run = "Auto" if args.mode == "auto" else "compare runs plain decoding and Auto, which"
            notes.append(f"--k is unused with --mode {args.mode} ({run} chooses K per step, 0 to {MAX_K}); it is the K of --mode spec")
        elif args.mode == "spec" and args.adaptive_k:
            notes.append("--k is unused with --adaptive-k (K is chosen per step, as Auto chooses it); leave --adaptive-k out for a fixed K")
    if getattr(args, "remote", "") is None:  # (generate and chat)
        notes += [f"{flag} is unused without --remote" for flag, value
                  in (("--remote-model", args.remote_model), ("--api-key", args.api_key)) if value is not None]
    if args.bits is not None and args.model is not None:
        notes.append("--bits is unused with --model (it picks the bit-width of the embedded default model)")
    # serve: --temperature is only the default of requests, which may send their own and sample
    if getattr(args, "command", None) != "serve" and SamplingSettings(temperature=args.temperature).greedy:
        notes += [
            f"{flag} is unused with greedy decoding ({GREEDY_WHY}); give --temperature above 0 to sample"
            for flag, name in SAMPLING_ONLY.items()
            if getattr(args, name) != getattr(SAMPLING, name)
        ]
    return notes


def decoding_settings(args: argparse.Namespace, mode: str) -> GenerationSettings:
    """The decoding choice, rolling context and K of the model options (``add_model_options``), default sampling;
    validated, ``--threads`` too.

    Raises:
        SettingError: a setting out of range (the message names it).
        ValueError: an empty --model or --draft.
    """
    for flag, value, other in (("--model", args.model, ""), ("--draft", args.draft, ", or lookup")):
        if value is not None and not value.strip():  # (`--model "$MODEL"` with MODEL unset ran the default silently)
            raise ValueError(f"{flag} is empty: give an installed model's name or a model folder{other}, or leave "
                             f"{flag} out for the default")
    settings = GenerationSettings(
        decoding=decoding_of(args, mode),
        context=ContextSettings(n_ctx=CONTEXT.n_ctx if args.n_ctx is None else args.n_ctx, n_keep=args.n_keep,
                                n_discard=args.n_discard),
        speculative=SpeculativeSettings(k=_default_k(args) if args.k is None else args.k, adaptive=args.adaptive_k),
    )
    settings.validate()
    if args.k is not None and getattr(args, "command", None) == "serve":
        # serve keeps --k as the K of requests that ask a fixed mode, whatever its own mode: a K out of range
        # started the server, and each such request was then refused as if its client had sent it
        settings.speculative.validate(k=True)
    check_threads(args.threads)
    return settings


def fit_n_ctx(settings: GenerationSettings, spec: ModelSpec, given: bool) -> GenerationSettings:
    """``settings`` with an n_ctx the models take, decided before any model loads (the fixed range is checked
    earlier, ``decoding_settings``): the target's config.json's trained length or sliding window
    (``max_context_of``), and a draft model's sliding window (its cache must stay inside it, ``model.check_window``;
    a draft only drafts worse past its trained length, and a draft head has neither: it follows the target).

    Args:
        settings: the decoding settings of the command's options.
        spec: the models found.
        given: whether --n-ctx was given; if not, the default shrinks to a shorter model's length (as the window's
            Context length box does), else a value past it is refused.

    Raises:
        ValueError: a given n_ctx past a model's bound (the message says which model's).
        SettingError: --n-keep or --n-discard past the shortened default.
    """
    bounds = [(max_context_of(spec.target_dir), Path(spec.target_dir).name)]
    if spec.draft_dir is not None and not is_head_folder(spec.draft_dir):
        bounds.append((sliding_window_of(read_config(spec.draft_dir)), f"the draft model {Path(spec.draft_dir).name}"))
    n_ctx = settings.context.n_ctx
    known = [(bound, name) for bound, name in bounds if bound is not None]
    if not known or n_ctx <= min(bound for bound, _ in known):
        return settings
    bound, name = min(known, key=lambda known_bound: known_bound[0])  # (the target's where both are as short)
    if not given:
        fitted = replace(settings, context=replace(settings.context, n_ctx=bound))
        fitted.validate()  # (an --n-keep or --n-discard may not fit the shorter context)
        return fitted
    raise ValueError(f"--n-ctx must be in [{MIN_N_CTX}, {bound}], got {n_ctx}: {name} reads at most {bound} tokens")


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_folders(args: argparse.Namespace) -> ModelSpec:
    """The models the model options name: their folders (the default model fetched if needed, progress on
    stderr), devices, precision and threads; notes on unused options are printed first.

    Raises:
        ModelFetchError / ValueError: a model that cannot be found or fetched, a device OpenVINO does not find here
            (the message says what to do).
    """
    for note in unused_options(args):
        print(f"note: {note}", file=sys.stderr)
    draft = _draft_name(args)
    for flag, device in (("--device", args.device), ("--draft-device", args.draft_device if draft else None)):
        problem = device and unavailable_device(device)
        if problem:
            raise ValueError(f"{flag}: {problem}")
    target = store.find_model(args.model) if args.model else default_model.ensure_default_model(args.bits or DEFAULT_BITS, progress=_progress)
    if args.model and args.draft is None and draft == DEFAULT_HEAD_NAME:
        ensure_default_head(_progress)  # (the default model named: its head, installed with it, may have been removed)
    draft = _draft_folder(draft) if draft else None
    if draft is not None and is_head_folder(draft):  # (a head made for another model: said as `models pair` says it)
        check_head_made_for(target, draft)
    elif draft is not None:  # (another tokenizer, from the manifests: said before a minute's load, not after it)
        check_pair_manifests(target, draft)
    precision = PrecisionSettings(args.precision, args.kv_cache_precision, args.dynamic_quantization, args.fast_prefill)
    return ModelSpec(target, args.device, draft, args.draft_device or args.device, precision, args.threads)


def _draft_folder(name: str) -> Path:
    """The folder of ``--draft NAME|FOLDER``; a refusal says what else --draft takes (a newcomer's `--draft head`,
    after reading "[spec/head]", was told of installed models only, not of ``lookup``).

    Raises:
        ModelImportError: no such model (the message says what --draft takes).
    """
    try:
        return store.find_model(name)
    except ModelImportError as error:
        raise restated(ModelImportError, "--draft takes lookup (prompt lookup), an installed model's name or a "
                       "model folder: ", error) from None


#: llama.cpp's names of options SpecChat has under another name (llama-cli, llama-server, llama-speculative), or
#: None for one with no equivalent (then :data:`NO_EQUIVALENT` says why).
LLAMA_CPP_NAMES = {
    "--draft-max": "--k", "--draft-n": "--k", "-md": "--draft", "--model-draft": "--draft", "-c": "--n-ctx",
    "--ctx-size": "--n-ctx", "-n": "--max-new-tokens", "--n-predict": "--max-new-tokens", "--keep": "--n-keep",
    "-t": "--threads", "-s": "--seed", "-m": "--model", "-dev": "--device", "-devd": "--draft-device",
    "--device-draft": "--draft-device", "--draft-min": None, "--draft-p-min": None,
}  # fmt: skip
NO_EQUIVALENT = "--mode auto (the default) and --adaptive-k choose K each step"


def llama_cpp_hint(extras: list[str], options: dict) -> str:
    """For the arguments a command did not recognize, SpecChat's name of each that is a llama.cpp option this
    command has (``options``: its parser's option strings): ``llama.cpp's --draft-max is --k here``; "" for none
    (a llama.cpp user's `--draft-max 8` and `-c 512` were "unrecognized arguments" and nothing more)."""
    hints = []
    for extra in extras:
        name = extra.split("=", 1)[0]
        if name not in LLAMA_CPP_NAMES or name in options:
            continue
        ours = LLAMA_CPP_NAMES[name]
        if ours is None:
            hints.append(f"llama.cpp's {name} has no equivalent here: {NO_EQUIVALENT}")
        elif ours in options:
            hints.append(f"llama.cpp's {name} is {ours} here")
    return ", ".join(dict.fromkeys(hints))
