"""The prefill says how far it has read a long prompt (``PromptProgress``), pass by pass, and Stop between passes
ends it with the passes read so far said."""

import threading
from pathlib import Path

from helpers import chat_ids, settings

from inference.engine import Engine
from inference.events import Finished, PromptOverflow, PromptProgress, TextDelta
from inference.prefill import prefill_pass_size

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
