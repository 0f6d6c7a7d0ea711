"""Detokenizing by bytes gives the detokenizer's own text, token by token, and switches on where it may."""

from __future__ import annotations

import numpy as np
import pytest

from inference.detokenizer import BYTE_PROBE, IncrementalDetokenizer, bytes_match_decode, streaming_vocabulary
from inference.vocabulary import Vocabulary, vocabulary


@pytest.fixture(scope="module")
def words(target) -> Vocabulary:
    checked = streaming_vocabulary(target)
    assert checked is not None  # the default model's detokenizer joins its tokens' bytes and nothing more
    return checked


def test_byte_detokenization_equals_decoding_on_text_and_on_random_ids(target, words):
    """Every delta equals the decoding path's, on real text and on random ids, a third of them tokens whose bytes
    are not whole UTF-8 alone (parts of a character: complete, cut short, or followed by ASCII)."""
    text = "Emoji: 🙂👍🏽🇫🇷 family 👨‍👩‍👧. 中文和日本語のテキスト、한국어도。 def f(x):\n\treturn x  # Ünïcödé “ok” …"
    assert bytes_match_decode(target.tokenizer, words, target.encode(text))
    fragments = [i for i, piece in enumerate(words.pieces) if piece and not _whole(piece)]
    assert len(fragments) > 100  # byte-level BPE has its 256 byte tokens and more
    rng = np.random.default_rng(0)
    for _ in range(200):
        length = int(rng.integers(1, 30))
        ids = [
            int(rng.choice(fragments)) if rng.random() < 0.33 else int(rng.integers(0, target.vocab_size))
            for _ in range(length)
        ]
        assert bytes_match_decode(target.tokenizer, words, ids), ids


def test_the_text_continues_from_bytes_once_it_is_whole_and_skips_special_tokens(target, words):
    emoji = target.encode("🙂")
    assert len(emoji) > 1  # one character over several tokens
    detokenizer = IncrementalDetokenizer(target.tokenizer, words)
    assert [detokenizer.push(token) for token in emoji] == [""] * (len(emoji) - 1) + ["🙂"]
    assert detokenizer.by_bytes  # the text so far is whole: bytes from now on
    end = target.encode("<|im_end|>")
    assert len(end) == 1 and end[0] in words.special
    assert detokenizer.push(end[0]) == "" and detokenizer.push(target.encode(" ok")[0]) == " ok"
    assert detokenizer.text == "🙂 ok"


def test_a_detokenizer_that_changes_joined_text_keeps_decoding(target):
    """A vocabulary whose bytes do not give the detokenizer's text (here: one token's bytes altered, as a clean-up
    step after joining would) fails the check, so replies keep the decoding path."""
    real = vocabulary(target)
    probe = target.encode(BYTE_PROBE)
    pieces = list(real.pieces)
    pieces[probe[1]] = pieces[probe[1]] + b" "
    assert not bytes_match_decode(target.tokenizer, Vocabulary(pieces, real.special), probe)
    assert bytes_match_decode(target.tokenizer, real, probe)


def _whole(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
