"""Speculative decoding with penalties and grammars on a tiny random model: sampled speculative replies follow the
autoregressive distribution exactly (chi-square against the distribution enumerated from the target, with a negative
control), under repetition, presence and frequency penalties and under a grammar (structured output), which masks
the same rows; greedy ones with penalties give the autoregressive tokens. Greedy speculative decoding on the default
model: ``test_speculative_greedy``; greedy identity under a grammar: ``test_constraints``.
"""

from dataclasses import dataclass, replace

import numpy as np
import pytest
from scipy.stats import chisquare

from inference.auto_decoding import PLAIN, Choice, StepPlanner
from inference.constraints import GrammarMask, lark_grammar
from inference.engine import Engine
from inference.model import load_model
from inference.penalties import ReplyPenalties
from inference.sampling import warp
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    OutputSettings,
    SamplingSettings,
    SpeculativeSettings,
)

# --- penalties: speculative decoding still samples the autoregressive distribution ------------------------------

PENALTIES = {"repetition_penalty": 1.6, "presence_penalty": 0.6, "frequency_penalty": 0.4}
#: Seeded replies each chi-square samples, sized by the power it needs. The 4-token replies have 81 possible values
#: (top-k 3), near-uniform (the likeliest 1.5% under penalties, 1.9% under the grammar): 500 replies expect each about
#: 6 times on average, and the test keeps 81 bins under penalties, 71 under the grammar (400 replies would pool them
#: into 37 and 32, 300 into 1 and 5). The planted bug of the negative control below, over this many replies, fails at
#: p = 6e-33 (chi-square 335 on 80 degrees of freedom: a non-centrality of about 255, an effect size w = 0.71); these
#: tests fail under p = 1e-3, so an effect that large is missed with probability 5e-15 (non-central chi-square; 1e-11
#: at the effect measured over 1,000 replies, p = 3e-65). The smallest effect caught 99% of the time is w = 0.44 (0.31
#: with 1,000 replies, at twice the time). A correct engine fails each test with probability 1e-3 whatever the number.
PENALTY_TRIALS = 500
PENALTY_TOKENS = 4  # the first step after the first token drafts K = 2 and emits tokens 2..4 (drafts, then bonus)
PENALTY_PROMPT = "the cat sat on the mat and the cat sat on the hat so the cat"
PERTURBATION = 0.004  # noise on the draft model's weights (theirs: standard deviation 0.02); see tiny_engines


@pytest.fixture(scope="module")
def tiny_engines(tiny_ir, tmp_path_factory):
    """Engines on a tiny random target (tied embeddings: it likes to repeat its last token, so penalties matter):
    one drafting with a perturbed copy of it (``PERTURBATION``: its drafts often differ from the target's choices,
    some are accepted, many rejected), one with an identical copy (every draft should be accepted: the target's own
    folder loaded a second time; ``write_tiny_llama`` with the same seed writes the same weights and graph, only
    OpenVINO's generated node names differ), one with prompt lookup, one with a draft head trained briefly on the
    target's own penalized replies, over every token those replies can hold (its drafts disagree as the perturbed
    copy's do); and under ``expected`` the exact autoregressive distributions the chi-squares compare with, by grammar
    (filled by ``_expected``: the same for every engine, as they share the target)."""
    from tiny_heads import write_trained_tiny_head
    from tiny_models import write_tiny_llama

    from inference.draft_head import load_head
    from inference.precision import PrecisionSettings

    drafts = tmp_path_factory.mktemp("tiny-draft")
    perturbed = write_tiny_llama(tiny_ir["gguf"], drafts / "perturbed", seed=0, perturbation=PERTURBATION)
    target = load_model(tiny_ir["same"], "CPU", PrecisionSettings())
    prompt = target.encode(PENALTY_PROMPT)
    sampling = _penalty_settings("ar", None).sampling
    expected = {None: _autoregressive_distribution(Engine(target), prompt, sampling)}
    vocab = sorted({token for reply in expected[None] for token in reply})
    head = write_trained_tiny_head(target, tiny_ir["same"], prompt, sampling, vocab + [0, 1, 2],
                                   tmp_path_factory.mktemp("tiny-head") / "head")
    return {
        "model": Engine(target, load_model(perturbed, "CPU", PrecisionSettings())),
        "copy": Engine(target, load_model(tiny_ir["same"], "CPU", PrecisionSettings())),
        "lookup": Engine(target),
        "head": Engine(target, load_head(head)),
        "expected": expected,  # the exact distributions, by grammar: every engine's target is this one
    }


def _tiny_engine(engines: dict, decoding: str) -> Engine:
    """The tiny engine a test's decoding runs on: ``spec_head`` drafts with the head (``Decoding.DRAFT_MODEL``),
    ``auto`` with the head and prompt lookup."""
    return engines[{"spec_lookup": "lookup", "spec_head": "head", "auto": "head"}.get(decoding, "model")]


def _decoding(decoding: str) -> str:
    return "spec_model" if decoding == "spec_head" else decoding


class _RandomChoices:
    """Replaces ``StepPlanner.choose`` by a seeded random choice among a plain step, the head with K = 1..3 and
    lookup with what it offers: a reply whose drafter and K (K = 0 included) change from step to step, as Auto's
    may, without timings. It chooses for a seeded sampled Auto reply too, which the engine's planner plans from
    preset costs (``auto_decoding.seeded_sampling``): these chi-square trials are seeded, and what they test is that
    every mix of choices keeps the distribution."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)
        self.k_seen: set[int] = set()

    def __call__(self, planner, cache_len: int, limit: int, lookup_drafts: int = 0, lookup_match: int = 0) -> Choice:
        options = [Choice(PLAIN, 0)] + [Choice("head", k) for k in range(1, min(limit, 3) + 1)]
        options += [Choice("lookup", k) for k in range(1, min(limit, lookup_drafts) + 1)]
        autoregressive = not planner.drafters  # the autoregressive reference's planner has no drafter
        choice = Choice(PLAIN, 0) if limit <= 0 or autoregressive else options[self._rng.integers(len(options))]
        self.k_seen.add(choice.k)
        return choice


def _penalty_settings(decoding: str, seed: int | None, temperature: float = 1.0, grammar: str | None = None,
                      **overrides) -> GenerationSettings:
    sampling = {"temperature": temperature, "top_k": 3, "seed": seed, "max_new_tokens": PENALTY_TOKENS,
                "ignore_eos": True, **PENALTIES, **overrides}
    return GenerationSettings(
        decoding=Decoding(decoding),
        sampling=SamplingSettings(**sampling),
        context=ContextSettings(n_ctx=512),
        # 1-gram lookup: the pending token matching any earlier token proposes what followed it
        speculative=SpeculativeSettings(k=3, lookup_max_ngram=1),
        output=OutputSettings(grammar=grammar),
    )


def _autoregressive_distribution(engine: Engine, prompt: list[int], settings: SamplingSettings,
                                 grammar: str | None = None) -> dict:
    """The exact probability of every reply of PENALTY_TOKENS tokens under autoregressive decoding with
    penalties (and ``grammar``): the target's raw logits after each prefix (a greedy one-token reply without
    penalties leaves them in ``last_logits``), penalized and masked as ``ReplyPenalties`` defines it, warped,
    multiplied along the reply."""
    plain = _penalty_settings("ar", None, temperature=0.0, max_new_tokens=1, repetition_penalty=1.0,
                              presence_penalty=0.0, frequency_penalty=0.0)
    mask = GrammarMask(engine.target, grammar) if grammar is not None else None
    distribution, frontier = {}, {(): 1.0}
    for _ in range(PENALTY_TOKENS):
        grown = {}
        for prefix, mass in frontier.items():
            engine.generate_text(prompt + list(prefix), plain)
            logits = ReplyPenalties(settings, prompt, list(prefix), mask).apply(engine.last_logits)
            probs = warp(logits, settings)
            for token in np.flatnonzero(probs):
                grown[prefix + (int(token),)] = mass * probs[token]
        frontier = grown
    distribution.update(frontier)
    return distribution


@pytest.mark.slow
@pytest.mark.parametrize("decoding", ["ar", "spec_model", "spec_lookup", "spec_head", "auto"])
def test_sampling_with_penalties_speculative_matches_autoregressive_distribution(tiny_engines, decoding, monkeypatch):
    """Chi-square of the first PENALTY_TOKENS tokens against the exact autoregressive distribution with
    repetition, presence and frequency penalties (a target row penalized without the drafts before it, or drafts
    penalized differently from the target, fails it). The head's drafts differ from the target's choices, so its
    run exercises rejections and resampling at every position of a step, with a pruned draft vocabulary. ``auto``
    changes the drafter and K (0 included) at random from step to step (``_RandomChoices``)."""
    choices = _RandomChoices(seed=0)
    if decoding == "auto":
        monkeypatch.setattr(StepPlanner, "choose", lambda planner, *args: choices(planner, *args))
    _assert_sampling_matches_autoregressive_distribution(tiny_engines, decoding, None)
    if decoding == "auto":
        # every K the room allows, 0 included: PENALTY_TOKENS = 4 leaves room for 2 drafts after the first token
        assert choices.k_seen == {0, 1, 2}, choices.k_seen


def test_a_seeded_sampled_auto_reply_is_the_same_whatever_the_planner_would_choose(tiny_engines, monkeypatch):
    """Auto chooses from measured times, which differ from run to run; a seeded sampled reply must not. Two runs whose
    timing-driven planner makes different choices (``_RandomChoices`` of different seeds, wherever a planner follows
    timings) give the same seeded sampled reply: it plans from preset costs and its own drafts
    (``auto_decoding.PresetCosts``), so no timing reaches it. The same fake does change the choices of a greedy Auto
    reply (whose tokens do not depend on them), and another seed gives another sampled reply."""
    engine = tiny_engines["head"]
    prompt = engine.target.encode(PENALTY_PROMPT)
    original = StepPlanner.choose

    def run(choice_seed: int, seed: int | None, temperature: float = 1.0):
        fake = _RandomChoices(seed=choice_seed)
        monkeypatch.setattr(StepPlanner, "choose",
                            lambda planner, *args: (fake if planner.follows_timings else original)(planner, *args))
        engine.reset()
        return engine.generate_text(prompt, _penalty_settings("auto", seed, temperature=temperature, max_new_tokens=24))

    first, second = run(0, seed=7), run(1, seed=7)
    assert first.mode == second.mode == "auto" and first.new_tokens == 24
    assert first.token_ids == second.token_ids and first.text == second.text
    assert first.k_steps == second.k_steps and (first.drafted, first.accepted) == (second.drafted, second.accepted)
    assert set(first.by_drafter) <= {"head", "lookup", "plain"}, first.by_drafter
    assert run(0, seed=8).token_ids != first.token_ids
    greedy = [run(choice_seed, seed=None, temperature=0.0) for choice_seed in (0, 1)]
    assert greedy[0].token_ids == greedy[1].token_ids
    assert greedy[0].k_steps != greedy[1].k_steps, "the fake planner should have made different choices"


#: Words of the test prompt, with or without a space before: the grammar keeps some of the tiny model's likely
#: tokens and forbids others, and prompt lookup proposes both kinds.
WORDS = r"""start: /( ?(the|cat|sat|on|mat|and|hat|so))+/"""


@pytest.mark.slow
@pytest.mark.parametrize("decoding", ["ar", "spec_model", "spec_lookup", "spec_head", "auto"])
def test_sampling_with_a_grammar_speculative_matches_constrained_autoregressive_distribution(tiny_engines, decoding,
                                                                                             monkeypatch):
    """The same chi-square under a grammar: sampled speculative decoding has the constrained autoregressive
    distribution (target rows and drafts masked alike, forbidden lookup drafts cut before verification, a head's
    drafts ending where the grammar leaves none of its vocabulary), ``auto``'s K changing at random too."""
    if decoding == "auto":
        choices = _RandomChoices(seed=1)  # a function, so that it binds to the planner as the method did
        monkeypatch.setattr(StepPlanner, "choose", lambda planner, *args: choices(planner, *args))
    _assert_sampling_matches_autoregressive_distribution(tiny_engines, decoding, lark_grammar(WORDS))


def _expected(tiny_engines, grammar: str | None) -> dict:
    """The exact autoregressive distribution of the tiny target's replies under ``grammar`` (and the penalties),
    computed once per module (``_autoregressive_distribution``: about 0.4 s of CPU, more under the grammar)."""
    expected = tiny_engines["expected"]
    if grammar not in expected:
        engine = tiny_engines["lookup"]
        prompt = engine.target.encode(PENALTY_PROMPT)
        sampling = _penalty_settings("ar", None).sampling
        expected[grammar] = _autoregressive_distribution(engine, prompt, sampling, grammar)
    return expected[grammar]


def _assert_sampling_matches_autoregressive_distribution(tiny_engines, decoding: str, grammar: str | None) -> None:
    engine = _tiny_engine(tiny_engines, decoding)
    sampled = _sampled_replies(engine, decoding, _expected(tiny_engines, grammar), grammar)
    if decoding != "ar":  # the 1-gram lookup drafts in about 30% of the replies, the model draft in all
        assert sampled.drafted >= PENALTY_TRIALS // 5, f"too few drafts to test anything: {sampled.drafted}"
    if decoding in ("spec_model", "spec_head") and grammar is None:  # drafts that disagree: rejections happen
        assert 0.05 * sampled.drafted < sampled.accepted < 0.95 * sampled.drafted, (sampled.accepted, sampled.drafted)
    assert sampled.pvalue > 1e-3, sampled.table


@dataclass
class _Sampled:
    """Seeded replies against the exact autoregressive distribution: the chi-square p-value, the
    (observed, expected) counts of its bins, and the drafts made and accepted."""

    pvalue: float
    table: list[tuple[int, float]]
    drafted: int
    accepted: int


def _sampled_replies(engine: Engine, decoding: str, expected: dict, grammar: str | None = None) -> _Sampled:
    """Sample PENALTY_TRIALS replies (seeds 0 ..) and compare their counts with ``expected``, the exact autoregressive
    distribution (``_expected``), by a chi-square test (replies expected fewer than 5 times pooled); a reply
    autoregressive decoding cannot produce fails at once."""
    prompt = engine.target.encode(PENALTY_PROMPT)
    counts: dict[tuple, int] = {}
    drafted = accepted = 0
    trials = PENALTY_TRIALS
    for seed in range(trials):
        stats = engine.generate_text(prompt, _penalty_settings(_decoding(decoding), seed, grammar=grammar))
        counts[tuple(stats.token_ids)] = counts.get(tuple(stats.token_ids), 0) + 1
        drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
    assert set(counts) <= set(expected), "a reply autoregressive decoding cannot produce"
    replies = sorted(expected, key=expected.get, reverse=True)
    frequent = [r for r in replies if expected[r] * trials >= 5]
    observed = [counts.get(r, 0) for r in frequent]
    wanted = [expected[r] * trials for r in frequent]
    rest_observed, rest_wanted = trials - sum(observed), trials - sum(wanted)
    if rest_wanted >= 5:  # the rare replies as one bin
        observed, wanted = [*observed, rest_observed], [*wanted, rest_wanted]
    else:  # too rare (or none: the frequent replies hold all the mass) for a bin of their own: join the last one
        observed[-1] += rest_observed
        wanted[-1] += rest_wanted
    table = list(zip(observed, np.round(wanted, 1).tolist()))
    return _Sampled(float(chisquare(observed, wanted).pvalue), table, drafted, accepted)


@pytest.mark.slow
def test_the_engine_chi_square_fails_when_the_residual_distribution_is_wrong(tiny_engines, monkeypatch):
    """Negative control of the chi-square above, through the whole engine (drafter, penalties, verification pass,
    acceptance): it must fail on a plausible bug, or its passing shows nothing.

    Planted bug: after a rejected draft the next token is resampled from the target's distribution p instead of the
    residual normalize(max(0, p - q)) (``sampling.accept_sampled``): every reply it gives is still one the target
    can give, the first token's marginal is near the target's, and an identical draft (never rejected) cannot show
    it. Drafting with the perturbed draft model (about half its drafts accepted), the chi-square failed on it with
    p = 3e-65 over 1,000 replies, where the real acceptance passes with p = 0.16, and with p = 6e-33 over the
    PENALTY_TRIALS (500) replies run here, the number the tests above sample (measured)."""
    from inference import sampling

    def resample_from_p(target_probs, draft_probs, draft_tokens, rng):
        for i, token in enumerate(draft_tokens):
            q_token = 1.0 if draft_probs is None else draft_probs[i, token]
            if q_token > 0 and rng.random() * q_token < target_probs[i][token]:
                continue
            return i, sampling.sample(target_probs[i], rng)  # the bug: p, not the residual
        return len(draft_tokens), sampling.sample(target_probs[len(draft_tokens)], rng)

    monkeypatch.setattr(sampling, "accept_sampled", resample_from_p)
    sampled = _sampled_replies(tiny_engines["model"], "spec_model", _expected(tiny_engines, None))
    assert 0.05 * sampled.drafted < sampled.accepted < 0.95 * sampled.drafted, (sampled.accepted, sampled.drafted)
    assert sampled.pvalue < 1e-6, sampled.table


def test_an_identical_draft_model_penalized_like_the_target_is_always_accepted(tiny_engines):
    """The draft model's drafts go through the reply's penalties as the target's rows do: an identical copy of the
    target then proposes from the very distribution the target verifies with, and no draft is ever rejected."""
    engine = tiny_engines["copy"]
    prompt = engine.target.encode(PENALTY_PROMPT)
    drafted = accepted = 0
    for seed in range(40):
        stats = engine.generate_text(prompt, _penalty_settings("spec_model", seed, max_new_tokens=12))
        drafted, accepted = drafted + stats.drafted, accepted + stats.accepted
    assert drafted >= 40 and accepted == drafted, (accepted, drafted)


@pytest.mark.parametrize("decoding", ["spec_model", "spec_lookup", "spec_head"])
@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_with_penalties_speculative_equals_autoregressive_on_a_tiny_model(tiny_engines, decoding, k):
    engine = _tiny_engine(tiny_engines, decoding)
    prompt = engine.target.encode(PENALTY_PROMPT)
    # a short repetition window lets tokens come back, so that prompt lookup finds matches; presence and frequency
    # penalties (which never forget) are tested on the default model (test_speculative_greedy)
    greedy = {"temperature": 0.0, "top_k": 0, "max_new_tokens": 48, "repetition_penalty": 3.0, "repeat_last_n": 6,
              "presence_penalty": 0.0, "frequency_penalty": 0.0}
    reference = engine.generate_text(prompt, _penalty_settings("ar", None, **greedy))
    unpenalized = engine.generate_text(prompt, _penalty_settings("ar", None, **{**greedy, "repetition_penalty": 1.0}))
    assert len(set(unpenalized.token_ids)) == 1, "without penalties the tiny model repeats one token"
    assert len(set(reference.token_ids)) > 3, "the penalty breaks the loop"
    settings = _penalty_settings(_decoding(decoding), None, **greedy)
    candidate = engine.generate_text(prompt, replace(settings, speculative=replace(settings.speculative, k=k)))
    assert candidate.drafted > 0
    assert candidate.token_ids == reference.token_ids
