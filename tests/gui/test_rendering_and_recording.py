"""Markdown rendering (code blocks, nothing loaded, draft highlighting) and the streaming reply recorder."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QTextFormat

from app.gui.history_db import HistoryDB
from app.gui.reply_format import footer_text
from app.gui.reply_recorder import ReplyRecorder
from app.gui.widgets.markdown_view import CODE_BACKGROUND, MarkdownView, draft_ranges
from inference.events import ContextRolled, Finished, GenerationStats, StepStats, TextDelta


@pytest.fixture
def view(qtbot):
    from app.gui.application import create_application

    create_application()
    view = MarkdownView()
    view.resize(500, 50)
    qtbot.addWidget(view)
    view.show()
    return view


def test_code_blocks_render_monospace_on_a_background(view):
    view.set_markdown("Intro with `inline`:\n\n```python\ndef f(x):\n    return x\n```\n\nAfter.")
    document = view.document()
    blocks = []
    block = document.begin()
    while block.isValid():
        blocks.append(block)
        block = block.next()
    code = [b for b in blocks if b.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)]
    assert [b.text() for b in code] == ["def f(x):", "    return x"]
    assert all(b.blockFormat().background().color() == CODE_BACKGROUND for b in code)
    assert document.toPlainText().startswith("Intro with inline:")
    assert view.height() >= document.size().height()  # the view grows to show everything


def test_nothing_named_by_model_output_is_loaded(view, tmp_path):
    image = tmp_path / "secret.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    view.set_markdown(f"![a]({image.as_uri()}) ![b](http://example.invalid/track.png) <img src='x.png'> <b>raw</b>")
    view.grab()  # layout and paint ask for the images
    assert any("secret.png" in url for url in view.blocked_resources)
    assert any("example.invalid" in url for url in view.blocked_resources)
    assert view.loadResource(2, __import__("PySide6.QtCore", fromlist=["QUrl"]).QUrl(image.as_uri())) is None
    assert "<b>raw</b>" in view.document().toPlainText()  # raw HTML is shown as text, not interpreted
    assert "<img src='x.png'>" in view.document().toPlainText()


def test_draft_ranges_follow_words_through_markdown():
    raw = "The **quick brown** fox\n\n- jumps over\n- the lazy dog"
    spans = [[4, 19], [27, 37]]  # "**quick brown**", "jumps over"
    rendered = "The quick brown fox\njumps over\nthe lazy dog"
    ranges = draft_ranges(raw, spans, rendered)
    assert [rendered[a:b] for a, b in ranges] == ["quick brown", "jumps over"]
    assert draft_ranges(raw, [], rendered) == []


def test_highlighting_colours_accepted_draft_tokens(view):
    text = "Paris is the capital of France."
    view.set_markdown(text, [[9, 23]], highlight=True)  # "the capital of"
    assert " ".join(view.highlighted_text()).split() == ["the", "capital", "of"]
    view.set_markdown(text, [[9, 22]], highlight=True)  # a word only partly drafted is not coloured
    assert " ".join(view.highlighted_text()).split() == ["the", "capital"]
    view.set_highlight(False)
    assert view.highlighted_text() == []


def _stats(mode, text, ids, tps, drafted=0, accepted=0):
    return GenerationStats(mode=mode, drafter="lookup" if mode == "spec" else None, new_tokens=len(ids), ttft_ms=12.0,
                           decode_tokens_per_s=tps, drafted=drafted, accepted=accepted, stop_reason="eos", text=text,
                           token_ids=ids)  # fmt: skip


def _step(generated, elapsed, drafted=0, accepted=0, cache_len=40):
    return StepStats(drafted=drafted, accepted=accepted, emitted=accepted + 1, draft_ms=0.1, verify_ms=9.0, step_ms=10.0,
                     k=4, cache_len=cache_len, n_ctx=64, elapsed_s=elapsed, generated=generated)  # fmt: skip


def test_recorder_saves_at_least_every_half_second(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    message = db.message(db.add_message(c, "assistant", "", state="streaming"))
    now = [100.0]
    recorder = ReplyRecorder(db, message, clock=lambda: now[0])
    recorder.add([TextDelta("Hel", 1, False)])
    assert db.message(message.id).content == ""  # 0 s since start: not yet
    now[0] += 0.49
    recorder.add([TextDelta("lo", 2, True)])
    assert db.message(message.id).content == ""
    now[0] += 0.02
    recorder.add([TextDelta(" world", 3, True), _step(3, 0.5, 2, 2)])
    saved = db.message(message.id)
    assert (saved.content, saved.state, saved.draft_spans) == ("Hello world", "streaming", [[3, 11]])
    recorder.add([ContextRolled(discarded_tokens=30, n_keep=4, cache_len=34), Finished(_stats("spec", "Hello world", [1, 2, 3], 50.0, 2, 2))])
    final = recorder.finish("complete")
    assert final.stats["acceptance_rate"] == 1.0 and final.stats["tokens_per_s"] == 50.0
    stored = db.message(message.id)
    assert stored.state == "complete" and stored.stats["mode"] == "spec" and "live" not in stored.stats
    assert footer_text(stored.stats, stored.state).startswith("Speculative (prompt lookup) · TTFT 12 ms · 50.0 tokens/s · acceptance 100%")
    db.close()


def test_recorder_compare_measures_speedup_and_identity(tmp_path):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    message = db.message(db.add_message(c, "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message, compare=True, extra={"seed": 5})
    recorder.begin_phase("ar")
    recorder.add([TextDelta("Same", 1, False), TextDelta(" text", 2, False), Finished(_stats("ar", "Same text", [1, 2], 40.0))])
    assert recorder.compare_data["ar"]["text"] == "Same text" and recorder.text == ""
    recorder.begin_phase("spec", drafter="lookup", k=4)
    recorder.add([TextDelta("Same", 1, False), TextDelta(" text", 2, True), Finished(_stats("spec", "Same text", [1, 2], 60.0, 1, 1))])
    final = recorder.finish("complete")
    compare = final.stats["compare"]
    assert compare["speedup"] == 1.5 and compare["identical"] is True
    assert compare["ar"]["seed"] == compare["spec"]["seed"] == 5 and compare["spec"]["k"] == 4
    assert final.content == "Same text" and final.draft_spans == [[4, 9]]
    assert footer_text(final.stats, "complete").startswith("Speedup 1.50×")
    db.close()


@pytest.mark.parametrize(
    "difference,sampled,expected",
    [
        (None, True, "texts differ by design (sampling)"),
        ({"token": 57, "top2_gap": 0.02, "noise_bound": 0.12, "near_tie": True}, False,
         "texts differ from token 57: a near-tie (top-2 logit gap 0.020 ≤ noise 0.120)"),
        ({"token": 3, "top2_gap": 2.5, "noise_bound": 0.0004, "near_tie": False}, False,
         "texts differ from token 3: NOT a near-tie (gap 2.500 > noise 0.000), a bug: please report it"),
        ({"token": "x"}, False, "texts differ"),  # a hand-edited history: shown, never a crash
    ],
)
def test_a_compare_whose_texts_differ_says_why(tmp_path, difference, sampled, expected):
    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    message = db.message(db.add_message(c, "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message, compare=True)
    recorder.begin_phase("ar")
    recorder.add([TextDelta("A", 1, False), Finished(_stats("ar", "A", [1], 40.0))])
    recorder.begin_phase("spec", drafter="lookup", k=4)
    recorder.add([TextDelta("B", 2, False), Finished(_stats("spec", "B", [2], 60.0))])
    assert recorder.compare_data["identical"] is False and (recorder.ar_token_ids, recorder.spec_token_ids) == ([1], [2])
    recorder.set_difference(difference, sampled=sampled)
    final = recorder.finish("complete")
    assert db.message(message.id).stats["compare"]["first_difference"] == difference
    assert expected in footer_text(final.stats, "complete")
    db.close()
