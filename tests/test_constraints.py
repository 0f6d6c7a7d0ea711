"""Structured output: the grammar's token bytes come from the model's own detokenizer, constrained replies parse and
match their schema on the default model in every decoding mode, greedy constrained speculative decoding equals
constrained autoregressive decoding, and log-probabilities are the target's, whichever drafter proposed a token."""

import json
from dataclasses import replace

import numpy as np
import pytest
from helpers import chat_ids

from inference.constraints import GrammarError, GrammarMask, json_object_grammar, json_schema_grammar
from inference.engine import Engine
from inference.events import TextDelta
from inference.penalties import ReplyPenalties
from inference.scoring import prompt_logprobs, score
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    OutputSettings,
    SamplingSettings,
    SettingError,
    SpeculativeSettings,
)
from inference.vocabulary import token_bytes, vocabulary

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "hobbies": {"type": "array", "items": {"type": "string"}},
        "pet": {"anyOf": [{"type": "null"}, {"enum": ["cat", "dog"]}]},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "tall": {"type": "boolean"},
        "height_m": {"type": "number"},
    },
    "required": ["name", "age", "hobbies", "pet", "address", "tall", "height_m"],
    "additionalProperties": False,
}
PERSON_PROMPT = "Describe a person called Ada as JSON: name, age, hobbies, pet, address, whether she is tall, height."
OBJECT_PROMPT = "Give me a JSON object with the name and the capital of France."


def _matches_person(value) -> None:
    assert set(value) == set(PERSON["required"]), value
    assert isinstance(value["name"], str) and isinstance(value["age"], int) and not isinstance(value["age"], bool)
    assert isinstance(value["hobbies"], list) and all(isinstance(h, str) for h in value["hobbies"])
    assert value["pet"] in (None, "cat", "dog")
    assert set(value["address"]) >= {"city"} and isinstance(value["address"]["city"], str)
    assert isinstance(value["tall"], bool) and isinstance(value["height_m"], (int, float))


@pytest.fixture(scope="module")
def engine(target, draft):
    return Engine(target, draft)


def _settings(decoding: str, grammar: str | None, temperature: float = 0.0, seed: int | None = None, k: int = 4,
              logprobs: int | None = None, max_new_tokens: int = 160, repetition_penalty: float = 1.1) -> GenerationSettings:
    return GenerationSettings(
        decoding=Decoding(decoding),
        sampling=SamplingSettings(temperature=temperature, top_p=0.9, seed=seed, repetition_penalty=repetition_penalty,
                                  max_new_tokens=max_new_tokens),
        context=ContextSettings(n_ctx=1024),
        speculative=SpeculativeSettings(k=k),
        output=OutputSettings(grammar=grammar, logprobs=logprobs),
    )


def test_token_bytes_are_the_detokenizers_and_spell_every_text(target):
    pieces = token_bytes(target.folder, target.tokenizer, target.vocab_size)
    words = vocabulary(target)
    assert words.pieces[2] == b"<|im_end|>" and words.special == frozenset(range(17))
    assert len(pieces) == target.vocab_size
    text = "Hello, world! Ünïcödé 你好 🙂 def f(x):\n    return x ** 2  # 123"
    assert b"".join(pieces[t] for t in target.encode(text)) == text.encode()
    special = [i for i, piece in enumerate(pieces) if piece is None]
    assert special == list(range(17))  # <|endoftext|>, <|im_start|>, <|im_end|> ... <empty_output>
    partial = [p for p in pieces if p is not None and p.decode("utf-8", "ignore") != p.decode("utf-8", "replace")]
    assert len(partial) > 100, "byte-level pieces of multi-byte characters keep their raw bytes"


@pytest.mark.parametrize("decoding", ["ar", "spec_lookup", "spec_model"])
@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "sampled"])
def test_constrained_replies_parse_and_match_the_schema_in_every_mode(engine, target, decoding, sampled):
    temperature, seeds = (0.7, (1, 2)) if sampled else (0.0, (None,))
    for seed in seeds:
        for prompt, grammar, check in ((PERSON_PROMPT, json_schema_grammar(PERSON), _matches_person),
                                       (OBJECT_PROMPT, json_object_grammar(), lambda v: isinstance(v, dict))):
            engine.reset()
            stats = engine.generate_text(chat_ids(target, prompt), _settings(decoding, grammar, temperature, seed))
            assert stats.stop_reason == "eos", (stats.stop_reason, stats.text)
            check(json.loads(stats.text))


@pytest.fixture(scope="module")
def constrained_references(engine, target) -> list[tuple]:
    """(prompt ids, grammar, stats of the constrained greedy autoregressive reply) for a JSON schema and a JSON object
    prompt, computed once for both decodings of the test below (the replies depend only on the target)."""
    references = []
    for prompt, grammar in ((PERSON_PROMPT, json_schema_grammar(PERSON)), (OBJECT_PROMPT, json_object_grammar())):
        ids = chat_ids(target, prompt)
        engine.reset()
        reference = engine.generate_text(ids, _settings("ar", grammar))
        free = engine.generate_text(ids, _settings("ar", None, max_new_tokens=len(reference.token_ids)))
        assert free.token_ids != reference.token_ids, "the grammar changes the greedy reply"
        references.append((ids, grammar, reference))
    return references


@pytest.mark.parametrize("decoding", ["spec_lookup", "spec_model"])
def test_greedy_constrained_speculative_equals_constrained_autoregressive(engine, constrained_references, decoding):
    for ids, grammar, reference in constrained_references:
        for k in (1, 3, 8):
            engine.reset()
            candidate = engine.generate_text(ids, _settings(decoding, grammar, k=k))
            assert candidate.drafted > 0
            assert candidate.token_ids == reference.token_ids, (k, candidate.text, reference.text)


def test_drafts_the_grammar_forbids_are_cut_at_the_first_forbidden_token(target):
    mask = GrammarMask(target, json_schema_grammar({"type": "object", "properties": {"a": {"type": "integer"}}}))
    reply = target.encode('{"a": 1')
    penalties = ReplyPenalties(SamplingSettings(), [0], reply, mask)
    allowed = target.encode("2}")
    forbidden = target.encode("x")
    assert penalties.allowed_drafts(allowed + forbidden + allowed) == len(allowed)
    assert penalties.allowed_drafts(forbidden + allowed) == 0
    eos = 2
    assert penalties.allowed_drafts(allowed + [eos] + allowed) == len(allowed) + 1, "an EOS ends the drafts it closes"
    rows = penalties.rows(np.zeros((3, target.vocab_size), dtype=np.float32), allowed + [eos])
    assert np.isfinite(rows[0]).sum() > 10 and np.isfinite(rows[0][allowed[0]])
    assert not np.isfinite(rows[0][forbidden[0]])
    assert np.flatnonzero(np.isfinite(rows[2])).tolist() == [eos], "after '}' the object is complete: EOS only"
    with pytest.raises(GrammarError):
        penalties.apply(np.zeros(target.vocab_size, dtype=np.float32), forbidden)


def test_a_schema_llguidance_cannot_enforce_is_refused_with_its_reason():
    with pytest.raises(GrammarError, match="minimum"):
        json_schema_grammar({"type": "integer", "minimum": "zero"})
    with pytest.raises(GrammarError):
        json_schema_grammar(["not", "an", "object"])


@pytest.mark.parametrize("decoding", ["spec_lookup", "spec_model"])
def test_log_probabilities_are_the_targets_whichever_drafter_proposed(engine, target, decoding):
    """Each token's log-probability is log-softmax of the target's penalized, masked logits over the temperature:
    the same numbers in autoregressive and speculative decoding (up to the ~1e-4 noise between one-token and
    multi-token passes), alternatives most likely first, the chosen token's own first when greedy. (Prompt lookup
    on a sentence to repeat, without the repetition penalty, where it finds drafts; the draft model under the person
    schema.)"""
    lookup = decoding == "spec_lookup"
    repeat = "Repeat this sentence three times: The quick brown fox jumps over the lazy dog."
    prompt, grammar = (repeat, None) if lookup else (PERSON_PROMPT, json_schema_grammar(PERSON))
    ids = chat_ids(target, prompt)
    runs = {}
    for mode in ("ar", decoding):
        engine.reset()
        settings = _settings(mode, grammar, logprobs=3, repetition_penalty=1.0 if lookup else 1.1)
        deltas = [e for e in engine.generate(ids, settings) if isinstance(e, TextDelta)]
        runs[mode] = deltas
    reference, candidate = runs["ar"], runs[decoding]
    assert [d.token_id for d in candidate] == [d.token_id for d in reference]
    assert any(d.from_draft for d in candidate)
    np.testing.assert_allclose([d.logprob.logprob for d in candidate], [d.logprob.logprob for d in reference], atol=2e-3)
    pieces = vocabulary(target).pieces
    for delta in reference:
        values = [alternative.logprob for alternative in delta.top_logprobs]
        assert len(values) == 3 and values == sorted(values, reverse=True) and values[0] <= 0.0
        assert delta.top_logprobs[0] == delta.logprob, "greedy: the argmax"
        assert delta.logprob.piece == pieces[delta.token_id] and delta.logprob.token_id == delta.token_id
    if grammar is not None:
        forced = [d for d in reference if d.logprob.logprob > -1e-6]
        assert forced, "the grammar forces some tokens (the schema's keys): probability 1 after the mask"
        assert all(alternative.logprob == -np.inf for d in forced for alternative in d.top_logprobs[1:])


def test_log_probabilities_are_off_by_default_and_bounded(engine, target):
    engine.reset()
    deltas = [e for e in engine.generate(chat_ids(target, "Hi"), _settings("ar", None, max_new_tokens=4))
              if isinstance(e, TextDelta)]
    assert all(d.logprob is None and d.top_logprobs == () for d in deltas)
    with pytest.raises(SettingError) as error:
        OutputSettings(logprobs=21).validate()
    assert error.value.field == "logprobs"


def test_prompt_log_probabilities_score_each_prompt_token_with_its_alternatives(engine, target):
    """``echo``'s numbers: each prompt token's log-probability (``score``'s) and the most likely tokens there; the
    first reply token's log-probability (greedy, no penalty) is what scoring the prompt followed by it gives."""
    ids = target.encode("The capital of France is Paris. The capital of Italy is")
    context = ContextSettings(n_ctx=512)
    scored = prompt_logprobs(engine, ids, context, top=2)
    assert [token.token_id for token, _ in scored] == ids[1:]
    np.testing.assert_allclose([token.logprob for token, _ in scored], score(engine, ids, context), atol=1e-9)
    for token, alternatives in scored:
        assert len(alternatives) == 2 and alternatives[0].logprob >= alternatives[1].logprob >= -np.inf
        assert alternatives[0].logprob >= token.logprob
    assert scored[-1][0].piece == b" is"
    plain = replace(_settings("ar", None, logprobs=1, max_new_tokens=1), sampling=SamplingSettings(max_new_tokens=1))
    first = next(e for e in engine.generate(ids, plain) if isinstance(e, TextDelta))
    after = prompt_logprobs(engine, ids + [first.token_id], context, top=0)
    assert after[-1][0].logprob == pytest.approx(first.logprob.logprob, abs=1e-3) and after[-1][1] == ()
    assert prompt_logprobs(engine, ids[:1], context, top=2) == []


def test_drafts_are_judged_after_the_reply_as_it_is_not_after_drafts_the_target_rejected(target):
    """After a verification pass the matcher follows the reply plus the drafts it scored. Where the target took
    another token than a draft, the next drafts must be judged after the reply as it is: ``allowed_drafts`` asks
    with the reply's length as known-accepted, and took the rejected draft still in the matcher's path for part of
    the reply, allowing drafts the grammar forbids, whose verification row then raised GrammarError (a structured
    output request answered 400 "the grammar forbids the reply's token ...", when Auto drafted with prompt lookup,
    which asks nothing of the grammar before that call)."""
    mask = GrammarMask(target, json_schema_grammar({"type": "object", "properties": {"a": {"type": "integer"}}}))
    before = target.encode('{"a": 1')
    rejected = target.encode("2}")
    assert mask.allowed_prefix(before + rejected, len(before)) == len(before) + len(rejected)  # followed
    reply = before + target.encode("}")  # the target took "}" where the first draft said "2"
    assert mask.allowed_prefix(reply + rejected, len(reply)) == len(reply)  # '{"a": 1}' is complete: no digit
    assert not mask.allowed(reply)[rejected[0]]


def test_a_model_whose_folder_was_removed_since_loading_still_replies_in_json(tiny_ir, tmp_path, monkeypatch):
    """Bug: the vocabulary (structured output, log-probabilities, streaming by bytes) was keyed by the digest of the
    tokenizer files read again from the model's folder, and built from its detokenizer file: removed since the load
    (`specchat models remove` while the window or the server kept the model), a JSON-mode reply failed at once with
    "cannot read the detokenizer of tiny: FrontEnd API failed with GeneralFailure". It is keyed by the digest taken
    at the load, and built, where it must be, from the tokenizer loaded: the same bytes as its detokenizer file's."""
    import shutil
    from collections import OrderedDict

    import inference.constraints as constraints
    import inference.vocabulary as vocabularies
    from inference.model import load_model
    from inference.precision import PrecisionSettings

    shutil.copytree(tiny_ir["same"], tmp_path / "tiny")
    model = load_model(tmp_path / "tiny", "CPU", PrecisionSettings())
    expected = token_bytes(model.folder, model.tokenizer, model.vocab_size)  # from its detokenizer file, as it was
    engine = Engine(model)  # (as the window and the server keep it)
    shutil.rmtree(tmp_path / "tiny")
    settings = replace(_settings("ar", json_object_grammar(), max_new_tokens=24), context=ContextSettings(n_ctx=256))
    assert engine.generate_text(chat_ids(model, OBJECT_PROMPT), settings).text.startswith("{")
    monkeypatch.setattr(vocabularies, "_vocabularies", OrderedDict())  # built now, from what is in memory
    monkeypatch.setattr(constraints, "_tokenizers", OrderedDict())
    words = vocabulary(model)
    assert [None if i in words.special else piece for i, piece in enumerate(words.pieces)] == expected
    assert words.pieces[2] == b"<|im_end|>" and words.special == frozenset(range(17))
    engine.reset()
    assert engine.generate_text(chat_ids(model, OBJECT_PROMPT), settings).text.startswith("{")


def test_a_removed_model_whose_tokenizer_does_not_give_its_bytes_is_refused_with_what_to_do(tiny_ir, tmp_path,
                                                                                          monkeypatch):
    """A tokenizer whose vocabulary is not what its detokenizer writes (SentencePiece's "▁" word starts, byte
    fallback) needs its detokenizer file: with the folder present it is read (the bytes are right), removed since the
    load the model is refused, with what to do, not with OpenVINO's words."""
    import shutil
    from collections import OrderedDict

    import inference.vocabulary as vocabularies
    from inference.advice import REINSTALL
    from inference.model import load_model
    from inference.precision import PrecisionSettings
    from inference.vocabulary import VocabularyError

    class Metaspace:
        """The loaded tokenizer, its vocabulary's spaces spelt "▁" as SentencePiece's are."""

        def __init__(self, tokenizer):
            self._tokenizer = tokenizer

        def get_vocab(self) -> dict:
            return {piece.replace(b" ", "▁".encode()): i for piece, i in self._tokenizer.get_vocab().items()}

        def __getattr__(self, name):
            return getattr(self._tokenizer, name)

    shutil.copytree(tiny_ir["same"], tmp_path / "tiny")
    loaded = load_model(tmp_path / "tiny", "CPU", PrecisionSettings())
    model = replace(loaded, tokenizer=Metaspace(loaded.tokenizer))
    monkeypatch.setattr(vocabularies, "_vocabularies", OrderedDict())
    assert vocabulary(model).pieces[260] == b" the"  # from the detokenizer file
    monkeypatch.setattr(vocabularies, "_vocabularies", OrderedDict())
    shutil.rmtree(tmp_path / "tiny")
    with pytest.raises(VocabularyError) as refused:
        vocabulary(model)
    assert str(refused.value) == (
        f"the files of tiny were removed since it was loaded ({tmp_path / 'tiny'}), and its tokens' bytes, which "
        f"structured output and log-probabilities need, are read from them; {REINSTALL}"
    )
    assert refused.value.advice == "reinstall"
