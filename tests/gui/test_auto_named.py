"""What Auto drafted with is named where its numbers are: the live graph's summary and a comparison's footer and
export (newcomer trial: "Auto: 27.0 tokens/s, acceptance rate 61%" blended the draft head's and prompt lookup's
drafts, and "Speedup 1.16× over plain decoding" said nothing of them; only the Compare column's heading did)."""

from __future__ import annotations

from app.gui.reply_format import auto_drafters, compare_summary, export_footer_text
from inference.events import StepStats


def _step(i: int, drafter: str, drafted: int) -> StepStats:
    return StepStats(drafted=drafted, accepted=drafted // 2, emitted=drafted // 2 + 1, draft_ms=0.1, verify_ms=9.0,
                     step_ms=10.0, k=drafted, cache_len=40 + i, n_ctx=512, elapsed_s=0.1 * (i + 1), generated=i + 1,
                     drafter=drafter)  # fmt: skip


def test_auto_drafters_names_the_drafter_whose_drafts_gave_most_tokens():
    assert auto_drafters({"head": 32, "lookup": 2, "plain": 1}, {"head": 14, "lookup": 20}) == "mostly prompt lookup"
    # a later trial read "mostly draft head" for 4 head steps (4 accepted) beside 2 lookup steps (7 accepted)
    assert auto_drafters({"head": 4, "lookup": 2}, {"head": 4, "lookup": 7}) == "mostly prompt lookup"
    assert auto_drafters({"lookup": 9, "head": 3}) == "mostly prompt lookup"  # (no counts: the most steps)
    assert auto_drafters({"head": 5, "plain": 20}) == "draft head"  # one drafter: no "mostly"
    assert auto_drafters({"plain": 13}) == "plain"
    assert auto_drafters({}) == ""  # nothing known: nothing said


def test_the_live_summary_names_what_auto_drafted_with(make_window):
    graph = make_window(start=False).live_graph
    graph.show_conversation(7)
    graph.start_run("ar", conversation_id=7)
    graph.add_events([_step(i, "plain", 0) for i in range(6)])
    graph.finish_run()
    graph.start_run("auto", keep_previous=True, conversation_id=7)
    graph.add_events([_step(0, "plain", 0)])
    assert "■ Auto (plain): " in graph.summary_text()  # so far
    graph.add_events([_step(i, "head", 2) for i in range(1, 6)] + [_step(6, "lookup", 4)])
    summary = graph.summary_text()  # head: 5 accepted drafts of 10, lookup: 2 of 4
    assert "■ Plain decoding: " in summary and "■ Auto (mostly draft head): " in summary, summary
    graph.add_events([_step(i, "lookup", 8) for i in range(7, 9)])  # lookup: 2 + 8 accepted
    graph.finish_run()
    assert "■ Auto (mostly prompt lookup): " in graph.summary_text()


def test_a_comparison_s_footer_and_export_name_what_auto_drafted_with():
    spec = {"mode": "auto", "tokens_per_s": 27.0,
            "drafters": {"head": {"steps": 32, "drafted": 32, "accepted": 14, "k_max": 1},
                         "lookup": {"steps": 2, "drafted": 20, "accepted": 20, "k_max": 10},
                         "plain": {"steps": 1, "drafted": 0, "accepted": 0, "k_max": 0}}}  # fmt: skip
    compare = {"ar": {"mode": "ar", "tokens_per_s": 23.2}, "spec": spec, "speedup": 1.16, "identical": False,
               "sampled": True}
    assert compare_summary(compare) == (
        "Speedup 1.16× over plain decoding with Auto (mostly prompt lookup) · speed only: texts differ by design "
        "(sampling)"
    )  # (the head's 14 accepted drafts against lookup's 20)
    stats = {**spec, "compare": compare, "new_tokens": 35}
    assert "Auto decoding (mostly prompt lookup) 1.16 times as fast as plain decoding" in export_footer_text(stats)


def test_a_fixed_speculative_run_that_drafted_nothing_claims_no_speedup():
    """A later trial's prompt lookup Compare on a text with nothing to copy: "acceptance n/a" under the run, and
    "Speedup 1.11× over plain decoding" under both: two plain runs. It says so, as for Auto."""
    from app.gui.reply_format import footer_text, metrics_text

    lookup = {"mode": "spec", "drafter": "lookup", "k": 4, "tokens_per_s": 49.4, "drafted": 0, "accepted": 0,
              "acceptance_rate": None, "new_tokens": 18, "ttft_ms": 210.0}  # fmt: skip
    compare = {"ar": {"mode": "ar", "tokens_per_s": 44.5}, "spec": lookup, "speedup": 1.11, "identical": True}
    assert compare_summary(compare) == (
        "No speedup: prompt lookup drafted nothing, so both runs decoded plainly (the two plain runs' speeds 1.11:1: "
        "the machine's load, not the decoding) · speed and identity: texts identical"
    )
    # a trial's loaded machine: "2.00:1, timing noise" read as untrue; a ratio far from 1 says what made it too
    assert "(the two plain runs' speeds 2.00:1: the machine's load, not the decoding)" in compare_summary(
        {**compare, "speedup": 2.0}
    )
    assert "times as fast" not in export_footer_text({**lookup, "compare": compare})
    assert metrics_text(lookup) == "TTFT 210 ms · 49.4 tokens/s · nothing drafted · 18 tokens"
    drafted = {**compare, "spec": {**lookup, "drafted": 5, "accepted": 3, "acceptance_rate": 0.6}}
    assert compare_summary(drafted).startswith("Speedup 1.11× over plain decoding")
    assert "Speedup" in footer_text({**lookup, "compare": drafted})


def test_the_acceptance_of_several_drafters_says_it_is_of_all_drafts():
    """A later trial read "45% accepted" (the draft head's, in the Compare heading) and "acceptance 44%" (all of
    Auto's drafts, in the footer) as two figures of one thing."""
    from app.gui.reply_format import metrics_text

    head = {"steps": 31, "drafted": 40, "accepted": 18}
    drafters = {"head": head, "lookup": {"steps": 1, "drafted": 1, "accepted": 0},
                "plain": {"steps": 2, "drafted": 0, "accepted": 0}}  # fmt: skip
    both = {"mode": "auto", "acceptance_rate": 0.44, "drafters": drafters}
    assert metrics_text(both) == "all drafts: 44% accepted"
    head_only = {**both, "drafters": {"head": head}}
    assert metrics_text(head_only) == "drafts: 44% accepted"  # (one drafter: its share is that of all drafts)


def test_a_footer_says_each_acceptance_once_and_keeps_the_model_s_name_with_its_bits(qtbot):
    """A newcomer's footer read "40% accepted; plain 1 step) · … acceptance 40%" (one figure twice); after Continue,
    "last part: … 32% accepted; … 50% accepted … acceptance 34% overall" (overall: the reply, or the part?); and a
    wrapped footer read "SmolLM2-135M-Instruct" then "4-bit" on the next line with no "·"."""
    from app.gui.reply_format import footer_text
    from app.gui.widgets.elided_label import PartsLabel

    head = {"steps": 33, "drafted": 40, "accepted": 16, "k_max": 2}
    plain = {"steps": 1, "drafted": 0, "accepted": 0, "k_max": 0}
    one = {"mode": "auto", "ttft_ms": 42.0, "tokens_per_s": 63.1, "acceptance_rate": 0.4, "new_tokens": 32,
           "drafters": {"head": head, "plain": plain}}  # fmt: skip
    assert footer_text(one) == (
        "Auto (draft head 33 steps at K up to 2; plain 1 step) · TTFT 42 ms · 63.1 tokens/s · drafts: 40% accepted · 32 tokens"
    )
    assert "Auto decoding (draft head 33 steps at K up to 2; plain 1 step) · 40% of drafted tokens accepted" in (
        export_footer_text(one)
    )
    lookup = {"steps": 4, "drafted": 8, "accepted": 4, "k_max": 4}
    several = {**one, "acceptance_rate": 0.34, "drafters": {"head": {**head, "accepted": 13}, "lookup": lookup, "plain": plain}}
    assert footer_text(several) == (
        "Auto (draft head 33 steps at K up to 2, 32% accepted; prompt lookup 4 steps at K up to 4, 50% accepted; "
        "plain 1 step) · TTFT 42 ms · 63.1 tokens/s · all drafts: 34% accepted · 32 tokens"
    )
    assert "34% of all drafted tokens accepted" in export_footer_text(several)
    continued = {**several, "continued": 1, "new_tokens": 1024, "earlier_tokens": 992}
    footer = footer_text(continued, "complete", last=False)
    assert footer.startswith("Continued once: 1,024 tokens in all · last part: Auto (draft head 33 steps")
    assert footer.endswith(" · all drafts of this part: 34% accepted · 32 tokens") and "overall" not in footer
    label = PartsLabel()
    qtbot.addWidget(label)
    named = {"mode": "ar", "ttft_ms": 40.0, "tokens_per_s": 60.0, "new_tokens": 8,
             "target_label": "SmolLM2-135M-Instruct · 4-bit"}  # fmt: skip
    text = footer_text(named)
    assert text.replace("\u00a0", " ") == "Plain decoding · TTFT 40 ms · 60.0 tokens/s · 8 tokens · SmolLM2-135M-Instruct · 4-bit"
    # wide enough for all but " · 4-bit": the model's name goes to the next line with its bits
    label.resize(label.fontMetrics().horizontalAdvance(text.replace("\u00a0", " ").removesuffix(" · 4-bit")) + 4, 20)
    label.setText(text)
    lines = label.lines()
    assert len(lines) == 2 and lines[1].replace("\u00a0", " ") == "SmolLM2-135M-Instruct · 4-bit", lines


def test_a_drafter_with_no_accepted_draft_is_not_what_auto_used(make_window):
    """A newcomer's graph said "Auto (prompt lookup): 50.6 tokens/s, acceptance rate 0%" for a reply whose footer
    said "plain 65 steps; prompt lookup 1 step at K up to 4, 0% accepted": a drafter that gained nothing is not
    what Auto used, in the live summary, the footer's comparison, its export and the Compare heading alike."""
    from app.gui.reply_format import _auto_drafters_of, compare_headline, mode_text, no_drafts

    assert auto_drafters({"plain": 65, "lookup": 1}, {"plain": 0, "lookup": 0}) == "plain"
    # of two drafters, the one with no accepted draft does not make the other "mostly" used
    assert auto_drafters({"head": 30, "lookup": 1, "plain": 5}, {"head": 12, "lookup": 0}) == "draft head"
    spec = {"mode": "auto", "tokens_per_s": 50.6, "acceptance_rate": 0.0, "new_tokens": 66,
            "drafters": {"plain": {"steps": 65, "drafted": 0, "accepted": 0, "k_max": 0},
                         "lookup": {"steps": 1, "drafted": 4, "accepted": 0, "k_max": 4}}}  # fmt: skip
    assert _auto_drafters_of(spec) == "plain"
    assert mode_text(spec).startswith("Auto (plain 65 steps; prompt lookup 1 step at K up to 4")  # the footer keeps it
    compare = {"ar": {"mode": "ar", "tokens_per_s": 49.0}, "spec": spec, "speedup": 1.03, "identical": True}
    assert no_drafts(compare) == "No speedup: Auto decoded plainly, drafts would not pay at these settings"
    assert compare_headline(compare) == "No speedup: Auto decoded plainly"
    assert "No speedup: Auto decoded plainly" in export_footer_text({**spec, "compare": compare})
    graph = make_window(start=False).live_graph
    graph.show_conversation(3)
    graph.start_run("auto", conversation_id=3)
    graph.add_events([_step(i, "plain", 0) for i in range(5)])
    graph.add_events([StepStats(drafted=4, accepted=0, emitted=1, draft_ms=0.1, verify_ms=9.0, step_ms=10.0, k=4,
                                cache_len=50, n_ctx=512, elapsed_s=0.7, generated=7, drafter="lookup")])  # fmt: skip
    graph.finish_run()
    summary = graph.summary_text()
    assert "■ Auto (plain): " in summary and "drafts: 0% accepted" in summary, summary
