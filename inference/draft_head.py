"""Draft heads: small networks that draft from the target's own hidden states, loaded from a folder.

A draft head (EAGLE, Li et al., arXiv 2401.15077) reads, at position ``j``, the target's final hidden state
``h_j`` and the token ``x_{j+1}`` that followed, and predicts the token after that, ``x_{j+2}``, over a draft
vocabulary of frequent tokens (FR-Spec, Zhao et al., arXiv 2502.14856), together with its guess of the next hidden
state, which drafts the token after. It has no tokenizer and no embedding of its own beyond its vocabulary's rows:
it only works beside the target it was trained for, which must expose its hidden states
(``model.HIDDEN_STATES``). A *fused* head (EAGLE-3, Li et al., arXiv 2503.01840, section 3.3; its manifest names
``feature_layers``) also reads, at its first drafting step, the outputs of those decoder layers of the target at
``j`` (``layer_features``: the target is compiled with them, ``model.load_model``'s ``feature_layers``), and zeros at
the steps after, as it was trained (``tools/draft_head/head.py``).

A head folder holds a stateful OpenVINO IR (``openvino_model.xml/.bin``; inputs ``input_ids``,
``hidden_states``, a fused head's ``layer_features`` (float32 ``[1, S, len(feature_layers), hidden]``),
``attention_mask``, ``position_ids``, ``beam_idx``, ``logits_to_keep``; outputs ``logits`` over
the draft vocabulary and ``draft_hidden``, both for the last ``logits_to_keep`` positions), ``config.json`` (its
RoPE, the target's), and the manifest ``draft_head.json``: the draft vocabulary (target token ids, most frequent
first), the target it was trained for (name, hidden size, vocabulary size, tokenizer fingerprint), a fused head's
``feature_layers`` (0-based decoder layers of the target, in the order the input stacks them), how it was trained
and rebuilt, and the SHA-256 of each other file, which :func:`load_head` checks (:func:`damaged_files`).
``tools/draft_head`` builds one; the default model's head ships in ``inference/models/data``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import openvino as ov

from .advice import REINSTALL_HEAD, advised
from .devices import base_properties, capped_below_bf16, core
from .kv_cache import KVCache
from .layer_features import LAYER_FEATURES
from .model import (
    HEAD_MANIFEST,
    HIDDEN_STATES,
    MODEL_FILES,
    LoadedModel,
    ModelLoadError,
    TokenizerMismatchError,
    openvino_message,
)
from .rope import RopeParameters, RopeUnsupportedError

#: Version of a head folder that reads the target's last hidden state only (what versions before fused heads read).
HEAD_FORMAT = 1
#: Version of a head folder that also reads decoder-layer outputs (``feature_layers``): a version that reads only
#: HEAD_FORMAT refuses it by its format in words, instead of failing inside OpenVINO on the extra input.
FUSED_HEAD_FORMAT = 2
#: The head's input that takes target hidden states.
HIDDEN_INPUT = "hidden_states"
#: The head's output: its predicted next hidden state, for drafting the token after.
DRAFT_HIDDEN = "draft_hidden"
#: Draft tokens per step a head drafts unless told otherwise. The free-chat benchmark (``bench/free_chat.py``, 54
#: prompts x 3, AMD EPYC) measured the shipped head at K = 1 against K = 2: 1.07x vs 1.01x at the chat defaults,
#: 1.23x vs 1.26x greedy (within the run-to-run noise of the pass costs; the previous head: 1.19x vs 1.16x).
HEAD_K = 1

#: SHA-256s already computed in this process, by (path, size, mtime in ns): a head loaded again is not rehashed.
_HASHES: dict[tuple[str, int, int], str] = {}


def is_head_folder(folder: str | Path) -> bool:
    """Whether ``folder`` holds a draft head (its manifest ``draft_head.json``)."""
    return (Path(folder) / HEAD_MANIFEST).is_file()


@dataclass
class LoadedHead:
    """A compiled draft head.

    Attributes:
        folder: the head folder.
        device: OpenVINO device it is compiled for.
        compiled: the ``ov.CompiledModel`` (see the module docstring).
        vocab: int64 ``[draft_vocab]``: the target token id of each draft-vocabulary entry.
        manifest: the parsed ``draft_head.json``.
        rope: RoPE parameters for rolling its KV cache, or None (``rope_error`` says why).
        rope_error: why ``rope`` is None (the error), else None.
        ir_model: the ``ov.Model`` it was compiled from (kept for the reason ``LoadedModel.ir_model`` is).
    """

    folder: Path
    device: str
    compiled: ov.CompiledModel
    vocab: np.ndarray
    manifest: dict
    rope: RopeParameters | None
    rope_error: RopeUnsupportedError | None
    ir_model: ov.Model | None = field(default=None, repr=False)

    @property
    def hidden_size(self) -> int:
        """Width of the target hidden states it reads."""
        return int(self.manifest["target"]["hidden_size"])

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target's decoder layers whose outputs a fused head reads (its ``layer_features`` input); () for a
        head that reads the final hidden state only."""
        return tuple(self.manifest.get("feature_layers", ()))

    @property
    def target_outputs(self) -> tuple[str, ...]:
        """The target's per-token outputs it reads, which the target's KV cache must keep (``KVCache``'s
        ``kept_outputs``): the last hidden state, and a fused head's layer features."""
        return (HIDDEN_STATES, LAYER_FEATURES) if self.feature_layers else (HIDDEN_STATES,)

    def inputs_from_target(self, target_cache: KVCache, start: int, end: int) -> dict[str, np.ndarray]:
        """Its inputs at positions ``[start, end)`` besides the tokens: the target's hidden states there (float32
        ``[1, end - start, hidden]``) and a fused head's layer features (float32 ``[1, end - start, layers,
        hidden]``), read from ``target_cache``, which kept ``target_outputs``. Views of the cache's rows, valid until
        its next pass (``KVCache.rows``): copy them to keep them longer.

        Raises:
            ValueError: the cache does not keep those outputs, or the range is not cached (``KVCache.rows``).
        """
        inputs = {HIDDEN_INPUT: target_cache.rows(start, end, HIDDEN_STATES)[None]}
        if self.feature_layers:
            inputs[LAYER_FEATURES] = target_cache.rows(start, end, LAYER_FEATURES)[None]
        return inputs

    def further_draft_inputs(self, hidden: np.ndarray) -> dict[str, np.ndarray]:
        """Its inputs besides the token at a draft after the first: its own predicted hidden state ``hidden``
        (float32 ``[hidden]``, the last ``draft_hidden`` row) and, for a fused head, zero layer features (float32
        ``[1, 1, layers, hidden]``), as it was trained (EAGLE-3's later drafting steps have no target features)."""
        inputs = {HIDDEN_INPUT: hidden[None, None]}
        if self.feature_layers:
            inputs[LAYER_FEATURES] = self._no_features
        return inputs

    @cached_property
    def _no_features(self) -> np.ndarray:
        """float32 ``[1, 1, layers, hidden]`` zeros: a fused head's layer features at a further draft (read only)."""
        zeros = np.zeros((1, 1, len(self.feature_layers), self.hidden_size), dtype=np.float32)
        zeros.flags.writeable = False
        return zeros

    @property
    def target_name(self) -> str:
        """Name of the model it was trained for (e.g. ``SmolLM2-135M-Instruct``)."""
        return str(self.manifest["target"]["name"])

    @property
    def sliding_window(self) -> int | None:
        """Heads attend to all their positions (the engine asks every draft for its window)."""
        return None


def read_head_manifest(folder: str | Path) -> dict:
    """The parsed ``draft_head.json`` of a head folder.

    Raises:
        ModelLoadError: missing, unreadable, of another format, without a draft vocabulary, or with
            ``feature_layers`` that are not a list of distinct layer numbers (ints >= 0) or that its format denies.
    """
    path = Path(folder) / HEAD_MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("format") not in (HEAD_FORMAT, FUSED_HEAD_FORMAT):
            raise ValueError(f"format {manifest.get('format')!r}, this version reads {HEAD_FORMAT} and {FUSED_HEAD_FORMAT}")
        if not manifest.get("draft_vocab") or not manifest.get("target", {}).get("hidden_size"):
            raise ValueError("no draft vocabulary or target hidden size")
        layers = manifest.get("feature_layers", [])
        if not isinstance(layers, list) or len(set(layers)) != len(layers) or not all(
            isinstance(layer, int) and not isinstance(layer, bool) and layer >= 0 for layer in layers
        ):
            raise ValueError(f"feature_layers {layers!r} is not a list of distinct layer numbers")
        if (manifest["format"] == FUSED_HEAD_FORMAT) != bool(layers):
            raise ValueError(f"format {manifest['format']} with feature_layers {layers!r} (format {FUSED_HEAD_FORMAT} "
                             "is a head that reads decoder layers, format 1 one that reads none)")
    except (OSError, ValueError, AttributeError) as error:
        raise ModelLoadError(f"{path} is unreadable ({error}); reinstall the draft head") from error
    return manifest


def file_sha256(path: Path) -> str:
    """SHA-256 (64 hex digits) of a file's bytes, computed once per (path, size, modification time) in a process.

    Raises:
        OSError: the file is missing or unreadable.
    """
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with path.open("rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def damaged_files(folder: str | Path, manifest: dict) -> list[str]:
    """The files of a head folder that differ from the SHA-256s its manifest records (``manifest["sha256"]``: file
    name -> hex digest), each with why, e.g. ``["openvino_model.bin (its SHA-256 differs)", "config.json
    (missing)"]``; empty when all match or the manifest records none (heads exported before it did).
    """
    damaged = []
    for name, expected in (manifest.get("sha256") or {}).items():
        try:
            if file_sha256(Path(folder) / name) != expected:
                damaged.append(f"{name} (its SHA-256 differs)")
        except FileNotFoundError:
            damaged.append(f"{name} (missing)")
        except OSError as error:
            damaged.append(f"{name} (unreadable: {error.strerror or error})")
    return damaged


#: A draft head's compile properties on a CPU (besides ``devices.base_properties``): float32 compute and KV cache.
#: Tried and left out (default model's head, Xeon with AMX, quiet, one-token pass after a one-token target pass, in
#: turns with the same head at these properties): DYNAMIC_QUANTIZATION_GROUP_SIZE 0 (1.60 against 1.43 ms; its
#: logits within 0.14 of these, the same argmax on 425 rows), INFERENCE_NUM_THREADS 1 (1.99 against 1.64 ms).
HEAD_CPU_PROPERTIES = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


#: Set besides where ``ONEDNN_MAX_CPU_ISA`` caps the kernels below bf16 (``devices.base_properties``): with the
#: plugin's dynamic quantization (its default on a CPU with AMX), the head's first pass failed on this Xeon under
#: ``ONEDNN_MAX_CPU_ISA=AVX2`` ("FullyConnectedCompressed ... could not create a primitive descriptor"), heads exported
#: before 2026-12-06 and after alike; without it the head runs and drafts the same argmax.
HEAD_CPU_PROPERTIES_CAPPED = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def head_rope(folder: str | Path) -> RopeParameters:
    """The RoPE parameters of the head in ``folder`` (its ``config.json``), which its KV cache rolls with.

    Raises:
        RopeUnsupportedError: ``config.json`` is missing (the message says to reinstall SpecChat, whose draft head
            it is, or to delete the folder: advice key "reinstall-head", not a chat model's "reinstall"), or it
            describes no RoPE the rolling context can shift.
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise advised(RopeUnsupportedError, f"{folder / 'config.json'} is missing: RoPE parameters are unknown, so the "
                      "rolling context cannot shift the draft head's KV cache", "reinstall-head", REINSTALL_HEAD, ". ",
                      folder=str(folder), name=folder.name)
    return RopeParameters.from_model_dir(folder)


def load_head(folder: str | Path, device: str = "CPU", num_threads: int | None = None) -> LoadedHead:
    """Read, check and compile a draft head folder. Its files are checked against the SHA-256s its manifest records
    (:func:`damaged_files`; hashed once per process while they are unchanged).

    On a CPU it computes and caches its keys and values in float32 (``HEAD_CPU_PROPERTIES``), as it was trained,
    rather than with the device's defaults (bf16 compute and a u8 KV cache on a Xeon with AMX): the default model's
    head then passed in 0.76 ms instead of 0.85 (fused attention, Xeon with AMX, quiet, medians of 200 one-token
    passes after 300 cached tokens) and its drafts are the trained head's (with bf16 and a u8 cache 4 of 40
    argmaxes differed on random inputs). The precision only changes which tokens are proposed, never the output.

    Raises:
        ModelLoadError: the folder, a file or the manifest is missing or unreadable, a file differs from its
            recorded SHA-256, OpenVINO cannot compile it, or its manifest names ``feature_layers`` and its IR has
            no ``layer_features`` input (or the other way round).
    """
    folder = Path(folder).expanduser()
    missing = [name for name in (*MODEL_FILES, HEAD_MANIFEST) if not (folder / name).is_file()]
    if missing:
        raise ModelLoadError(f"draft head folder {folder} is incomplete: missing {', '.join(missing)}; reinstall it")
    manifest = read_head_manifest(folder)
    damaged = damaged_files(folder, manifest)
    if damaged:
        raise ModelLoadError(f"the draft head in {folder} is damaged: {', '.join(damaged)}; reinstall it")
    properties = base_properties(device) | (HEAD_CPU_PROPERTIES if device == "CPU" else {})
    if device == "CPU" and capped_below_bf16():
        properties |= HEAD_CPU_PROPERTIES_CAPPED
    if num_threads:
        properties["INFERENCE_NUM_THREADS"] = int(num_threads)
    try:
        model = core().read_model(folder / "openvino_model.xml")
        compiled = core().compile_model(model, device, properties)
    except (RuntimeError, OSError) as error:
        raise ModelLoadError(
            f"cannot load the draft head in {folder} on {device}: {openvino_message(error)}; reinstall it"
        ) from error
    fused = any(LAYER_FEATURES in port.get_names() for port in compiled.inputs)
    if fused != bool(manifest.get("feature_layers")):
        raise ModelLoadError(f"the draft head in {folder} is inconsistent: its manifest names feature_layers "
                             f"{manifest.get('feature_layers', [])}, and its IR has {'a' if fused else 'no'} "
                             f"{LAYER_FEATURES} input; reinstall it")
    try:
        rope, rope_error = head_rope(folder), None
    except RopeUnsupportedError as error:
        rope, rope_error = None, error.with_traceback(None)  # kept without the frames of the load
    vocab = np.asarray(manifest["draft_vocab"], dtype=np.int64)
    return LoadedHead(folder, device, compiled, vocab, manifest, rope, rope_error, ir_model=model)


def check_head_fits(target: LoadedModel, head: LoadedHead) -> None:
    """Refuse a head trained for another target: it must read hidden states of the target's width, draft tokens
    of its vocabulary (same tokenizer fingerprint), the target must expose its hidden states, and, for a fused head,
    have the decoder layers it reads and be compiled with their outputs (``LoadedModel.feature_layers``).

    Raises:
        TokenizerMismatchError: with what differs and what to do.
    """
    problems = head_misfits(head.manifest, target.hidden_size, target.vocab_size, lambda: target.tokenizer_fingerprint,
                            lambda: target.decoder_layers)
    if not problems and target.feature_layers != head.feature_layers:
        problems.append(f"it was loaded with the outputs of decoder layers {list(target.feature_layers)}, the head "
                        f"reads those of {list(head.feature_layers)} (load the target with the head's feature_layers)")
    if problems:
        raise TokenizerMismatchError(
            f"the draft head {head.folder.name} was trained for {head.target_name}, and {target.folder.name} does not "
            f"fit it ({'; '.join(problems)}): choose a draft model or prompt lookup"
        )


def head_misfits(
    manifest: dict,
    hidden_size: int | None,
    vocab_size: int,
    tokenizer_fingerprint: Callable[[], str],
    decoder_layers: Callable[[], int | None],
) -> list[str]:
    """What keeps a target from fitting a head (the rule of :func:`check_head_fits`, also applied to folders by
    :func:`inference.models.inspect.check_pair`); empty when it fits.

    Args:
        manifest: the head's ``draft_head.json`` (:func:`read_head_manifest`).
        hidden_size: width of the target's hidden states, None when it exposes none.
        vocab_size: width of the target's logits.
        tokenizer_fingerprint: computes the target's tokenizer fingerprint (called only when the vocabulary
            sizes match).
        decoder_layers: counts the target graph's decoder layers (``layer_features.decoder_layer_count``; None:
            not a Llama-style graph); called only for a fused head (a manifest naming ``feature_layers``).

    Returns:
        Readable differences, e.g. ``["hidden size 64, the head reads 576"]``, ``["the head reads decoder layer
        99, the target has 30"]``.
    """
    trained_for = manifest["target"]
    problems = []
    if hidden_size is None:
        problems.append("the target exposes no hidden states")
    elif hidden_size != int(trained_for["hidden_size"]):
        problems.append(f"hidden size {hidden_size}, the head reads {trained_for['hidden_size']}")
    if vocab_size != int(trained_for["vocab_size"]):
        problems.append(f"vocabulary size {vocab_size}, the head drafts over {trained_for['vocab_size']}")
    elif tokenizer_fingerprint() != trained_for["tokenizer_fingerprint"]:
        problems.append("another tokenizer")
    layers = manifest.get("feature_layers", [])
    if layers:
        count = decoder_layers()
        if count is None:
            problems.append(f"the head reads the outputs of decoder layers {layers}, and the target's layers cannot "
                            "be found (not a Llama-style graph)")
        elif missing := [layer for layer in layers if layer >= count]:
            problems.append(f"the head reads decoder layer{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(map(str, missing))}, the target has {count}")
    return problems
