"""bench/free_chat.py's account of what would reach issue 22's bars: the acceptance a head needs at measured pass
costs, and the training data its learning curve reaches that with (pure arithmetic, known values)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from free_chat import acceptance_needed, markdown, tokens_per_pass, training_tokens_for, what_reaches_the_bars  # noqa: E402


def test_tokens_per_pass_follows_the_geometric_series():
    assert tokens_per_pass(0.5, 1) == pytest.approx(1.5)
    assert tokens_per_pass(0.5, 2) == pytest.approx(1.75)
    assert tokens_per_pass(0.0, 3) == pytest.approx(1.0)


def test_acceptance_needed_solves_for_the_bar():
    free = {"target_2": 1.0, "head_1": 0.0}
    assert acceptance_needed(1.3, 1, free, 1.0) == pytest.approx(0.3)
    costly = {"target_2": 1.1, "head_1": 0.1}
    assert acceptance_needed(1.3, 1, costly, 1.0) == pytest.approx(1.3 * 1.2 - 1)
    assert acceptance_needed(1.3, 1, costly, 0.9) == pytest.approx(1.3 * 1.2 / 0.9 - 1)
    three = {"target_3": 1.2, "head_1": 0.1}
    a = acceptance_needed(1.5, 2, three, 1.0)
    assert 1 + a + a * a == pytest.approx(1.5 * 1.4)
    assert acceptance_needed(2.5, 1, costly, 1.0) is None  # two tokens per pass at best
    # the first head pass of a step follows the target's (its weights cold), the second follows the head's own
    split = {"target_3": 1.2, "head_1": 0.15, "head_next": 0.05}
    a = acceptance_needed(1.5, 2, split, 1.0)
    assert 1 + a + a * a == pytest.approx(1.5 * 1.4)


def test_training_tokens_extend_the_segment_between_the_last_two_runs_from_scratch():
    curve = [{"train_reply_tokens": 10, "greedy_accept_1": 0.1}, {"train_reply_tokens": 1000, "greedy_accept_1": 0.4},
             {"train_reply_tokens": 4000, "greedy_accept_1": 0.6}]  # +0.1 per doubling
    assert training_tokens_for(curve, "greedy_accept_1", 0.7) == pytest.approx(8000)
    assert training_tokens_for(curve, "greedy_accept_1", 0.6) == pytest.approx(4000)
    flat = curve[:2] + [{"train_reply_tokens": 4000, "greedy_accept_1": 0.4}]
    assert training_tokens_for(flat, "greedy_accept_1", 0.5) is None
    # a fine-tune is not a point of the data's curve: the segment runs between the last two runs from scratch
    tuned = curve + [{"train_reply_tokens": 5000, "greedy_accept_1": 0.65, "fine_tune": True}]
    assert training_tokens_for(tuned, "greedy_accept_1", 0.7) == pytest.approx(8000)


def test_the_account_maps_benchmark_acceptance_to_held_out_and_is_reported():
    table = {
        "greedy | autoregressive": {"tokens_per_s": 50.0, "speedup": 1.0, "acceptance": None, "tokens_per_pass": 1.0},
        "greedy | head K=1": {"tokens_per_s": 60.0, "speedup": 1.2, "acceptance": 0.5, "efficiency": 1.0, "tokens_per_pass": 1.5},
    }
    ratios = {"target_2": 1.1, "head_1": 0.1}
    curve = [{"train_reply_tokens": 1000, "greedy_accept_1": 0.4}, {"train_reply_tokens": 4000, "greedy_accept_1": 0.6}]
    rows = what_reaches_the_bars(table, ratios, curve, {"greedy_accept_1": 0.625, "sampled_accept_1": 0.5})
    assert [(r["mode"], r["bar"]) for r in rows] == [("head K=1", 1.3), ("head K=1", 1.5)]
    first = rows[0]
    assert first["needed"] == pytest.approx(0.56)
    assert first["held_out_needed"] == pytest.approx(0.56 / 0.8)  # the benchmark sees 0.8 of held-out acceptance
    assert first["training_tokens"] == pytest.approx(4000 * 2 ** ((0.7 - 0.6) / 0.1))
    assert rows[1]["needed"] == pytest.approx(0.8)  # 1.5 x 1.2 = 1.8 tokens per pass
    assert rows[1]["training_tokens"] is None  # held out 0.8 / 0.8: no head agrees always
    report = markdown({"machine": "m", "command": "c", "commit": "x", "finished": "f", "minutes": 1, "prompts": 1,
                       "reps": 1, "max_new_tokens": 8, "pass_costs": {"ms": {"target_1": 10.0, "target_1_plain": 9.0},
                                                                      "ratio": ratios},
                       "table": table, "bars": rows})
    assert "| greedy | head K=1 | 1.3x | 1.20x | 0.50 / 0.56 | 0.62 / 0.70 | 8,000 |" in report
    assert "| greedy | head K=1 | 1.5x | 1.20x | 0.50 / 0.80 | 0.62 / 1.00 | — |" in report


def test_each_prompts_speedup_is_its_median_over_repetitions_against_plain_decoding_of_the_same_prompt():
    """Auto's bar is per prompt (issue 34: none below 0.97x, median of 3), so the report carries the slowest."""
    from free_chat import Run, per_prompt_speedups

    def run(tokens_per_s: float, decode_tokens: int = 10) -> Run:
        return Run([0] * (decode_tokens + 1), decode_tokens, decode_tokens / tokens_per_s, 0, 0)

    runs = {}
    for rep, (plain, auto) in enumerate([((50, 50), (60, 45)), ((50, 50), (55, 49)), ((50, 40), (40, 60))]):
        runs[("greedy", "autoregressive", rep)] = [run(rate) for rate in plain]
        runs[("greedy", "auto", rep)] = [run(rate) for rate in auto]
    runs[("greedy", "autoregressive", 1)].append(run(50, decode_tokens=0))  # a one-token reply: no rate
    runs[("greedy", "auto", 1)].append(run(50, decode_tokens=0))
    for rep in (0, 2):
        runs[("greedy", "autoregressive", rep)].append(run(50, decode_tokens=0))
        runs[("greedy", "auto", rep)].append(run(50, decode_tokens=0))
    # prompt 0: 1.2, 1.1, 0.8 -> 1.1; prompt 1: 0.9, 0.98, 1.5 -> 0.98; prompt 2: never measured
    assert per_prompt_speedups(runs, "greedy", "auto", 3) == {
        "slowest_prompt": pytest.approx(0.98), "prompts_below": 0, "prompts_measured": 2, "per_prompt": [1.1, 0.98],
    }
    assert per_prompt_speedups(runs, "greedy", "auto", 1)["prompts_below"] == 1  # rep 0 alone: prompt 1 at 0.9


def test_the_predicted_speedup_charges_a_change_of_pass_width_where_a_reply_makes_one():
    """A pass after one of another width pays OpenVINO's re-derivation of shapes (bench/pass_shapes.py): a reply
    that alternates plain and verification passes pays it every step, one that keeps its width never."""
    from free_chat import Run, predicted_speedup

    ratios = {"target_1": 1.0, "target_2": 1.2, "head_1": 0.1, "switch": 0.25}
    steady = Run([0] * 7, 6, 1.0, 4, 2, steps=[(1, 2), (1, 1), (1, 2), (1, 1)])  # 6 tokens, four 2-token passes
    assert predicted_speedup([steady], ratios, head=True) == pytest.approx(6 / (0.25 + 4 * 1.3))  # only the first pass switches
    mixed = Run([0] * 7, 6, 1.0, 2, 2, steps=[(1, 2), (0, 1), (1, 2), (0, 1)])  # widths 2, 1, 2, 1
    assert predicted_speedup([mixed], ratios, head=True) == pytest.approx(6 / (2 * 1.3 + 2 * 1.0 + 4 * 0.25))
    plain = Run([0] * 4, 3, 1.0, 0, 0, steps=[(0, 1)] * 3)
    assert predicted_speedup([plain], ratios, head=False) == pytest.approx(1.0)


def test_the_table_counts_the_share_of_steps_that_drafted_nothing():
    """Auto's plain steps are what showed it stuck plain for whole replies on a VM whose speed drifted (its
    seconds-based cost of a wider pass measured while the VM was slow, its plain cost later while fast): the table
    carries their share of each mode's steps, pooled over prompts and repetitions."""
    from free_chat import Run, markdown, summarize

    plain = Run([0] * 5, 4, 1.0, 0, 0, steps=[(0, 1)] * 4)
    auto = Run([0] * 5, 4, 0.8, 2, 1, steps=[(1, 2), (0, 1), (1, 1)])  # 3 steps, one of them plain
    runs = {("greedy", "autoregressive", 0): [plain, plain], ("greedy", "auto", 0): [auto, plain]}
    table = summarize(runs, {}, ["autoregressive", "auto"], 1, ["greedy"])
    assert table["greedy | autoregressive"]["plain_steps"] == pytest.approx(1.0)
    assert table["greedy | auto"]["plain_steps"] == pytest.approx(5 / 7)  # 1 of auto's 3 steps, plain's 4 of 4
    report = markdown({"machine": "m", "command": "c", "commit": "x", "finished": "f", "minutes": 1, "prompts": 2,
                       "reps": 1, "max_new_tokens": 8, "pass_costs": {"ms": {"target_1": 10.0, "target_1_plain": 9.0},
                                                                      "ratio": {}}, "table": table})
    assert "| 71% |" in report
