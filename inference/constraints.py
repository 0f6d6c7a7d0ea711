"""Structured output: a grammar that masks the tokens a reply may take next (JSON, a JSON schema, tool calls).

Design rules:

* **A library compiles grammars.** llguidance (Microsoft's Low-level Guidance, MIT; the engine behind
  ``guidance`` and one of vLLM's and llama.cpp's structured-output backends) turns a JSON schema, a Lark grammar or
  a regular expression into a parser that answers, for the reply so far, which vocabulary tokens may come next.
  Its masks are computed lazily per token (measured on the default model's 49,152 tokens: median 9-20 us, a few ms
  at worst), so a new schema costs no compile time. Chosen over outlines-core (which compiles a schema to one
  regular expression, so recursion only to a fixed depth, and builds its whole automaton over the vocabulary first:
  11 s for ``{"type": "object"}``) and xgrammar (fastest, 2-5 us, but it needs torch, transformers and triton, ~1 GB,
  more than SpecChat's whole bundle). What the mask costs per token in the engine: ``bench/serve_overhead.py``.
* **A mask is an infinite penalty.** Like the repetition and presence penalties (``inference.penalties``), the
  grammar's mask at a position depends only on the tokens before it: ``GrammarMask.allowed(tokens)`` is a pure
  function of the reply so far. ``ReplyPenalties`` applies it after the penalties to every logits row it scores:
  the first token, verification row i with the drafts before i, and draft i of a draft model with the same
  drafts. Greedy speculative decoding therefore picks what constrained autoregressive decoding picks, and sampled
  speculative decoding (Leviathan et al., arXiv 2211.17192) accepts against the masked target distribution, which
  is the constrained autoregressive one. Drafts the grammar forbids are cut off before verification
  (``ReplyPenalties.allowed_drafts``): the target would reject them anyway, so this saves work and changes nothing.
* **The tokenizer's own bytes.** llguidance needs every token's bytes: ``inference.vocabulary`` reads them from the
  model's detokenizer IR, so any model folder works, without a ``tokenizer.json`` (GGUF-built folders have none).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence

import llguidance
import numpy as np

from .vocabulary import vocabulary

#: How the JSON grammars lay out whitespace: ``{"a": 1, "b": [2, 3]}`` (Python's ``json.dumps``), nothing else. A
#: grammar that allows any whitespace lets a small model pad its JSON with newlines until max_tokens (llama.cpp caps
#: whitespace runs for the same reason).
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
#: Tokenizers (llguidance's, built from a detokenizer IR) kept per process, by tokenizer digest.
TOKENIZER_CACHE_SIZE = 4


class GrammarError(ValueError):
    """A grammar or JSON schema that cannot constrain a reply; the message says what is wrong in it."""


def json_schema_grammar(schema: dict) -> str:
    """The grammar of JSON values that match ``schema`` (JSON Schema: objects, arrays, strings with patterns and
    formats, numbers, integers, booleans, null, enum, const, anyOf/oneOf, $ref and $defs, required, bounds), laid
    out as ``JSON_LAYOUT`` says.

    Args:
        schema: the JSON schema, as parsed JSON.

    Returns:
        llguidance's grammar text (give it to ``OutputSettings.grammar``).

    Raises:
        GrammarError: ``schema`` is not an object, or uses what llguidance cannot enforce (the message names it).
    """
    if not isinstance(schema, dict):
        raise GrammarError(f"the JSON schema must be an object, got {type(schema).__name__}")
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT)
    except ValueError as error:
        raise GrammarError(f"the JSON schema is invalid: {error}") from None
    check_grammar(grammar)
    return grammar


#: Any JSON object, laid out as ``JSON_LAYOUT``, numbers of at most 16 digits before and after the point and 3 in
#: the exponent, as llama.cpp's ``json.gbnf`` caps them: without a cap the default model, greedy, wrote a
#: 190-digit "12345678901234567890..." until max_tokens on 2 of 4 test prompts.
JSON_OBJECT_LARK = r"""
start: object
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" (pair (", " pair)*)? "}"
pair: STRING ": " value
array: "[" (value (", " value)*)? "]"
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][-+]?[0-9]{1,3})?/
"""


def json_object_grammar() -> str:
    """The grammar of any JSON object (OpenAI's ``response_format`` ``json_object``, Ollama's ``format: "json"``),
    numbers capped as ``JSON_OBJECT_LARK`` says."""
    return lark_grammar(JSON_OBJECT_LARK)


def lark_grammar(text: str) -> str:
    """llguidance's grammar of a Lark grammar (llguidance's dialect: ``%json {schema}`` embeds a JSON schema).

    Raises:
        GrammarError: the grammar does not compile.
    """
    grammar = llguidance.LLMatcher.grammar_from_lark(text)
    check_grammar(grammar)
    return grammar


def check_grammar(grammar: str) -> None:
    """Refuse a grammar llguidance cannot compile, before any generation starts.

    Raises:
        GrammarError: with llguidance's message.
    """
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise GrammarError(error.strip())


class GrammarMask:
    """Which tokens a grammar allows after a given reply, for one reply.

    ``allowed(tokens)`` depends only on ``tokens``: the matcher follows whatever sequence it is asked about by
    rolling back to the common prefix with the previous question and consuming the rest, so the engine can ask
    about the reply plus any drafts in any order (drafting, then verification) and never tells it what was
    accepted. Masks are kept per position until a rollback passes them.

    Args:
        model: the loaded model whose tokens are constrained (its detokenizer gives the token bytes).
        grammar: llguidance grammar text (``json_schema_grammar``, ``json_object_grammar``, ``lark_grammar``).

    Raises:
        GrammarError: the grammar does not compile for this tokenizer.
    """

    def __init__(self, model, grammar: str):
        self._tokenizer = grammar_tokenizer(model)
        self._vocab = model.vocab_size
        self._matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise GrammarError(self._matcher.get_error())
        self._consumed: list[int] = []
        self._masks: list[np.ndarray | None] = [None]  # [i]: the mask after consumed[:i]
        self._bits = np.zeros((self._vocab + 31) // 32, dtype=np.int32)
        self._eos = {t for t in model.eos_token_ids if t < self._vocab}

    def allowed(self, tokens: Sequence[int]) -> np.ndarray:
        """bool ``[vocab]``: True for each token the grammar allows after ``tokens`` (the reply so far, drafts
        included); EOS ids are allowed where the grammar is complete, and only they after an EOS (the reply has
        ended there: no row the engine scores is ever left without a token).

        Raises:
            GrammarError: ``tokens`` is not a prefix the grammar allows (a bug: every token comes from its mask),
                or the grammar hit one of llguidance's limits.
        """
        end = self._end_of(tokens)
        consumed = self._follow(tokens[:end])
        if consumed < end:
            raise GrammarError(f"the grammar forbids the reply's token {int(tokens[consumed])} at position {consumed}")
        mask = self._masks[consumed]
        if mask is None:
            self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            if self._matcher.is_error():
                raise GrammarError(self._matcher.get_error())
            bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
            mask = bits[: self._vocab].astype(bool)
            if not mask.any():
                mask[list(self._eos)] = True
            self._masks[consumed] = mask
        if end == len(tokens):
            return mask
        if not mask[int(tokens[end])]:
            raise GrammarError(f"the grammar forbids the end of the reply at position {end}")
        ended = np.zeros(self._vocab, dtype=bool)
        ended[list(self._eos)] = True
        return ended

    def allowed_prefix(self, tokens: Sequence[int], start: int = 0) -> int:
        """How many of ``tokens`` the grammar accepts in order (``len(tokens)`` when all; an EOS where the grammar is
        complete counts, nothing after it); the first ``start`` are known to be accepted (the reply so far)."""
        end = self._end_of(tokens)
        consumed = self._follow(tokens[:end], start)
        if consumed == end < len(tokens) and self.allowed(tokens[:end])[int(tokens[end])]:
            return end + 1
        return consumed

    def _end_of(self, tokens: Sequence[int]) -> int:
        """The index of the first EOS in ``tokens`` (``len(tokens)`` without one): llguidance is never fed EOS."""
        return next((i for i, token in enumerate(tokens) if int(token) in self._eos), len(tokens))

    def _follow(self, tokens: Sequence[int], start: int = 0) -> int:
        """Bring the matcher to the longest prefix of ``tokens`` it accepts; returns its length. ``start``: the first
        tokens are known to be accepted, so the matcher's path is compared from there when it holds them; it may
        hold drafts the target rejected instead (it followed the last verification's drafts), and is then compared
        from the beginning."""
        tokens = [int(t) for t in tokens]
        consumed = self._consumed
        common = min(start, len(consumed))
        if consumed[:common] != tokens[:common]:  # (a C-speed comparison: 26 us for 2,000 tokens)
            common = 0
        limit = min(len(consumed), len(tokens))
        while common < limit and consumed[common] == tokens[common]:
            common += 1
        if common < len(consumed):
            self._matcher.rollback(len(consumed) - common)
            del consumed[common:]
            del self._masks[common + 1 :]
        taken = self._matcher.try_consume_tokens(tokens[common:]) if common < len(tokens) else 0
        consumed.extend(tokens[common : common + taken])
        self._masks.extend([None] * taken)
        return len(consumed)


_tokenizers: OrderedDict[str, Any] = OrderedDict()
_tokenizers_lock = threading.Lock()


def grammar_tokenizer(model) -> Any:
    """llguidance's ``LLTokenizer`` of a loaded model, built once per process for each distinct tokenizer
    (``model.tokenizer_digest``, taken at its load; from ``vocabulary.vocabulary``)."""
    key = model.tokenizer_digest
    with _tokenizers_lock:
        if key not in _tokenizers:
            _tokenizers[key] = _build_tokenizer(model)
            while len(_tokenizers) > TOKENIZER_CACHE_SIZE:
                _tokenizers.popitem(last=False)
        _tokenizers.move_to_end(key)
        return _tokenizers[key]


def _build_tokenizer(model) -> Any:
    words = vocabulary(model)
    # llguidance marks special tokens with a leading 0xFF byte (never in UTF-8 text), as its own loaders do; an id
    # without any text (padding past the vocabulary) is b"", which no grammar matches
    pieces = [b"\xff" + piece if i in words.special else piece for i, piece in enumerate(words.pieces)]
    eos = sorted(model.eos_token_ids)
    bos = model.tokenizer.get_bos_token_id()

    class Vocabulary:
        """What ``llguidance.TokenizerWrapper`` reads."""

        eos_token_id = eos[0] if eos else None
        bos_token_id = bos if bos >= 0 else None
        special_token_ids = sorted(words.special)

        def __init__(self):
            self.tokens = pieces

        def __call__(self, text: str | bytes) -> list[int]:
            if isinstance(text, bytes):
                text = text.decode("utf-8", "replace")
            return model.encode(text)

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocabulary()), n_vocab=model.vocab_size, eos_token=eos)
