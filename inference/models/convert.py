"""Converting a Hugging Face transformers checkpoint to OpenVINO IR at 4, 8 or 16 bits.

The work runs in a separate Python process (``python -m inference.models.convert ...``), so torch, transformers,
optimum-intel and nncf are never imported into the app or the engine, a crash cannot take the app down, and
cancelling kills the process. Those libraries are the optional *conversion extra*::

    pip install 'specchat[convert]'

Without it, :func:`convert_checkpoint` and :func:`create_tokenizer_irs` raise
:class:`ConversionExtraMissing` before doing anything.

Steps (the worker prints one progress line per step; the parent turns them into
:class:`inference.models.progress.ProgressEvent` s):

1. export with optimum-intel (``main_export``, task ``text-generation-with-past``, stateful, weights kept as
   FP16, tokenizer and detokenizer IRs converted by openvino-tokenizers);
2. for 4 and 8 bits, compress the weights with ``nncf.compress_weights``: INT8_ASYM per channel, or
   INT4_ASYM with ratio 1.0 and a group size that divides the input channels of every compressed layer
   (:func:`choose_group_size`; the usual 128 fails on SmolLM2's hidden size 576, see NOTES). Embeddings and
   the LM head stay 8-bit (NNCF's backup mode).

Time on 2 cores: about 30-60 s for a tiny model (mostly imports), a few minutes for a 135M-1B model.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import queue
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from ..model import MODEL_FILES, REQUIRED_FILES
from . import store
from .disk_space import require_space
from .errors import ModelImportError, OperationCancelled, advised
from .inspect import CONFIG_NAME, HF_TOKENIZER_FILES, missing_files
from .progress import ProgressEvent, check_cancel, reporter

CONVERT_EXTRA_INSTALL = "pip install 'specchat[convert]'"
#: Modules of the conversion extra, with the pip requirement that provides each.
EXTRA_MODULES = {"torch": "torch", "transformers": "transformers", "optimum.intel": "optimum-intel", "nncf": "nncf"}
#: Group sizes tried for 4-bit weights, best first; -1 (one scale per output channel) is the fallback.
GROUP_SIZES = (128, 64, 32, 16)
_PROGRESS_PREFIX = "@@specchat-progress "
#: Files of a checkpoint folder that are weights (not copied into the model; the IR replaces them).
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                      "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip


class ConversionExtraMissing(ModelImportError):
    """The optional conversion extra (torch, transformers, optimum-intel, nncf) is not installed."""


class ConversionError(ModelImportError):
    """The conversion process failed; the message quotes its last lines."""


def missing_extra_modules() -> list[str]:
    """pip requirement names of the conversion extra that are not importable (nothing is imported)."""
    missing = []
    for module, requirement in EXTRA_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(requirement)
    return missing


def conversion_available() -> bool:
    """Whether the conversion extra is installed."""
    return not missing_extra_modules()


def require_conversion_extra(purpose: str = "convert a transformers checkpoint") -> None:
    """Raise :class:`ConversionExtraMissing` (saying how to install it) unless the extra is installed."""
    missing = missing_extra_modules()
    if missing and getattr(sys, "frozen", False):  # an installed application bundle cannot load Python packages
        raise advised(
            ConversionExtraMissing,
            f"to {purpose}, SpecChat needs its optional conversion extra, which the installed application does not include",
            "extra-not-bundled",
            ". ",
            install=CONVERT_EXTRA_INSTALL,
        )
    if missing:
        raise ConversionExtraMissing(
            f"to {purpose}, SpecChat needs its optional conversion extra ({', '.join(missing)} missing). "
            f"Install it with `{CONVERT_EXTRA_INSTALL}` (about 1.5 GB, a few minutes), then try again; "
            "or choose a pre-converted OpenVINO model or a GGUF file, which need no extra."
        )


# --- group size -----------------------------------------------------------------------------------


def _safetensors_shapes(path: Path) -> dict[str, tuple[list[int], str]]:
    """Tensor name -> (shape, dtype) from a .safetensors header (reads the header only)."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        if length > 100 * 2**20:
            raise ValueError(f"{path.name}: implausible safetensors header length {length}")
        header = json.loads(fh.read(length))
    return {name: (info["shape"], info["dtype"]) for name, info in header.items() if name != "__metadata__"}


def checkpoint_tensors(checkpoint: Path) -> dict[str, tuple[list[int], str]]:
    """All tensors of a checkpoint's ``*.safetensors`` files (name -> (shape, dtype)); {} if it has none."""
    tensors: dict[str, tuple[list[int], str]] = {}
    for file in sorted(Path(checkpoint).glob("*.safetensors")):
        tensors.update(_safetensors_shapes(file))
    return tensors


def compressed_input_channels(checkpoint: Path) -> dict[str, int]:
    """Input channels of the layers 4-bit compression applies to: name -> last dimension.

    Every 2-D ``*.weight`` except embeddings and the LM head (which NNCF keeps at 8 bits). Read from the
    safetensors headers; for checkpoints without safetensors, from ``config.json`` (hidden size, heads x head
    size, intermediate size).
    """
    channels: dict[str, int] = {}
    for name, (shape, _) in checkpoint_tensors(checkpoint).items():
        if len(shape) != 2 or not name.endswith(".weight"):
            continue
        if any(part in name for part in ("embed", "lm_head", "wte", "wpe", "output.weight")):
            continue
        channels[name] = int(shape[1])
    if channels:
        return channels
    config = json.loads((Path(checkpoint) / CONFIG_NAME).read_text(encoding="utf-8"))
    hidden = int(config.get("hidden_size") or config.get("n_embd") or config.get("d_model"))
    heads = int(config.get("num_attention_heads") or config.get("n_head") or 1)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inner = int(config.get("intermediate_size") or config.get("n_inner") or 4 * hidden)
    return {"hidden_size": hidden, "attention output (heads x head_dim)": heads * head_dim, "intermediate_size": inner}


def choose_group_size(checkpoint: Path | str, preferred: int = 128) -> tuple[int, str]:
    """Pick a 4-bit group size that divides every compressed layer's input channels.

    Tries ``preferred`` then the smaller sizes of :data:`GROUP_SIZES`; if none divides them all, returns -1
    (per-channel scales, always valid but less accurate).

    Returns:
        ``(group_size, reason)``, the reason a sentence for the user, e.g.
        ``"group size 64 (128 does not divide 576, the input channels of model.layers.0.mlp.up_proj.weight)"``.

    Raises:
        ModelImportError: the checkpoint has neither safetensors files nor a usable config.json.
    """
    checkpoint = Path(checkpoint)
    try:
        channels = compressed_input_channels(checkpoint)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ModelImportError(f"cannot read the layer shapes of {checkpoint} ({error}); is it a transformers checkpoint?") from error
    candidates = [preferred, *[g for g in GROUP_SIZES if g < preferred]]
    gcd = 0
    for value in channels.values():
        gcd = math.gcd(gcd, value)
    rejected = []
    for size in candidates:
        if gcd % size == 0:
            if not rejected:
                return size, f"group size {size} (divides the input channels of all {len(channels)} compressed layers)"
            return size, f"group size {size} ({'; '.join(rejected)})"
        culprit = next(name for name, value in channels.items() if value % size)
        rejected.append(f"{size} does not divide {channels[culprit]}, the input channels of {culprit}")
    return -1, f"per-channel scales (group size -1): no group size of {', '.join(map(str, candidates))} divides all input channels ({'; '.join(rejected)})"


def estimate_sizes(checkpoint: Path, bits: int) -> tuple[int, int]:
    """``(peak_bytes, final_bytes)`` a conversion writes: the FP16 export plus the compressed copy, and the result."""
    tensors = checkpoint_tensors(checkpoint)
    if tensors:
        params = sum(math.prod(shape) for shape, _ in tensors.values())
    else:  # no safetensors: assume the weight files are 16-bit
        params = sum(p.stat().st_size for p in Path(checkpoint).iterdir() if p.suffix in _WEIGHT_SUFFIXES) // 2
    final = params * bits // 8
    return (params * 2 + (final if bits != 16 else 0), final)


def validate_checkpoint(checkpoint: Path) -> dict:
    """Check that a folder is a transformers causal-LM checkpoint; returns its config.json.

    Raises:
        ModelImportError: no config.json, no weights, or no tokenizer files (the message names them).
    """
    checkpoint = Path(checkpoint)
    config_path = checkpoint / CONFIG_NAME
    if not config_path.is_file():
        raise ModelImportError(f"{checkpoint} has no config.json: it is not a transformers checkpoint")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ModelImportError(f"{config_path} is not valid JSON ({error})") from error
    if not any(p.suffix in _WEIGHT_SUFFIXES for p in checkpoint.iterdir()):
        raise ModelImportError(f"{checkpoint} has no weight files (*.safetensors or pytorch_model*.bin)")
    if not any((checkpoint / name).is_file() for name in HF_TOKENIZER_FILES):
        raise ModelImportError(f"{checkpoint} has no tokenizer files ({', '.join(HF_TOKENIZER_FILES)}); SpecChat needs the tokenizer")
    return config


# --- the parent side --------------------------------------------------------------------------------


def convert_checkpoint(
    checkpoint: str | Path,
    bits: int = 4,
    name: str | None = None,
    *,
    group_size: int | None = None,
    source: str | None = None,
    replace: bool = False,
    progress=None,
    cancel: threading.Event | None = None,
    extra_manifest: dict | None = None,
) -> Path:
    """Convert a local transformers checkpoint into a model of the store, in a background process.

    Args:
        checkpoint: folder with config.json, ``*.safetensors`` (or ``pytorch_model*.bin``) and tokenizer files.
        bits: 4, 8 or 16.
        name: model name (default: ``<folder name>-int4`` / ``-int8`` / ``-fp16``).
        group_size: 4-bit group size; None = :func:`choose_group_size` (its choice is reported).
        source: what the manifest records as the source (default ``checkpoint:<path>``).
        replace: replace an installed model of the same name.
        progress: receives :class:`inference.models.progress.ProgressEvent` s.
        cancel: set it to kill the conversion; nothing is left in the store.
        extra_manifest: more manifest fields.

    Returns:
        The installed model folder (OpenVINO IR, tokenizer IRs, config.json, manifest with ``bits``,
        ``group_size`` and ``group_size_reason``).

    Raises:
        ConversionExtraMissing: the extra is not installed (before anything else).
        ValueError: bits not 4, 8 or 16; a group size that does not divide the input channels.
        ModelImportError: not a checkpoint, not enough disk space, the name is taken.
        ConversionError: the conversion process failed (its last lines are quoted).
        OperationCancelled: ``cancel`` was set.
    """
    store.check_bits(bits)
    require_conversion_extra()
    checkpoint = Path(checkpoint).expanduser().resolve()
    say = reporter(progress)
    validate_checkpoint(checkpoint)
    reason = ""
    if bits == 4:
        if group_size is None:
            group_size, reason = choose_group_size(checkpoint)
        else:
            bad = {k: v for k, v in compressed_input_channels(checkpoint).items() if group_size > 0 and v % group_size}
            if bad:
                layer, width = next(iter(bad.items()))
                raise ValueError(f"group size {group_size} does not divide {width}, the input channels of {layer}; omit --group-size to choose one automatically")
            reason = f"group size {group_size} (as requested)"
        say(ProgressEvent(f"4-bit weights with {reason}", stage="check"))
    name = f"{store.name_from(checkpoint.name)}-{store.BITS_SUFFIX[bits]}" if name is None else name
    peak, _ = estimate_sizes(checkpoint, bits)
    store.models_dir().mkdir(parents=True, exist_ok=True)
    require_space(store.models_dir(), peak, f"converting {checkpoint.name}")
    extra = {"bits": bits, "weight_format": {4: "INT4_ASYM", 8: "INT8_ASYM", 16: "FP16"}[bits], **(extra_manifest or {})}
    if bits == 4:
        extra.update(group_size=group_size, group_size_reason=reason)
    with store.build_model(name, source or f"checkpoint:{checkpoint}", "convert", replace=replace, progress=say, extra=extra) as build:
        command = ["export", "--source", str(checkpoint), "--output", str(build.folder), "--bits", str(bits)]
        if bits == 4:
            command += ["--group-size", str(group_size)]
        run_worker(command, say, cancel)
        check_cancel(cancel)
    return build.final


def create_tokenizer_irs(folder: str | Path, progress=None, cancel: threading.Event | None = None) -> None:
    """Write ``openvino_tokenizer.xml/.bin`` and ``openvino_detokenizer.xml/.bin`` from a folder's Hugging Face
    tokenizer files (in a background process; needs the conversion extra).

    Raises:
        ConversionExtraMissing, ConversionError, OperationCancelled.
    """
    require_conversion_extra("create tokenizer IRs")
    run_worker(["tokenizer", "--folder", str(Path(folder).resolve())], progress, cancel)


def run_worker(arguments: list[str], progress=None, cancel: threading.Event | None = None, timeout_s: float | None = None) -> None:
    """Run ``python -m inference.models.convert ARGUMENTS`` and relay its progress lines.

    Raises:
        ConversionError: it exited with a non-zero status (the message quotes the last lines of its output).
        OperationCancelled: ``cancel`` was set (the process is killed).
    """
    say = reporter(progress)
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "inference.models.convert", *arguments]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        text=True, errors="replace", bufsize=1,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()
    tail: deque[str] = deque(maxlen=40)

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    start = time.monotonic()
    finished = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise OperationCancelled("conversion cancelled; nothing was added to the model store")
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                raise ConversionError(f"the conversion took longer than {timeout_s:.0f} s and was stopped")
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            if line.startswith(_PROGRESS_PREFIX):
                try:
                    data = json.loads(line[len(_PROGRESS_PREFIX):])
                    say(ProgressEvent(data.get("message", ""), data.get("done"), data.get("total"), data.get("stage", "convert")))
                except ValueError:
                    pass
            elif line.strip():
                tail.append(line.rstrip())
        returncode = process.wait()
        finished = True
    finally:
        if not finished:
            _stop(process)
        reader.join(timeout=5)
    if returncode != 0:
        errors = [line for line in tail if "error" in line.lower() or "exception" in line.lower()]
        quoted = "\n".join((errors[-3:] if errors else list(tail)[-8:]))
        raise ConversionError(f"the conversion process failed (exit status {returncode}):\n{quoted}")


def _stop(process: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            process.kill()
        process.wait(timeout=10)


# --- the worker (runs in its own process) ----------------------------------------------------------


def _report(message: str, stage: str = "convert", done: int | None = None, total: int | None = None) -> None:
    sys.stdout.write(_PROGRESS_PREFIX + json.dumps({"message": message, "stage": stage, "done": done, "total": total}) + "\n")
    sys.stdout.flush()


def _block_torchvision() -> None:
    """Hide torchvision from transformers in this process.

    optimum-intel 2.2.0 requires torchvision, and a PyPI torchvision next to a CPU build of torch fails to
    import (``operator torchvision::nms does not exist``, see NOTES), which breaks transformers' model imports.
    Text models never need it; ``sys.modules[name] = None`` makes ``find_spec``/``import`` report it absent.
    """
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]


def _worker_export(source: Path, output: Path, bits: int, group_size: int | None) -> None:
    steps = 4 if bits != 16 else 3
    _report("Loading torch, transformers and optimum-intel...", "convert", 0, steps)
    _block_torchvision()
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    export_dir = output if bits == 16 else output / ".fp16-export"
    _report("Exporting the checkpoint to OpenVINO IR (FP16 weights) and converting the tokenizer...", "convert", 1, steps)
    main_export(
        str(source),
        str(export_dir),
        task="text-generation-with-past",
        ov_config=OVConfig(dtype="fp16"),
        stateful=True,
        convert_tokenizer=True,
        library_name="transformers",
    )
    if bits != 16:
        import nncf
        import openvino as ov

        mode = nncf.CompressWeightsMode.INT8_ASYM if bits == 8 else nncf.CompressWeightsMode.INT4_ASYM
        label = "INT8 per channel" if bits == 8 else f"INT4, group size {group_size}"
        _report(f"Compressing the weights ({label})...", "convert", 2, steps)
        core = ov.Core()
        model = core.read_model(export_dir / MODEL_FILES[0])
        kwargs = {"mode": mode}
        if bits == 4:
            kwargs.update(group_size=group_size, ratio=1.0)
        compressed = nncf.compress_weights(model, **kwargs)
        ov.save_model(compressed, output / MODEL_FILES[0], compress_to_fp16=False)
        del model, compressed
        for item in export_dir.iterdir():
            if item.name in MODEL_FILES:
                continue
            shutil.move(str(item), output / item.name)
        shutil.rmtree(export_dir)
    _report("Checking the exported files...", "convert", steps - 1, steps)
    missing = missing_files(output, REQUIRED_FILES)
    if missing:
        raise SystemExit(f"error: the export did not write {missing[0]} (the tokenizer may be of a kind openvino-tokenizers cannot convert)")
    _report("Conversion finished", "convert", steps, steps)


def _worker_tokenizer(folder: Path) -> None:
    _report("Loading transformers and openvino-tokenizers...", "convert")
    _block_torchvision()
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    _report("Converting the tokenizer to OpenVINO IR...", "convert")
    hf_tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer, detokenizer = convert_tokenizer(hf_tokenizer, with_detokenizer=True)
    ov.save_model(tokenizer, folder / "openvino_tokenizer.xml")
    ov.save_model(detokenizer, folder / "openvino_detokenizer.xml")
    _report("Tokenizer IRs written", "convert")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the conversion process (``python -m inference.models.convert``); see the module doc."""
    parser = argparse.ArgumentParser(prog="python -m inference.models.convert", description="SpecChat's conversion worker")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="transformers checkpoint -> OpenVINO IR folder")
    export.add_argument("--source", type=Path, required=True)
    export.add_argument("--output", type=Path, required=True)
    export.add_argument("--bits", type=int, choices=store.SUPPORTED_BITS, required=True)
    export.add_argument("--group-size", type=int, default=None)
    tokenizer = commands.add_parser("tokenizer", help="write tokenizer IRs from Hugging Face tokenizer files")
    tokenizer.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args(argv)
    if missing_extra_modules():
        print(f"error: the conversion extra is missing; install it with `{CONVERT_EXTRA_INSTALL}`", file=sys.stderr)
        return 3
    try:
        if args.command == "export":
            if args.bits == 4 and args.group_size is None:
                args.group_size, reason = choose_group_size(args.source)
                _report(f"4-bit weights with {reason}", "check")
            args.output.mkdir(parents=True, exist_ok=True)
            _worker_export(args.source, args.output, args.bits, args.group_size)
        else:
            _worker_tokenizer(args.folder)
    except SystemExit:
        raise
    except Exception as error:  # reported to the parent through the exit status and the last lines
        import traceback

        traceback.print_exc()
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
