"""The bytes of every token of a model, as its own detokenizer writes them (structured output, log-probabilities).

The detokenizer IR (``openvino_detokenizer.xml``, openvino-tokenizers) is run up to, not including, its UTF-8
validation, on rows ``[anchor, id]`` for every id; the anchor (the token of ``"a"``) keeps SentencePiece's
word-start space, which a detokenizer drops at the start of a text. Byte-level BPE pieces of a multi-byte character
and SentencePiece word-start spaces therefore come out exact, whatever the model family, without a
``tokenizer.json``.

Vocabularies are kept by the tokenizer digest a model took at its load (``model.LoadedModel.tokenizer_digest``), so
that a model whose folder was removed since (``specchat models remove`` while the window or the server keeps it)
finds its own. Built for such a model, the vocabulary comes from the tokenizer loaded instead
(:func:`loaded_token_bytes`): its pieces (``Tokenizer.get_vocab``) where its decoding agrees with them (byte-level
BPE, as the default model's), else the model is refused with what to do.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .advice import REINSTALL, advised

#: Vocabularies kept per process, by tokenizer digest (the 4/8/16-bit variants of a model share one).
VOCABULARY_CACHE_SIZE = 4
#: Token ids decoded per ``Tokenizer.decode`` call by :func:`loaded_token_bytes`: each call holds Python's GIL
#: (1-2 ms for 4096 ids on 2 shared cores; 20-30 ms for 49k at once), so the window's thread runs between them.
DECODE_CHUNK = 4096


class VocabularyError(ValueError):
    """A detokenizer whose layout SpecChat does not know (no UTF-8 validation step, no one-token "a"), or one that
    cannot be read (its folder removed since the load, and the tokenizer loaded does not give its tokens' bytes)."""


@dataclass(frozen=True)
class Vocabulary:
    """Every token id's bytes.

    Attributes:
        pieces: ``[vocab]`` bytes of each id as text; a special token's name (``b"<|im_end|>"``) for the ids in
            ``special``; ``b""`` for ids past the tokenizer's vocabulary (logits rows some models pad).
        special: ids the detokenizer skips (control tokens: BOS, EOS, chat markers).
    """

    pieces: list[bytes]
    special: frozenset[int]


_vocabularies: OrderedDict[str, Vocabulary] = OrderedDict()
_lock = threading.Lock()


def vocabulary(model) -> Vocabulary:
    """The ``Vocabulary`` of a loaded model (``inference.model.LoadedModel``), built once per process for each
    distinct tokenizer (``model.tokenizer_digest``, taken at the load): from its detokenizer file (49k tokens:
    0.05-0.1 s on 2 shared cores, 0.25 s the first time in a process), or, where that file is gone (the folder removed
    since the load), from the tokenizer loaded (:func:`loaded_token_bytes`: 0.1-0.17 s; not the usual way, as its
    ``get_vocab`` holds Python's GIL 12-45 ms in one call, which would stall the window at each load).

    Raises:
        VocabularyError: the detokenizer has an unknown layout, or its file is gone and the tokenizer loaded does not
            give its tokens' bytes (the message says to re-import or re-download the model: advice key "reinstall").
    """
    key = model.tokenizer_digest
    with _lock:
        if key not in _vocabularies:
            pieces = _token_bytes_of(model)
            silent = [i for i, piece in enumerate(pieces) if piece is None]
            names = dict(zip(silent, model.tokenizer.decode([[i] for i in silent], skip_special_tokens=False)))
            special = frozenset(i for i in silent if names[i])
            words = [piece if piece is not None else names[i].encode() for i, piece in enumerate(pieces)]
            _vocabularies[key] = Vocabulary(words, special)
            while len(_vocabularies) > VOCABULARY_CACHE_SIZE:
                _vocabularies.popitem(last=False)
        _vocabularies.move_to_end(key)
        return _vocabularies[key]


def _token_bytes_of(model) -> list[bytes | None]:
    """:func:`token_bytes` of a loaded model, from its detokenizer file, or from its tokenizer loaded where that file
    is gone.

    Raises:
        VocabularyError: as :func:`vocabulary`.
    """
    folder = model.folder
    if (folder / "openvino_detokenizer.xml").is_file():
        return token_bytes(folder, model.tokenizer, model.vocab_size)
    pieces = loaded_token_bytes(model.tokenizer, model.vocab_size)
    if pieces is None:
        raise advised(
            VocabularyError,
            f"the files of {folder.name} were removed since it was loaded ({folder}), and its tokens' bytes, which "
            "structured output and log-probabilities need, are read from them",
            "reinstall", REINSTALL,
        )  # fmt: skip
    return pieces


def loaded_token_bytes(tokenizer, vocab_size: int) -> list[bytes | None] | None:
    """:func:`token_bytes` from a loaded ``openvino_genai.Tokenizer`` alone, without the model's files: the pieces of
    its vocabulary (``get_vocab``), where decoding each token after the anchor (``"a"``) writes each one's text (its
    bytes as UTF-8, what is not valid UTF-8 left out: the part of a character a byte-level BPE token holds) or nothing
    (a special token, None). None where a token decodes otherwise (a detokenizer that changes its vocabulary's pieces,
    as SentencePiece's "▁" word starts and byte fallback tokens): only its detokenizer IR gives its bytes.

    Args:
        tokenizer: the model's tokenizer; vocab_size: the logits' width (ids the vocabulary lacks are None).
    """
    try:
        by_id = {int(i): piece for piece, i in tokenizer.get_vocab().items()}
    except RuntimeError:  # a detokenizer without a vocabulary openvino-genai reads
        return None
    anchor = [int(t) for t in tokenizer.encode("a", add_special_tokens=False).input_ids.data[0]]
    if len(anchor) != 1:
        return None
    prefix = tokenizer.decode(anchor)
    known = [i for i in range(vocab_size) if i in by_id]
    texts: list[str] = []
    for start in range(0, len(known), DECODE_CHUNK):
        rows = [[anchor[0], i] for i in known[start : start + DECODE_CHUNK]]
        texts += tokenizer.decode(rows, skip_special_tokens=True)
    pieces: list[bytes | None] = [None] * vocab_size
    for i, text in zip(known, texts):
        if text == prefix + by_id[i].decode("utf-8", "ignore"):
            pieces[i] = by_id[i]
        elif text != prefix:
            return None
    return pieces


def tokenizers_extension() -> Path:
    """The openvino-tokenizers library (the tokenizer IRs' operations) where openvino-genai loads it from: its
    ``lib`` folder beside openvino-genai's package, in an environment and in the PyInstaller bundle alike (importing
    ``openvino_tokenizers`` finds it through site-packages, which a bundle has not)."""
    import openvino_genai

    name = {"win32": "openvino_tokenizers.dll", "darwin": "libopenvino_tokenizers.dylib"}.get(
        sys.platform, "libopenvino_tokenizers.so"
    )
    return Path(openvino_genai.__file__).resolve().parent.parent / "openvino_tokenizers" / "lib" / name


def token_bytes(folder: Path, tokenizer, vocab_size: int) -> list[bytes | None]:
    """The bytes of every token id below ``vocab_size`` as the model's detokenizer writes them; None for the tokens
    it writes nothing for: the special tokens it skips, and ids past its vocabulary (logits rows some models pad).

    See the module's docstring for how.

    Args:
        folder: the model folder; tokenizer: its ``openvino_genai.Tokenizer``; vocab_size: the logits' width.

    Raises:
        VocabularyError: the detokenizer has no ``UTF8Validate`` step or no single-token ``"a"`` (an unknown layout).
    """
    import openvino as ov
    import openvino.opset13 as ops

    from .model import openvino_message

    core = ov.Core()
    try:
        core.add_extension(str(tokenizers_extension()))
        detokenizer = core.read_model(str(folder / "openvino_detokenizer.xml"))
    except (RuntimeError, OSError) as error:
        raise VocabularyError(f"cannot read the detokenizer of {folder.name}: {openvino_message(error)}") from None
    validations = [op for op in detokenizer.get_ordered_ops() if op.get_type_name() == "UTF8Validate"]
    anchor = [int(t) for t in tokenizer.encode("a", add_special_tokens=False).input_ids.data[0]]
    if len(validations) != 1 or len(anchor) != 1:
        raise VocabularyError(
            f"the detokenizer of {folder.name} has a layout SpecChat does not know, so it cannot read its tokens' bytes "
            "(structured output and log-probabilities need them)"
        )
    raw = ov.Model([ops.result(validations[0].input_value(i)) for i in range(3)], detokenizer.get_parameters())
    compiled = core.compile_model(raw, "CPU")
    rows = np.stack([np.full(vocab_size, anchor[0]), np.arange(vocab_size)], axis=1).astype(np.int64)
    begins, ends, chars = (compiled({0: rows})[i] for i in range(3))
    alone = compiled({0: np.array([anchor], dtype=np.int64)})
    prefix = bytes(alone[2][alone[0][0] : alone[1][0]])
    data = chars.tobytes()
    pieces: list[bytes | None] = []
    for begin, end in zip(begins.tolist(), ends.tolist()):
        piece = data[begin:end]
        pieces.append(piece[len(prefix) :] if len(piece) > len(prefix) else None)
    return pieces

