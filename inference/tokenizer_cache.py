"""A model folder's tokenizer and its fingerprint, each built once per process for each distinct tokenizer.

openvino-genai builds a tokenizer, and decodes a whole vocabulary, holding Python's GIL for tens to hundreds of
milliseconds, so both are cached by the digest of the tokenizer's IR files (:func:`tokenizer_digest`); a loaded
model keeps its digest (``model.LoadedModel.tokenizer_digest``), so that its fingerprint needs its folder no more.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import openvino_genai

#: The tokenizer and detokenizer IRs (graph, weights) that ``openvino_genai.Tokenizer`` reads.
TOKENIZER_FILES = ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml", "openvino_detokenizer.bin")

TOKENIZER_CACHE_SIZE = 8
_tokenizers: OrderedDict[str, openvino_genai.Tokenizer] = OrderedDict()
_tokenizers_lock = threading.Lock()


def shared_tokenizer(folder: str | Path, digest: str | None = None) -> openvino_genai.Tokenizer:
    """The ``openvino_genai.Tokenizer`` of a model folder, built once per process for each distinct tokenizer.

    openvino-genai's Tokenizer constructor compiles the tokenizer and detokenizer IRs and holds Python's GIL the
    whole time (0.15-0.5 s measured on 2 cores; ``ov.Core.compile_model`` releases it, the Tokenizer binding does
    not), so every Python thread, the GUI's included, stops meanwhile. Tokenizers are therefore cached by the
    sha256 of their IR files (the 4/8/16-bit variants of a model and a same-family draft share one), least
    recently used first out beyond TOKENIZER_CACHE_SIZE; the app builds its model's tokenizer before its event
    loop starts (``app.gui.application``), so later loads find it here.

    Args:
        folder: a model folder with ``openvino_tokenizer.xml/.bin`` and ``openvino_detokenizer.xml/.bin``.
        digest: the folder's :func:`tokenizer_digest` where the caller has it (``model.load_model`` keeps it).

    Raises:
        OSError: a tokenizer file cannot be read.
        RuntimeError: openvino-genai cannot build the tokenizer (corrupt IR).
    """
    digest = digest or tokenizer_digest(Path(folder))
    with _tokenizers_lock:
        if digest in _tokenizers:
            _tokenizers.move_to_end(digest)
            return _tokenizers[digest]
        tokenizer = openvino_genai.Tokenizer(str(folder))
        _tokenizers[digest] = tokenizer
        while len(_tokenizers) > TOKENIZER_CACHE_SIZE:
            _tokenizers.popitem(last=False)
        return tokenizer


_fingerprints: dict[tuple[str, int], str] = {}


def tokenizer_fingerprint(folder: str | Path, vocab_size: int) -> str:
    """SHA-256 (hex) of a folder's tokenizer: its vocabulary size, special token ids (BOS, EOS, pad) and the decoded
    text of every token id. Equal fingerprints mean interchangeable tokens (a draft model's pairing, a draft head's
    target, ``inference.models.inspect.TokenizerInfo``).

    Decoding the whole vocabulary is one openvino-genai call that holds Python's GIL (50-100 ms for 49k tokens on
    2 cores), so the result is kept per process for each distinct tokenizer (:func:`tokenizer_digest`) and vocabulary
    size, like the tokenizer itself; :func:`inference.model.prepare_tokenizer` computes it before the window's event
    loop starts.

    Args:
        folder: a model folder with the tokenizer IRs.
        vocab_size: width of the model's logits (token ids ``0 .. vocab_size - 1`` are decoded).

    Raises:
        OSError, RuntimeError: as :func:`shared_tokenizer`.
    """
    digest = tokenizer_digest(Path(folder))
    return fingerprint_of(digest, lambda: shared_tokenizer(folder, digest), vocab_size)


def fingerprint_of(digest: str, tokenizer: Callable[[], openvino_genai.Tokenizer], vocab_size: int) -> str:
    """:func:`tokenizer_fingerprint` of the tokenizer whose :func:`tokenizer_digest` is ``digest``, computed from
    ``tokenizer()`` where this process has not computed it yet (a loaded model's own tokenizer: its folder is not read
    again, ``model.LoadedModel.tokenizer_fingerprint``)."""
    key = (digest, int(vocab_size))
    if key not in _fingerprints:
        _fingerprints[key] = vocabulary_fingerprint(tokenizer(), int(vocab_size))
    return _fingerprints[key]


def vocabulary_fingerprint(tokenizer: openvino_genai.Tokenizer, vocab_size: int) -> str:
    """The fingerprint of :func:`tokenizer_fingerprint`, computed (uncached; holds the GIL throughout)."""
    vocabulary = tokenizer.decode(list(range(vocab_size)), skip_special_tokens=False)
    digest = hashlib.sha256()
    digest.update(json.dumps({"vocab_size": vocab_size, "special": special_token_ids(tokenizer)}).encode())
    digest.update(vocabulary.encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest()


def special_token_ids(tokenizer: openvino_genai.Tokenizer) -> tuple[int, int, int]:
    """The BOS, EOS and pad token ids of a tokenizer (-1 where it has none)."""
    return int(tokenizer.get_bos_token_id()), int(tokenizer.get_eos_token_id()), int(tokenizer.get_pad_token_id())


def tokenizer_digest(folder: Path) -> str:
    """sha256 of a folder's tokenizer IR files, blind to the numbered node names OpenVINO generates on each
    export (``Parameter_14153``), so re-exports of one tokenizer (e.g. each bit-width of a GGUF) share a digest.

    Raises:
        FileNotFoundError: the folder is missing or holds none of :data:`TOKENIZER_FILES` (every such folder would
            share one digest, and openvino-genai builds a Tokenizer that cannot encode from it); ``filename`` is the
            folder.
    """
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        said = "the folder holds no tokenizer (openvino_tokenizer.xml/.bin, openvino_detokenizer.xml/.bin)" \
            if folder.is_dir() else "the folder does not exist"
        raise FileNotFoundError(errno.ENOENT, said, str(folder))
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = folder / name
        data = path.read_bytes() if path.is_file() else b"<absent>"
        if name.endswith(".xml"):
            data = re.sub(rb'name="([^"]*?)_\d+"', rb'name="\1"', data)
        digest.update(name.encode() + b"\0" + data)
    return digest.hexdigest()
