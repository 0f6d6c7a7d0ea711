"""The prefill says how far it has read a long prompt (``PromptProgress``), pass by pass, and Stop between passes
ends it with the passes read so far said."""

import threading
from pathlib import Path

from helpers import chat_ids, settings

from inference.engine import Engine
from inference.events import Finished, PromptOverflow, PromptProgress, TextDelta
from inference.prefill import RATE_PASSES, prefill_pass_size, prefill_work, prefill_work_left, remaining_seconds

GENESIS = Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt"


def _progress(events):
    return [event for event in events if isinstance(event, PromptProgress)]


def test_progress_before_the_prefill_and_after_each_pass(target):
    ids = chat_ids(target, GENESIS.read_text(encoding="utf-8")[:6_000])  # ~1,500 tokens: a few passes
    events = list(Engine(target).generate(ids, settings("ar", max_new_tokens=2)))
    progress = _progress(events)
    stats = events[-1].stats
    assert [p.done for p in progress][0] == 0 and progress[0].remaining_s is None
    assert all(p.total == len(ids) == stats.prefilled_tokens for p in progress)
    # one event per pass, sized as prefill_pass_size says (the first pass after an empty cache)
    steps = [b.done - a.done for a, b in zip(progress, progress[1:])]
    assert len(steps) >= 2 and steps[0] == min(len(ids), prefill_pass_size(0, target.prefill_compiled is not None))
    assert all(step > 0 for step in steps) and progress[-1].done == len(ids)
    assert all(b.elapsed_s >= a.elapsed_s for a, b in zip(progress, progress[1:]))
    assert progress[-1].remaining_s == 0 and all(p.remaining_s > 0 for p in progress[1:-1])
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert events.index(progress[-1]) < first_text  # all of it before the reply's first token


def test_progress_counts_the_tokens_kept_after_the_cut_of_a_prompt_longer_than_n_ctx(target):
    ids = chat_ids(target, GENESIS.read_text(encoding="utf-8")[:12_000])  # ~3,000 tokens into n_ctx 1,024
    events = list(Engine(target).generate(ids, settings("ar", max_new_tokens=2, n_ctx=1024)))
    overflow, progress, stats = events[0], _progress(events), events[-1].stats
    assert isinstance(overflow, PromptOverflow) and overflow.prompt_tokens == len(ids)
    kept = len(ids) - overflow.discarded_tokens
    assert stats.prefilled_tokens == kept < 1024
    assert {p.total for p in progress} == {kept} and progress[-1].done == kept


def test_a_prompt_rolled_through_is_estimated_with_the_passes_after_its_rolls(target):
    """A prompt read through rolls (``roll_long_prompt``; n_ctx 1,024, ~3,000 tokens) is read in passes after each
    roll too: the estimate after the first pass counts them (it counted only up to n_ctx, ~a third of the work)."""
    ids = chat_ids(target, GENESIS.read_text(encoding="utf-8")[:12_000])
    context = settings("ar", max_new_tokens=2, n_ctx=1024, n_keep=4, n_discard=512)
    engine, passes = Engine(target), []
    prefill = engine._cache.prefill

    def recorded(chunk, n_ctx=None, upcoming=0):
        passes.append((len(engine._cache), len(chunk)))  # (cached before the pass, its tokens), after any roll
        return prefill(chunk, n_ctx, upcoming)

    engine._cache.prefill = recorded
    events = list(engine.generate(ids, context, roll_long_prompt=True))
    progress, stats = _progress(events), events[-1].stats
    assert stats.rolls >= 3 and sum(count for _, count in passes) == len(ids)
    works = [prefill_work(cached, cached + count) for cached, count in passes]
    for index, (cached, count) in enumerate(passes):  # what is left after each pass: the work of the passes after it
        left = prefill_work_left(cached + count, len(ids) - sum(c for _, c in passes[: index + 1]), 1024, 4, 512)
        assert abs(left - sum(works[index + 1 :])) < 1e-6 * sum(works)
    first_pass_s = progress[1].elapsed_s - progress[0].elapsed_s
    estimate = first_pass_s * sum(works[1:]) / works[0]  # remaining_seconds after one pass: that pass's rate
    assert abs(progress[1].remaining_s - estimate) < 0.2 * estimate


def test_stop_between_passes_ends_the_prefill_with_the_passes_read(target):
    ids = chat_ids(target, GENESIS.read_text(encoding="utf-8")[:8_000])
    engine, cancel, events = Engine(target), threading.Event(), []
    for event in engine.generate(ids, settings("ar", max_new_tokens=8), cancel=cancel):
        events.append(event)
        if isinstance(event, PromptProgress) and event.done > 0:
            cancel.set()  # Stop pressed after the first pass
    progress, final = _progress(events), events[-1]
    assert [p.done for p in progress] == [0, progress[1].done] and 0 < progress[1].done < len(ids)
    assert isinstance(final, Finished) and final.stats.stop_reason == "cancelled"
    assert not [e for e in events if isinstance(e, TextDelta)]
    assert final.stats.prefilled_tokens == progress[1].done == engine.cache_length


def test_the_time_left_is_measured_on_the_latest_passes_not_the_cheaper_first_one():
    """A 4,096-token prompt read as the measurements say (f32: the first 1,024 tokens in 3.1 s, then ~2 ms per unit
    of work): averaged from the start the estimate stayed short (a newcomer saw "about 42 s" for 47 s); the rate of
    the latest passes gives the time the rest takes, and follows a machine that became slower."""
    first = prefill_work(0, 1024)
    passes = [(3.1, first)]
    cached = 1024
    for _ in range(8):  # eight passes after cached tokens, at 2 ms per unit
        size = prefill_pass_size(cached, fast=False)
        passes.append((0.002 * prefill_work(cached, cached + size), prefill_work(cached, cached + size)))
        cached += size
    left = prefill_work(cached, 4096)
    assert abs(remaining_seconds(passes, left) - 0.002 * left) < 1e-9  # what the rest takes
    elapsed, done = sum(s for s, _ in passes), sum(w for _, w in passes)
    assert elapsed * left / done < 0.9 * 0.002 * left  # (the average from the start: over 10% short)
    assert remaining_seconds(passes[:1], left) == 3.1 * left / first  # after the first pass, its own rate
    slower = passes + [(0.003 * w, w) for _, w in passes[-RATE_PASSES:]]  # the machine got busy: 3 ms per unit
    assert abs(remaining_seconds(slower, left) - 0.003 * left) < 1e-9


def test_the_middle_cut_keeps_the_start_the_last_message_s_start_and_the_end():
    """``middle_cut`` on the newcomer trial's numbers (8,778 tokens, n_ctx 4,096, 512 tokens of reply): 3,584 kept."""
    from inference.prefill import MiddleCut, middle_cut

    # one message, its text at 24 (after the template's system block and role): one span from the start
    assert middle_cut(8778, 4096, 4, 0, (0, 24), 512) == MiddleCut(((0, 280), (5474, 8778)), 24, 256, 3304, 5194)
    # a later turn at 3,000 (role header 3 tokens): the earlier turns go with the middle, n_keep stays
    assert middle_cut(8778, 4096, 4, 0, (3000, 3003), 512) == MiddleCut(
        ((0, 4), (3000, 3259), (5457, 8778)), 7, 256, 3321, 5194
    )
    # a last message inside the kept end needs no pin; a system prompt of 20 tokens is kept whole
    assert middle_cut(8778, 4096, 4, 20, (8700, 8703), 512) == MiddleCut(((0, 20), (5214, 8778)), 20, 0, 3564, 5194)
    # the reply's room is at most a quarter of n_ctx; a message's head at most an eighth of what is kept
    assert middle_cut(20_000, 8192, 4, 0, (0, 24), 100_000).spans == ((0, 24 + 256), (20_000 - 6144 + 280, 20_000))
    assert middle_cut(1280, 128, 4, 0, (0, 0), 24) == MiddleCut(((0, 13), (1189, 1280)), 4, 9, 91, 1176)
    # a system prompt longer than half of what is kept keeps its first half; n_keep leaving no room: no cut
    assert middle_cut(9000, 4096, 4, 3000, (0, 3030), 1024).spans[0] == (0, 1536)
    # a pinned head ending with the later turn's role header (ChatSession.system_prompt_tokens counts the first
    # turn's) is followed by the message's text, not by that header again; not where the head is cut short
    assert middle_cut(8778, 4096, 4, 27, (3000, 3003), 512, header_pinned=True) == MiddleCut(
        ((0, 27), (3003, 3259), (5477, 8778)), 27, 256, 3301, 5194
    )
    assert middle_cut(8778, 4096, 4, 27, (3000, 3003), 512).spans[1] == (3000, 3259)  # (two headers)
    assert middle_cut(9000, 4096, 4, 3000, (3400, 3403), 1024, header_pinned=True) == middle_cut(
        9000, 4096, 4, 3000, (3400, 3403), 1024
    )
    assert middle_cut(1280, 128, 120, 0, (0, 0), 24) is None
