"""bench/head_on_free_chat.py scores, at every reply position, the first draft a decoding would make there: replayed
over the positions a greedy K = 1 decoding with the head drafts at, its hits are the drafts that decoding accepted."""

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import chat_ids, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from head_on_free_chat import first_draft_hits, greedy_reply, markdown, summarize  # noqa: E402

from inference.draft_head import load_head  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.models.default_head import default_head_dir  # noqa: E402


def _replay_k1(hits: np.ndarray) -> tuple[int, int]:
    """(drafted, accepted) of a greedy K = 1 decoding whose drafts are right where ``hits`` says: the first draft is
    for reply token 1; an accepted draft emits it and the target's next token, so the next draft is two tokens on."""
    drafted = accepted = 0
    token = 1
    while token < len(hits) + 1:
        drafted += 1
        if hits[token - 1]:
            accepted += 1
            token += 2
        else:
            token += 1
    return drafted, accepted


@pytest.mark.parametrize("prompt", ["Give me three tips for better sleep.", "Why do cats purr?"])
def test_the_hits_replayed_at_k_1_are_the_drafts_speculative_decoding_accepted(head_target, prompt):
    head = load_head(default_head_dir())
    engine = Engine(head_target, head)
    ids = chat_ids(head_target, prompt)
    reply = greedy_reply(engine, ids, 48)
    hits = first_draft_hits(head, head_target, ids, reply)
    assert hits.shape == (len(reply) - 1,) and 0 < hits.sum() < len(hits)
    engine.reset()
    speculative = engine.generate_text(ids, settings("spec_model", max_new_tokens=48, k=1))
    assert speculative.token_ids == reply
    # the last draft may be cut by the reply's end (max_new_tokens): K is clipped there, so it may draft once less
    drafted, accepted = _replay_k1(hits)
    assert (speculative.accepted, speculative.drafted) in ((accepted, drafted), (accepted, drafted - 1))


def test_the_summary_pools_by_kind_and_by_reply_position():
    hits = [np.array([True, False, True]), np.array([False] * 40)]
    summary = summarize(hits, ["story", "lists"])
    assert summary["positions"] == 43 and summary["acceptance"] == pytest.approx(2 / 43)
    assert summary["by_kind"]["story"] == {"acceptance": pytest.approx(2 / 3), "positions": 3}
    # entry i is reply token i + 1: tokens 1-31 are the first 31 entries, 32-127 the rest here
    assert summary["by_position"]["1-31"] == {"acceptance": pytest.approx(2 / 34), "positions": 34}
    assert summary["by_position"]["32-127"] == {"acceptance": 0.0, "positions": 9}
    assert summary["per_prompt"] == [0.667, 0.0]


def test_the_report_shows_a_dash_where_a_reply_left_nothing_to_score():
    scored, empty = summarize([np.array([True, False])], ["story"]), summarize([np.zeros(0, dtype=bool)], ["story"])
    assert empty["acceptance"] is None and empty["per_prompt"] == [None]
    report = markdown({"machine": "test", "command": "python bench/head_on_free_chat.py", "commit": "0", "finished": "now",
                       "minutes": 0.1, "prompts": 1, "max_new_tokens": 1, "heads": {"a": scored, "b": empty}})
    assert "| b | 0 | **—** | — |" in report and "| a | 2 | **0.500** | 0.500 |" in report
    assert "better on 0, worse on 0, equal on 0" in report  # the unscored prompt is left out of the comparison
