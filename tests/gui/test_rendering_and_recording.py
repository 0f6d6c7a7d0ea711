"""Markdown rendering (code blocks, nothing loaded, draft highlighting) and the streaming reply recorder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QColor

from app.gui import theme
from app.gui.history_db import HistoryDB
from app.gui.reply_format import footer_text
from app.gui.reply_recorder import ReplyRecorder
from app.gui.widgets.markdown_view import MarkdownView, draft_ranges, segments
from inference.events import ContextRolled, Finished, GenerationStats, StepStats, TextDelta

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def view(qtbot):
    from app.gui.application import create_application

    create_application()
    view = MarkdownView()
    view.resize(500, 50)
    qtbot.addWidget(view)
    view.show()
    return view


def test_code_blocks_are_highlighted_copyable_and_scroll_sideways(view, qtbot):
    from PySide6.QtGui import QGuiApplication

    long_line = "    return " + " + ".join(f"value_{i}" for i in range(40))
    view.set_markdown(f"Intro with `inline`:\n\n```python\ndef f(x):\n{long_line}\n```\n\nAfter.")
    [block] = view.code_blocks()
    assert block.code == f"def f(x):\n{long_line}" and block.lexer_name == "Python" and block.language == "python"
    document = block.text.document()
    assert document.toPlainText() == block.code
    keyword = document.begin().begin().fragment()  # "def"
    assert keyword.text() == "def" and keyword.charFormat().foreground().color().name() != theme.current().text
    assert block.text.horizontalScrollBar().maximum() > 0  # the long line scrolls, it is not cut
    assert block.text.height() >= document.size().height()  # every line shows
    block.copy_button.click()
    assert QGuiApplication.clipboard().text() == block.code  # the code alone, without its fences
    assert [v.toPlainText() for v in view.text_views()] == ["Intro with inline:", "After."]
    inline = view.text_views()[0].document().begin()
    assert any(
        it.fragment().charFormat().background().color().name() == theme.current().code
        for it in _fragments(inline)
    )  # inline code on the code background


def _fragments(block):
    iterator = block.begin()
    while not iterator.atEnd():
        yield iterator
        iterator += 1


def test_a_fence_without_a_language_is_guessed_once_complete_and_streams_unclosed(view):
    from app.gui.widgets.code_block import WARM, warm_up

    warm_up()  # (the window does it in the background when it starts)
    assert WARM.is_set()
    view.set_markdown("```\n#include <stdio.h>\nint main(void) {\n    printf(\"hi\\n\");\n")
    [block] = view.code_blocks()
    assert block.lexer_name == "" and block.code.startswith("#include")  # streaming: no guess yet, shown as it is
    view.set_markdown("```\n#include <stdio.h>\nint main(void) {\n    printf(\"hi\\n\");\n    return 0;\n}\n```")
    assert view.code_blocks()[0].lexer_name in ("C", "C++")  # guessed once complete


def test_warm_up_prepares_the_common_languages_lexers_so_a_chat_with_code_opens_without_compiling_them():
    """A lexer's first use compiles its regular expressions (python: 30-60 ms on the GUI thread, the stall
    test_responsiveness caught on a conversation switch); after the warm-up, each common fence language is a cache
    hit of lexer_for, and its token definitions are compiled."""
    from pygments.lexer import RegexLexer

    from app.gui.widgets.code_block import COMMON_LANGUAGES, lexer_for, warm_up

    warm_up()
    hits = lexer_for.cache_info().hits
    for language in COMMON_LANGUAGES:
        lexer = lexer_for(language)
        assert lexer is not None, language
        assert not isinstance(lexer, RegexLexer) or "_tokens" in type(lexer).__dict__, language
    assert lexer_for.cache_info().hits == hits + len(COMMON_LANGUAGES)


GUESS_SAMPLES = {
    "C": '#include <stdio.h>\nint main(void) {\n    printf("hi\\n");\n    return 0;\n}\n',
    "Python": "import os\n\nprint(os.getcwd())\n",
    "Bash": "#!/bin/bash\nfor f in *.txt; do echo \"$f\"; done\n",
    "HTML": "<!DOCTYPE html>\n<html><body><p>Hi</p></body></html>\n",
    None: "Just a few plain words, nothing more.\n",
}


def test_warm_up_and_guessing_import_only_the_common_languages_lexers():
    """The warm-up runs on the inference thread as the first reply starts, taking the GIL in turns with the window: it
    must not import pygments' ~250 lexer modules (a pygments guess did: 248 modules, twice the warm-up's time, module
    loads holding the GIL 13-16 ms at a time on a 2-core Xeon), and guessing a fence's language must not either. A fresh
    process, so that no other test's imports count."""
    script = (
        "import json, sys\n"
        "from app.gui.widgets.code_block import guess_lexer, warm_up\n"
        "warm_up()\n"
        f"samples = {GUESS_SAMPLES!r}\n"
        "guesses = [[name, getattr(guess_lexer(code), 'name', None)] for name, code in samples.items()]\n"
        "modules = [m for m in sys.modules if m.startswith('pygments.lexers.')]\n"
        "print(json.dumps({'guesses': guesses, 'modules': modules}))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert [guessed for _, guessed in report["guesses"]] == [name for name, _ in report["guesses"]]
    assert len(report["modules"]) <= 25, report["modules"]  # 19 measured: the common languages' modules and tables


def test_segments_split_at_fences_and_keep_offsets():
    text = "a\n```js\nlet x = 1;\n```\nb\n~~~~\n```\n~~~~\n"
    parts = segments(text)
    assert [(p.kind, p.content, p.language, p.complete) for p in parts] == [
        ("text", "a\n", "", True), ("code", "let x = 1;", "js", True), ("text", "b\n", "", True),
        ("code", "```", "", True),
    ]
    for part in parts:
        assert text[part.content_start : part.content_start + len(part.content)] == part.content
    assert segments("Here:\n| a | b |\n|---|---|\n| 1 | 2 |")[1].content.startswith("| a |")  # a table after text


def test_tables_are_ruled_and_quotes_marked(view, qtbot):
    from PySide6.QtGui import QTextTable

    view.set_markdown("Here it is:\n| City | Country |\n| --- | --- |\n| Paris | France |\n\n> Wise words.")
    tables = [f for v in view.text_views() for f in v.document().rootFrame().childFrames() if isinstance(f, QTextTable)]
    assert len(tables) == 1 and tables[0].rows() == 2 and tables[0].columns() == 2  # a table, not a paragraph
    table_format = tables[0].format()
    assert table_format.border() == 1 and table_format.cellPadding() == 4
    header = [tables[0].cellAt(0, c).firstCursorPosition().block() for c in range(2)]
    layout = view.text_views()[1].document().documentLayout()
    assert len({round(layout.blockBoundingRect(b).top()) for b in header}) == 1  # the header cells share a line
    quote_view = view.text_views()[-1]
    image = quote_view.grab().toImage()
    bar = QColor(theme.current().quote)
    assert any(image.pixelColor(x, image.height() // 2) == bar for x in range(0, 8))  # the quote's bar


def test_nothing_named_by_model_output_is_loaded(view, tmp_path):
    image = tmp_path / "secret.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")
    view.set_markdown(f"![a]({image.as_uri()}) ![b](http://example.invalid/track.png) <img src='x.png'> <b>raw</b>")
    view.grab()  # layout and paint ask for the images
    assert any("secret.png" in url for url in view.blocked_resources)
    assert any("example.invalid" in url for url in view.blocked_resources)
    assert view.text_views()[0].loadResource(2, __import__("PySide6.QtCore", fromlist=["QUrl"]).QUrl(image.as_uri())) is None
    assert "<b>raw</b>" in view.toPlainText()  # raw HTML is shown as text, not interpreted
    assert "<img src='x.png'>" in view.toPlainText()


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
    assert footer_text(stored.stats, stored.state).startswith("Speculative (prompt lookup) · TTFT 12 ms · 50.0 tokens/s · drafts: 100% accepted")
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


def test_a_stopped_compare_claims_no_speedup_nor_identity_and_says_what_each_run_produced(tmp_path):
    """Stop during the speculative run of a sampled Compare: both runs were cut off (the second one), so no speedup
    and no identity verdict; the footer says it was stopped and how many tokens each run wrote."""
    from dataclasses import replace

    from app.gui.reply_format import export_footer_text

    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    message = db.message(db.add_message(c, "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message, compare=True, extra={"seed": 5})
    recorder.begin_phase("ar")
    recorder.add([TextDelta("One two", 1, False), Finished(_stats("ar", "One two", [1, 2, 3, 4], 40.0))])
    recorder.begin_phase("spec", drafter="lookup", k=4)
    cut = replace(_stats("spec", "One", [1], 28.0), stop_reason="cancelled")
    recorder.add([TextDelta("One", 1, False), Finished(cut)])
    final = recorder.finish("stopped")
    compare = final.stats["compare"]
    assert compare["speedup"] is None and compare["identical"] is None and compare["stopped"] is True
    footer = footer_text(final.stats, "stopped")
    assert footer == ("Stopped · Comparison stopped, so no speedup: plain decoding wrote 4 tokens, speculative "
                      "decoding (prompt lookup) 1 token before the stop"), footer
    assert "Speedup" not in footer and "differ" not in footer and "identical" not in footer
    # a comparison stopped by an older version, stored with a speedup from its cut-off runs: none shown either
    old = {**final.stats, "compare": {**compare, "speedup": 0.71, "identical": False, "stopped": None}}
    assert "Speedup" not in footer_text(old, "stopped") and "differ" not in footer_text(old, "stopped")
    assert "times as fast" not in export_footer_text(old, "stopped")
    db.close()


def test_a_compare_against_auto_is_called_auto_from_its_start_to_its_export(tmp_path):
    """A newcomer's Compare showed "Speculative" over its second column while it ran and "Auto (…)" once it ended,
    and its Markdown export said "Speculative decoding 0.85 times as fast": one run, two names."""
    from dataclasses import replace

    from app.gui.reply_format import export_footer_text, second_run_name

    db = HistoryDB(tmp_path / "h.sqlite3")
    c = db.create_conversation("t")
    message = db.message(db.add_message(c, "assistant", "", state="streaming"))
    recorder = ReplyRecorder(db, message, compare=True, extra={"seed": 5}, compare_mode="auto")
    recorder.begin_phase("ar")
    assert second_run_name(recorder.snapshot().stats["compare"]) == "Auto"  # named before it starts
    recorder.add([TextDelta("One two", 1, False), Finished(_stats("ar", "One two", [1, 2, 3, 4], 40.0))])
    stopped = recorder.snapshot().stats
    assert footer_text(stopped, "stopped").endswith("plain decoding wrote 4 tokens; Auto decoding did not run")
    recorder.begin_phase("spec", "auto")
    auto = replace(_stats("spec", "One two", [1, 2, 3, 4], 42.0), mode="auto", drafter=None)
    recorder.add([TextDelta("One two", 1, False), Finished(auto)])
    final = recorder.finish("complete")
    assert second_run_name(final.stats["compare"]).startswith("Auto")
    assert "Auto decoding 1.05 times as fast as plain decoding" in export_footer_text(final.stats, "complete")
    db.close()


def test_a_compare_whose_auto_run_stayed_plain_claims_no_speedup(tmp_path):
    """A newcomer's first Compare (sampled at the chat defaults, where the head's drafts do not pay) ran Auto without
    a single draft and read "Speedup 0.91×": two plain runs, whose ratio is timing noise, shown as Auto being
    slower. Such a comparison says that Auto decoded plainly and claims no speedup, in the window and in the
    export; one whose Auto run drafted at a single step, one of its drafts accepted, still reports its speed."""
    from dataclasses import replace

    from app.gui.reply_format import compare_summary, export_footer_text

    def compare(drafted_steps: int) -> dict:
        db = HistoryDB(tmp_path / f"h{drafted_steps}.sqlite3")
        c = db.create_conversation("t")
        message = db.message(db.add_message(c, "assistant", "", state="streaming"))
        recorder = ReplyRecorder(db, message, compare=True, extra={"seed": 5}, compare_mode="auto")
        recorder.begin_phase("ar")
        recorder.add([TextDelta("One two", 1, False), Finished(_stats("ar", "One two", [1, 2, 3, 4], 40.0))])
        recorder.begin_phase("spec", "auto")
        auto = replace(_stats("spec", "One two", [1, 2, 3, 4], 36.4), mode="auto", drafter=None)
        for step in range(4):
            drafted = 2 if step < drafted_steps else 0
            auto.count_step("head", 2, drafted, drafted // 2, 1 + drafted // 2, speculative=True)  # (one accepted)
        recorder.add([TextDelta("One two", 1, False), Finished(auto)])
        stats = recorder.finish("complete").stats
        db.close()
        return stats

    plain = compare(drafted_steps=0)
    assert compare_summary(plain["compare"]).startswith(
        "No speedup: Auto decoded plainly, drafts would not pay at these settings (the two plain runs' speeds "
        "0.91:1: the machine's load, not the decoding) · speed and identity: texts identical"
    )
    assert "Speedup" not in footer_text(plain, "complete")
    assert "times as fast" not in export_footer_text(plain, "complete")
    assert "No speedup: Auto decoded plainly" in export_footer_text(plain, "complete")
    drafted = compare(drafted_steps=1)
    assert compare_summary(drafted["compare"]).startswith("Slower than plain decoding (0.91×) with Auto (draft head)")
    assert "Auto decoding (draft head) slower than plain decoding (0.91 times as fast)" in export_footer_text(drafted, "complete")


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


def _drafted(text: str, *words: str) -> list[list[int]]:
    """Spans (code-point offsets, as the recorder stores them) covering each of ``words`` in ``text``."""
    return [[text.index(word), text.index(word) + len(word)] for word in words]


def test_highlighting_hits_the_drafted_letters_after_characters_outside_the_bmp(view):
    """Emoji and CJK extension B take two UTF-16 units in Qt and one code point in Python: a highlight after "🐱🎉"
    was shifted two letters ("loyalt[y i]s")."""
    text = "🐱🎉 loyalty is 𠀀 like having 🐱 a friend𠀁 always"
    view.set_markdown(text, _drafted(text, "loyalty", "like having 🐱 a", "friend𠀁", "always"), highlight=True)
    assert view.highlighted_text() == ["loyalty", "like having 🐱 a", "friend𠀁", "always"]
    cjk = "𠀀𠀁𠀂 and 𠀃 then drafted words"
    view.set_markdown(cjk, _drafted(cjk, "then drafted"), highlight=True)
    assert view.highlighted_text() == ["then drafted"]


def test_highlighting_in_code_hits_the_drafted_letters_after_characters_outside_the_bmp(view):
    code = 'print("🐱🎉")\nx = "𠀀" + name\n'
    text = f"Code:\n\n```python\n{code}```\n"
    start = text.index("```python\n") + len("```python\n")
    spans = [[start + code.index("name"), start + code.index("name") + 4], [start + code.index("𠀀"), start + code.index("𠀀") + 1]]
    view.set_markdown(text, spans, highlight=True)
    [block] = view.code_blocks()
    marked = []
    document_block = block.text.document().begin()
    while document_block.isValid():
        iterator = document_block.begin()
        while not iterator.atEnd():
            fragment = iterator.fragment()
            if fragment.charFormat().background().color() == QColor(theme.current().draft):
                marked.append(fragment.text())
            iterator += 1
        document_block = document_block.next()
    assert marked == ["𠀀", "name"]


def test_switching_the_theme_keeps_a_code_blocks_sideways_scroll(view, qtbot):
    """A code block scrolled sideways went back to its first column when the theme changed (issue 35 item 6)."""
    from PySide6.QtWidgets import QApplication

    long_line = "x = [" + ", ".join(f"item_{i}" for i in range(60)) + "]"
    view.set_markdown(f"Look:\n\n```python\n{long_line}\n```")
    [block] = view.code_blocks()
    bar = block.text.horizontalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 200, timeout=3000)
    bar.setValue(200)
    before = theme.current()
    try:
        theme.apply(QApplication.instance(), theme.DARK if before is theme.LIGHT else theme.LIGHT)
        view.restyle()
        assert block.text.document().toPlainText() == long_line  # (rendered again, in the other theme's colours)
        assert bar.value() == 200
    finally:
        theme.apply(QApplication.instance(), before)
        view.restyle()
