"""Incremental detokenization for streaming: text deltas that never split a UTF-8 character."""

from __future__ import annotations

import openvino_genai


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas.

    A byte-level BPE token can hold part of a multi-byte character (emoji, CJK). openvino-genai's
    ``Tokenizer.decode`` drops an incomplete trailing UTF-8 sequence, so the text of a prefix of ids is a
    prefix of the text of the whole. Each step decodes a short window ``ids[prefix_offset:]`` and emits what it
    adds to the window's text without the newest token (the method of Hugging Face text-generation-inference's
    ``decode_token``), so SentencePiece word-start spaces are kept and the cost per token stays constant.

    Args:
        tokenizer: the model's ``openvino_genai.Tokenizer``.
    """

    def __init__(self, tokenizer: openvino_genai.Tokenizer):
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.text = ""

    def push(self, token_id: int) -> str:
        """Add one token id; return the text it completes ("" while a character is still incomplete)."""
        self._ids.append(int(token_id))
        before = self._decode(self._ids[self._prefix_offset : self._read_offset])
        after = self._decode(self._ids[self._prefix_offset :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        if not after.startswith(before):
            common = 0
            while common < min(len(before), len(after)) and before[common] == after[common]:
                common += 1
            before = before[:common]
        delta = after[len(before) :]
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        self.text += delta
        return delta

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True) if ids else ""
