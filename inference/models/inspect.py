"""Looking inside a model folder without compiling it: layout, weight bit-width, tokenizer, RoPE, pairing.

Everything here reads files only (``ov.Core.read_model`` memory-maps the weights, and the tokenizer IRs
are small), so it takes about a second for a small model and a few seconds for a 7B one: cheap enough to
run on import and when the user picks a draft.

Two folder layouts are recognised (both hold ``openvino_model.xml``/``.bin``):

- ``openvino-genai``: the tokenizer and detokenizer IRs (``openvino_tokenizer.xml``/``openvino_detokenizer.xml``)
  are present; ``config.json`` may be missing (a GGUF converted by openvino-genai has none).
- ``optimum-intel``: ``config.json`` plus the Hugging Face tokenizer files (``tokenizer.json``...), with or
  without the tokenizer IRs; missing IRs can be created with the conversion extra
  (:func:`inference.models.convert.create_tokenizer_irs`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..draft_head import head_misfits, head_rope, is_head_folder, read_head_manifest
from ..layer_features import decoder_layer_count
from ..model import (
    MODEL_FILES,
    TOKENIZER_PROBE,
    ModelLoadError,
    TokenizerMismatchError,
    lm_head,
    max_context_of_config,
    openvino_message,
    sliding_window_of,
)
from ..tokenizer_cache import TOKENIZER_FILES, shared_tokenizer, special_token_ids, tokenizer_fingerprint
from .errors import ModelImportError, advised
from .manifest import read_manifest

logger = logging.getLogger(__name__)

#: The Hugging Face style config of a model folder (architecture, RoPE parameters, special tokens...).
CONFIG_NAME = "config.json"
#: Hugging Face tokenizer files from which the tokenizer IRs can be created (any one of them suffices).
HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")

#: OpenVINO element type of the weight constants -> bit-width reported in manifests.
_ELEMENT_BITS = {"u4": 4, "i4": 4, "nf4": 4, "f4e2m1": 4, "u8": 8, "i8": 8, "f8e4m3": 8, "f8e5m2": 8, "f16": 16, "bf16": 16, "f32": 32}


#: What the pair check says of a draft head paired with the model it was made for (:func:`check_head_pair`).
HEAD_PAIR_OK = "a draft head made for this model"


class PairMismatchError(TokenizerMismatchError):
    """A draft model's tokenizer differs from its target's; the message names the difference."""


@dataclass(frozen=True)
class TokenizerInfo:
    """What identifies a model's tokenizer.

    Attributes:
        fingerprint: SHA-256 (hex) of the vocabulary size, the special token ids and the decoded text of
            every token id; equal fingerprints mean interchangeable tokens.
        vocab_size: width of the model's logits (``config.json`` ``vocab_size`` if the IR is unreadable).
        bos_token_id, eos_token_id, pad_token_id: special token ids (-1 when the tokenizer has none).
        probe_ids: token ids of :data:`inference.model.TOKENIZER_PROBE` (no special tokens added).
    """

    fingerprint: str
    vocab_size: int
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int
    probe_ids: tuple[int, ...]

    def special_tokens(self) -> dict[str, int]:
        """``{"bos": id, "eos": id, "pad": id}``."""
        return {"bos": self.bos_token_id, "eos": self.eos_token_id, "pad": self.pad_token_id}


def missing_files(folder: Path | str, names: Iterable[str]) -> list[str]:
    """The entries of ``names`` that are not regular files in ``folder``, in their order."""
    return [name for name in names if not (Path(folder) / name).is_file()]


def folder_layout(folder: Path | str) -> str:
    """Name the layout of an IR folder: ``"openvino-genai"`` or ``"optimum-intel"`` (see the module doc).

    Raises:
        ModelImportError: not a folder, ``openvino_model.xml``/``.bin`` missing, or neither the tokenizer
            IRs nor Hugging Face tokenizer files are there.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelImportError(f"{folder} is not a folder; pass an OpenVINO IR folder or a .gguf file")
    missing = missing_files(folder, MODEL_FILES)
    if missing:
        raise advised(
            ModelImportError, f"{folder} is not a complete OpenVINO IR folder: missing {', '.join(missing)}", "ir-incomplete", ". "
        )
    absent = missing_files(folder, TOKENIZER_FILES)
    if not absent:
        return "openvino-genai"
    if any((folder / name).is_file() for name in HF_TOKENIZER_FILES):
        return "optimum-intel"
    raise ModelImportError(
        f"{folder} has no usable tokenizer: missing {', '.join(absent)} and no Hugging Face tokenizer file "
        f"({', '.join(HF_TOKENIZER_FILES)}) to create them from. Copy the tokenizer files next to the model."
    )


def has_tokenizer_irs(folder: Path | str) -> bool:
    """Whether all four tokenizer/detokenizer IR files are in ``folder``."""
    return not missing_files(folder, TOKENIZER_FILES)


def read_ir(folder: Path | str):
    """Read (not compile) ``openvino_model.xml``; returns the ``ov.Model``.

    Raises:
        ModelImportError: the XML or the weights file is unreadable or truncated (the message gives OpenVINO's
            reason without its source locations, which the log keeps, and what to do).
    """
    import openvino as ov

    from ..devices import core

    path = Path(folder) / MODEL_FILES[0]
    try:
        model = core().read_model(path)
    except RuntimeError as error:
        logger.warning("OpenVINO cannot read %s: %s", path, str(error).strip())
        raise ModelImportError(
            f"OpenVINO cannot read the model in {path.parent} ({openvino_message(error)}): its {MODEL_FILES[0]} or "
            f"{MODEL_FILES[1]} is damaged or incomplete. Copy or download the model again, then import it again."
        ) from error
    names = {name for port in model.outputs for name in port.get_names()}
    if "logits" not in names:
        raise ModelImportError(f"{path} has no 'logits' output: it is not a causal language model export")
    del ov
    return model


def logits_width(model) -> int | None:
    """Vocabulary size of a read ``ov.Model`` (static last dimension of ``logits``), or None if dynamic."""
    shape = model.output("logits").get_partial_shape()
    last = shape[shape.rank.get_length() - 1]
    return int(last.get_length()) if last.is_static else None


def weight_bits(model, vocab_size: int | None = None) -> tuple[int | None, dict[str, int]]:
    """Bit-width of a model's weights: the element type holding most weight elements.

    Args:
        model: an ``ov.Model`` (see :func:`read_ir`).
        vocab_size: if given, constants with a dimension of this size (the embedding and LM head, which
            low-bit exports usually keep at 8 bits) are left out of the choice, though still counted.

    Returns:
        ``(bits, histogram)``: 4, 8, 16 or 32 (None if no weight constant was found), and the number of
        elements per element type among Constants of two or more dimensions (e.g. ``{"u4": 1_000_000, "u8": 50_000}``).
    """
    counts: Counter[str] = Counter()
    body: Counter[str] = Counter()
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        shape = op.get_output_partial_shape(0)
        if shape.rank.get_length() < 2 or not shape.is_static:
            continue
        dims = [int(d) for d in shape.to_shape()]
        size = 1
        for dim in dims:
            size *= dim
        kind = op.get_element_type().get_type_name()
        counts[kind] += size
        if not (vocab_size and vocab_size in dims):
            body[kind] += size
    weights = {name: n for name, n in (body or counts).items() if name in _ELEMENT_BITS}
    if not weights:
        return None, dict(counts)
    dominant = max(weights, key=weights.get)
    return _ELEMENT_BITS[dominant], dict(counts)


def tokenizer_info(folder: Path | str, vocab_size: int | None = None) -> TokenizerInfo:
    """Load the tokenizer IRs of ``folder`` (about 0.3 s) and fingerprint them.

    Args:
        folder: holds ``openvino_tokenizer.xml``/``openvino_detokenizer.xml``.
        vocab_size: logits width if already known; otherwise read from the IR (or ``config.json``).

    Raises:
        ModelImportError: the tokenizer IRs are missing or unreadable.
    """
    folder = Path(folder)
    if not has_tokenizer_irs(folder):
        raise ModelImportError(f"{folder} has no tokenizer IRs (openvino_tokenizer.xml, openvino_detokenizer.xml)")
    try:
        tokenizer = shared_tokenizer(folder)
    except (RuntimeError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelImportError(f"cannot load the tokenizer in {folder} ({first}); its tokenizer IRs are corrupt") from error
    if vocab_size is None:
        vocab_size = _vocab_size(folder)
    specials = special_token_ids(tokenizer)
    probe = tuple(int(t) for t in tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False).input_ids.data[0])
    return TokenizerInfo(tokenizer_fingerprint(folder, vocab_size), vocab_size, *specials, probe)


def _vocab_size(folder: Path) -> int:
    try:
        width = logits_width(read_ir(folder))
    except ModelImportError:
        width = None
    if width:
        return width
    config = read_config(folder)
    if config.get("vocab_size"):
        return int(config["vocab_size"])
    raise ModelImportError(f"cannot tell the vocabulary size of {folder}: its logits output is dynamic and it has no config.json")


def read_config(folder: Path | str) -> dict[str, Any]:
    """``config.json`` of a folder as a dict ({} if missing or unreadable)."""
    path = Path(folder) / CONFIG_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def max_context_of(folder: Path | str) -> int | None:
    """``LoadedModel.max_context`` of the model in ``folder`` (the most n_ctx it takes), read from its config.json
    without loading it, so that a front end refuses a larger n_ctx before the load; None where config.json does
    not say (or is missing or unreadable: the load says so)."""
    return max_context_of_config(read_config(folder))


def rope_support(folder: Path | str) -> tuple[bool, str]:
    """Whether the rolling context can shift this model's KV cache.

    Returns:
        ``(True, "")``, or ``(False, reason)`` with :class:`inference.rope.RopeUnsupportedError`'s message
        (no config.json, no RoPE, or a length-dependent RoPE scaling; a draft head's own words for a missing
        config.json, ``draft_head.head_rope``).
    """
    from ..rope import RopeParameters, RopeUnsupportedError

    try:
        (head_rope if is_head_folder(folder) else RopeParameters.from_model_dir)(Path(folder))
    except RopeUnsupportedError as error:
        return False, str(error)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return False, f"config.json is unreadable ({error})"
    return True, ""


def describe_folder(folder: Path | str) -> dict[str, Any]:
    """Manifest fields that describe a finished IR folder (see :func:`inference.models.store.write_manifest`).

    Returns:
        ``{"layout", "bits", "weight_types", "vocab_size", "tokenizer_fingerprint", "special_tokens",
        "rope_supported", "rope_note", "architecture", "sliding_window"}`` (``sliding_window``: tokens, or None).

    Raises:
        ModelImportError: the IR or the tokenizer IRs are missing or unreadable.
    """
    folder = Path(folder)
    layout = folder_layout(folder)
    model = read_ir(folder)
    width = logits_width(model)
    bits, histogram = weight_bits(model, width)
    del model
    tokenizer = tokenizer_info(folder, vocab_size=width)
    rope_ok, rope_note = rope_support(folder)
    config = read_config(folder)
    architectures = config.get("architectures") or []
    return {
        "layout": layout,
        "bits": bits,
        "weight_types": histogram,
        "vocab_size": tokenizer.vocab_size,
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "special_tokens": tokenizer.special_tokens(),
        "rope_supported": rope_ok,
        "rope_note": rope_note,
        "architecture": architectures[0] if architectures else config.get("model_type", "unknown"),
        "sliding_window": sliding_window_of(config),
    }


def check_pair(target: Path | str, draft: Path | str) -> TokenizerInfo:
    """Refuse a draft whose tokens would not mean the same to the target (reads tokenizers only).

    Compares, in this order: vocabulary size (logits width), special token ids (BOS, EOS, PAD), the token ids
    of a probe text with ASCII, accents, CJK, emoji and code, and the decoded text of every token id. Same
    comparisons as :func:`inference.model.check_same_tokenizer`, without compiling either model.

    Args:
        target, draft: model folders.

    Returns:
        The shared tokenizer's :class:`TokenizerInfo`.

    Raises:
        PairMismatchError: with the first difference, e.g. ``the vocabulary size differs (49152 vs 32000)``.
        ModelImportError: a folder has no readable IR or tokenizer.
    """
    target, draft = Path(target), Path(draft)
    if target.resolve() == draft.resolve():
        raise PairMismatchError("the draft is the target itself: choose a smaller model from the same family")
    if is_head_folder(target):
        raise PairMismatchError(
            f"{target.name} is a draft head, not a model that chats: choose it as the draft of "
            f"{read_head_manifest(target)['target']['name']}"
        )
    if is_head_folder(draft):
        return check_head_pair(target, draft)
    ours, theirs = tokenizer_info(target), tokenizer_info(draft)
    checks = [
        ("the vocabulary size differs", ours.vocab_size, theirs.vocab_size),
        ("the BOS token id differs", ours.bos_token_id, theirs.bos_token_id),
        ("the EOS token id differs", ours.eos_token_id, theirs.eos_token_id),
        ("the PAD token id differs", ours.pad_token_id, theirs.pad_token_id),
        ("the token ids of a probe text differ", ours.probe_ids, theirs.probe_ids),
        ("the text of the vocabulary differs", ours.fingerprint, theirs.fingerprint),
    ]
    for what, mine, other in checks:
        if mine != other:
            detail = f" ({mine} vs {other})" if "vocabulary differs" not in what and len(str(mine)) < 80 else ""
            raise advised(
                PairMismatchError,
                f"{draft.name} cannot draft for {target.name}: their tokenizers differ ({what}{detail}).",
                "other-family",
                between=" ",
            )
    return ours


def check_head_pair(target: Path | str, head: Path | str) -> TokenizerInfo:
    """Refuse a draft head made for another model (reads manifests, the target's IR and tokenizer).

    A head drafts only for the model it was made for: its ``draft_head.json`` names it, and that name must be
    the target's manifest name (any bit-width of it, as :func:`inference.models.store.compatible_drafts` offers
    it); then the target must fit it as the engine checks when it loads them
    (:func:`inference.draft_head.head_misfits`: hidden size, vocabulary, tokenizer, a fused head's decoder layers).

    Returns:
        The target's :class:`TokenizerInfo`.

    Raises:
        PairMismatchError: the head was made for another model, or the target does not fit it.
        ModelImportError: the target has no readable IR or tokenizer; the head's manifest is unreadable.
    """
    target, head = Path(target), Path(head)
    manifest = check_head_made_for(target, head)
    made_for = manifest["target"]["name"]
    model = read_ir(target)
    info = tokenizer_info(target, vocab_size=logits_width(model))
    problems = head_misfits(manifest, hidden_width(model), info.vocab_size, lambda: info.fingerprint,
                            lambda: decoder_layer_count(model))
    if problems:
        raise PairMismatchError(
            f"{head.name} cannot draft for {target.name}: the draft head was made for {made_for}, and "
            f"{target.name} does not fit it ({'; '.join(problems)})"
        )
    return info


def check_pair_manifests(target: Path | str, draft: Path | str) -> None:
    """Refuse a draft whose store manifest's tokenizer fingerprint differs from the target's, as
    :func:`inference.models.store.compatible_drafts` leaves it out of the window's Drafter list (no tokenizer or IR
    read: cheap enough to check before any model loads, as the command line does). Nothing is checked where either
    folder has no manifest or no fingerprint: the load checks the tokenizers then.

    Raises:
        PairMismatchError: the fingerprints differ (``check_pair``'s words for "the text of the vocabulary differs").
    """
    target, draft = Path(target), Path(draft)
    try:
        ours, theirs = read_manifest(target).tokenizer_fingerprint, read_manifest(draft).tokenizer_fingerprint
    except (OSError, ValueError):
        return
    if ours and theirs and ours != theirs:
        raise advised(
            PairMismatchError,
            f"{draft.name} cannot draft for {target.name}: their tokenizers differ (the text of the vocabulary differs).",
            "other-family",
            between=" ",
        )


def check_head_made_for(target: Path | str, head: Path | str) -> dict:
    """Refuse a draft head made for another model than ``target`` by its manifests alone (no IR read: cheap enough
    to check before any model loads, as the command line does).

    Returns:
        The head's manifest (``draft_head.json``).

    Raises:
        PairMismatchError: the head names another model than the target's manifest name.
        ModelImportError: the head's manifest is unreadable.
    """
    target, head = Path(target), Path(head)
    try:
        manifest = read_head_manifest(head)
    except ModelLoadError as error:
        raise ModelImportError(str(error)) from error
    made_for = manifest["target"]["name"]
    target_name = _manifest_name(target)
    if target_name is not None and target_name != made_for:
        raise PairMismatchError(
            f"{head.name} cannot draft for {target.name}: a draft head made for {made_for} drafts only for {made_for}"
        )
    return manifest


def _manifest_name(folder: Path) -> str | None:
    """The name in a folder's store manifest, None without a readable one (a folder outside the store)."""
    try:
        return read_manifest(folder).name or None
    except (OSError, ValueError):
        return None


def hidden_width(model) -> int | None:
    """Width of the hidden states a read ``ov.Model`` feeds its LM head (what a draft head reads; see
    :func:`inference.model.lm_head`), or None without an LM head or with a dynamic width."""
    node = lm_head(model)
    if node is None:
        return None
    shape = node.input_value(0).get_partial_shape()
    last = shape[shape.rank.get_length() - 1]
    return int(last.get_length()) if last.is_static else None


def tokenizer_info_dict(info: TokenizerInfo) -> dict[str, Any]:
    """:class:`TokenizerInfo` as a JSON-ready dict."""
    data = asdict(info)
    data["probe_ids"] = list(info.probe_ids)
    return data
