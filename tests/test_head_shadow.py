"""Auto judges the draft head during plain steps (``auto_decoding``'s design rules): the head's catch-up over the
positions plain steps emitted scores the first draft each of those steps would have made, and those estimates reach
the planner without a change of the target's pass width."""

import numpy as np
import pytest
from helpers import chat_ids, settings

from inference.auto_decoding import PLAIN, SHADOW_EVERY, SHADOW_EVERY_FAR, SHADOW_ROWS, WARMUP, StepPlanner
from inference.draft_head import load_head
from inference.drafting import HeadDrafter
from inference.engine import KV_SLACK, Engine
from inference.models.default_head import default_head_dir
from inference.penalties import ReplyPenalties

N_CTX = 512


@pytest.fixture(scope="module")
def engine(head_target):
    return Engine(head_target, load_head(default_head_dir()))


def _greedy_first_draft(engine: Engine, context: list[int]) -> int:
    """The draft a fresh head makes after ``context`` (its last token pending), greedy."""
    fresh = HeadDrafter(engine.draft, engine._cache, engine.target.vocab_size, KV_SLACK)
    greedy = settings("ar").sampling
    return fresh.propose(context, 1, N_CTX, greedy, np.random.default_rng(0), ReplyPenalties(greedy, context, []))[0][0]


def test_the_head_s_catch_up_rows_are_the_first_drafts_plain_steps_would_have_made(engine, target):
    engine.reset()
    prompt = chat_ids(target, "Give me three tips for better sleep.")
    reply = engine.generate_text(prompt, settings("ar", max_new_tokens=24, n_ctx=N_CTX))
    context = prompt + reply.token_ids  # the last reply token is pending: the target cache holds the rest
    assert engine._cache.tokens == context[:-1]
    head = HeadDrafter(engine.draft, engine._cache, engine.target.vocab_size, KV_SLACK)
    start, rows = head.first_draft_logits(context, N_CTX)
    assert start == 0 and rows.shape == (len(context) - 2, len(head.vocab))
    for j in (len(prompt) - 1, len(prompt) + 5, len(context) - 3):  # row j: the draft with context[j + 1] pending
        assert head.vocab[int(np.argmax(rows[j]))] == _greedy_first_draft(engine, context[: j + 2]), j
    # the position before the pending token's is left for the next draft's catch-up, which proposes from it
    assert head.first_draft_logits(context, N_CTX) is None
    greedy = settings("ar").sampling
    drafts, _ = head.propose(context, 1, N_CTX, greedy, np.random.default_rng(0), ReplyPenalties(greedy, context, []))
    assert drafts == [_greedy_first_draft(engine, context)]


def test_auto_judges_the_head_every_few_plain_steps_with_what_verification_would_have_decided(engine, target,
                                                                                              monkeypatch):
    engine.reset()
    recorded: list[list[float]] = []
    original = StepPlanner.record_shadow
    monkeypatch.setattr(StepPlanner, "record_shadow", lambda self, estimates, cache_len: (
        recorded.append(estimates), original(self, estimates, cache_len))[1])
    prompt = chat_ids(target, "Explain how a bicycle stays upright.")
    plain = engine.generate_text(prompt, settings("ar", max_new_tokens=80, n_ctx=N_CTX))
    # a machine where verifying a draft costs 1,000 plain passes: Auto decodes plainly, and judges the head meanwhile
    engine.reset()
    for size, ms in ((1, 10.0), (2, 10_000.0)):
        for _ in range(WARMUP):
            engine._measurements.passes.record(size, len(prompt), ms * 1e-3)
    auto = engine.generate_text(prompt, settings("auto", max_new_tokens=80, n_ctx=N_CTX))
    assert auto.token_ids == plain.token_ids
    assert auto.by_drafter[PLAIN].steps == auto.new_tokens - 1, auto.by_drafter
    # judged before the 33rd plain step; then, the head far from paying at that price, every SHADOW_EVERY_FAR steps
    assert len(recorded) == 1 + max(0, auto.new_tokens - 2 - SHADOW_EVERY) // SHADOW_EVERY_FAR
    # each estimate is the greedy verdict on the head's first draft at a plain step: whether it equals the token
    context = prompt + plain.token_ids
    verdicts = [float(_greedy_first_draft(engine, context[: i + 1]) == context[i + 1])
                for i in range(len(prompt), len(prompt) + SHADOW_EVERY)]
    judged = verdicts[:: max(1, SHADOW_EVERY // SHADOW_ROWS)]  # evenly spread rows, SHADOW_ROWS at most
    assert recorded[0] == judged, (recorded[0], verdicts)
    assert 0 < sum(judged) < len(judged)  # the test can fail both ways: some drafts right, some wrong
