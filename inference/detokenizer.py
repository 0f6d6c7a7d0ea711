"""Incremental detokenization for streaming: text deltas that never split a UTF-8 character.

Two ways, the same text:
- **By decoding windows** (any tokenizer): each token decodes a short window of ids twice with openvino-genai's
  ``Tokenizer.decode`` (an OpenVINO inference each, about 0.4 ms: 4% of a 135M model's decode step).
- **By bytes** (a model whose ``inference.vocabulary.Vocabulary`` is known and checked by
  :func:`bytes_match_decode`): once the text so far is whole UTF-8, each token's bytes go through Python's
  incremental UTF-8 decoder (microseconds). The first text still comes from decoding, since a detokenizer drops a
  SentencePiece word-start space at the start of a text, which a token's bytes keep.
"""

from __future__ import annotations

import codecs

import openvino_genai

from .vocabulary import Vocabulary

#: Text whose tokens :func:`bytes_match_decode` detokenizes both ways: spaces before punctuation (which a
#: detokenizer's clean-up step may remove), several scripts, emoji split across tokens, code, digits.
BYTE_PROBE = "Hello , world ! It 's 1,234.5 ( ok ) . Ünïcödé 你好 🙂👍🏽 def f(x):\n\treturn x ** 2  # done ?"


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas.

    A byte-level BPE token can hold part of a multi-byte character (emoji, CJK). openvino-genai's
    ``Tokenizer.decode`` drops an incomplete trailing UTF-8 sequence, so the text of a prefix of ids is a
    prefix of the text of the whole. Each step decodes a short window ``ids[prefix_offset:]`` and emits what it
    adds to the window's text without the newest token (the method of Hugging Face text-generation-inference's
    ``decode_token``), so SentencePiece word-start spaces are kept and the cost per token stays constant. With a
    ``vocabulary``, the text continues from the tokens' bytes once it is whole (see the module docstring).

    Args:
        tokenizer: the model's ``openvino_genai.Tokenizer``.
        vocabulary: the model's token bytes, checked by :func:`bytes_match_decode`; None decodes every token.
    """

    def __init__(self, tokenizer: openvino_genai.Tokenizer, vocabulary: Vocabulary | None = None):
        self._tokenizer = tokenizer
        self._vocabulary = vocabulary
        self._utf8: codecs.IncrementalDecoder | None = None  # set once the text continues from bytes
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.text = ""

    @property
    def by_bytes(self) -> bool:
        """True once the text continues from the tokens' bytes."""
        return self._utf8 is not None

    def push(self, token_id: int) -> str:
        """Add one token id; return the text it completes ("" while a character is still incomplete)."""
        token_id = int(token_id)
        if self._utf8 is not None:
            delta = self._utf8.decode(self._piece(token_id))
        else:
            self._ids.append(token_id)
            delta = self._decoded_delta()
            if delta and self._vocabulary is not None and self._whole_so_far():
                self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="ignore")
                self._ids = []
        self.text += delta
        return delta

    def _piece(self, token_id: int) -> bytes:
        vocabulary = self._vocabulary
        if token_id in vocabulary.special or token_id >= len(vocabulary.pieces):
            return b""
        return vocabulary.pieces[token_id]

    def _whole_so_far(self) -> bool:
        """Whether the bytes of every id so far are whole UTF-8 (no character waits for its next byte)."""
        try:
            b"".join(self._piece(i) for i in self._ids).decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def _decoded_delta(self) -> str:
        before = self._decode(self._ids[self._prefix_offset : self._read_offset])
        after = self._decode(self._ids[self._prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        if not after.startswith(before):
            common = 0
            while common < min(len(before), len(after)) and before[common] == after[common]:
                common += 1
            before = before[:common]
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return after[len(before) :]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True) if ids else ""


def bytes_match_decode(tokenizer: openvino_genai.Tokenizer, vocabulary: Vocabulary, token_ids: list[int]) -> bool:
    """Whether detokenizing ``token_ids`` by bytes gives ``tokenizer.decode``'s text, token by token: False for a
    detokenizer that changes text after joining the tokens' bytes (a clean-up of spaces before punctuation), which
    the byte path would not reproduce."""
    by_bytes = IncrementalDetokenizer(tokenizer, vocabulary)
    by_decoding = IncrementalDetokenizer(tokenizer)
    for token in token_ids:
        if by_bytes.push(token) != by_decoding.push(token):
            return False
    return by_bytes.text == tokenizer.decode(token_ids, skip_special_tokens=True)


def streaming_vocabulary(model) -> Vocabulary | None:
    """The vocabulary of a loaded model (``inference.model.LoadedModel``) to detokenize by bytes, or None when its
    detokenizer's layout is unknown or :func:`bytes_match_decode` fails on ``BYTE_PROBE``. Building it takes about
    0.5 s the first time per tokenizer in a process (``inference.vocabulary.vocabulary``)."""
    from .vocabulary import VocabularyError, vocabulary

    try:
        words = vocabulary(model)
    except VocabularyError:
        return None
    return words if bytes_match_decode(model.tokenizer, words, model.encode(BYTE_PROBE)) else None
