"""The rolling context keeps the system prompt by default (``n_keep="auto"``): the template's own default system
message counted, a system prompt over half of n_ctx kept up to that half (its start) and the rest rolled out with the
chat and said so, never an error.

Until 2026-12-07 the default was 4 tokens: the first roll of every chat dropped the rest of the system prompt (and cut
through SmolLM2's default one, leaving a half template), without a word.
"""

import re

import pytest
from helpers import settings

from app.cli.statistics import describe
from app.gui.message_fields import stats_problem
from app.gui.reply_format import metrics_text, stats_dict, system_prompt_dropped_text
from app.server.replies import stats_object
from inference.chat import ChatSession
from inference.engine import Engine
from inference.events import ContextRolled, Finished
from inference.settings import AUTO_N_KEEP_MIN, ContextSettings, GenerationSettings

LONG_SYSTEM = "You are a pirate. Answer every question as a pirate would, with pirate words. " * 3


@pytest.fixture(scope="module")
def engine(target):
    return Engine(target)


def test_auto_is_the_default_and_pins_a_system_prompt_of_up_to_half_n_ctx():
    assert ContextSettings().n_keep == "auto" and GenerationSettings().context.n_keep == "auto"
    context = ContextSettings(n_ctx=64)
    assert context.resolve(0) == (AUTO_N_KEEP_MIN, 30)  # no system prompt: the attention sinks
    assert context.resolve(32) == (32, 16)  # half of n_ctx: pinned
    assert context.resolve(33) == (32, 16)  # more than half: its first half of n_ctx, never an error
    assert context.resolve(500) == (32, 16)
    assert ContextSettings(n_ctx=64, n_keep=10).resolve(33) == (10, 27)  # a number is kept as given


def test_system_prompt_tokens_count_the_templates_default_system_message(engine):
    target = engine.target
    plain = ChatSession(engine)
    pinned = plain.system_prompt_tokens()
    plain.messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = plain.prompt_ids()
    head = target.tokenizer.decode(ids[:pinned], skip_special_tokens=False)
    # SmolLM2's template writes its own system message where the chat has none: all of it is pinned, and nothing of
    # the user's text
    assert "named SmolLM, trained by Hugging Face<|im_end|>" in head and "France" not in head
    other = ChatSession(engine, messages=[{"role": "user", "content": "Hi"}])
    assert other.prompt_ids()[:pinned] == ids[:pinned]  # the same start whatever the first message
    assert other.prompt_ids()[pinned] != ids[pinned]  # and no further: the first message's own token follows

    given = ChatSession(engine, system_prompt="Be brief.", messages=plain.messages)
    head = target.tokenizer.decode(given.prompt_ids()[: given.system_prompt_tokens()], skip_special_tokens=False)
    assert "Be brief.<|im_end|>" in head and "SmolLM" not in head and "France" not in head


def _long_chat(engine, system_prompt: str, n_keep) -> tuple[ChatSession, Finished, list[int]]:
    """One reply of 80 tokens at n_ctx 64 (it rolls), greedy; returns the session, its Finished and the prompt."""
    session = ChatSession(engine, system_prompt=system_prompt)
    session.messages = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
    prompt = session.prompt_ids()
    session.messages = []
    events = list(session.send("Tell me a long story about a lighthouse keeper.",
                               settings("ar", max_new_tokens=80, n_ctx=64, n_keep=n_keep, ignore_eos=True)))
    assert any(isinstance(event, ContextRolled) for event in events)
    return session, events[-1], prompt


def test_a_long_chat_keeps_the_default_system_message_through_its_rolls(engine):
    session, finished, prompt = _long_chat(engine, "", "auto")
    pinned = session.system_prompt_tokens()
    assert pinned > AUTO_N_KEEP_MIN and finished.stats.rolls >= 2
    assert list(engine._cache.tokens)[:pinned] == prompt[:pinned]  # still read after every roll
    assert not finished.stats.system_prompt_dropped
    # the negative control: the old default, 4 tokens, dropped the rest at the first roll, and now says so
    engine.reset()
    session, finished, prompt = _long_chat(engine, "", 4)
    assert list(engine._cache.tokens)[:pinned] != prompt[:pinned]
    assert finished.stats.system_prompt_dropped


def test_a_system_prompt_over_half_n_ctx_keeps_its_start_and_the_reply_says_the_rest_rolled_out(engine):
    engine.reset()
    session, finished, prompt = _long_chat(engine, LONG_SYSTEM, "auto")  # (it raised SettingError before)
    tokens = session.system_prompt_tokens()
    assert 32 < tokens < 64 and finished.stats.system_prompt_tokens == tokens
    assert finished.stats.new_tokens == 80 and finished.stats.system_prompt_dropped
    cached = list(engine._cache.tokens)
    assert cached[:32] == prompt[:32] and cached[32:tokens] != prompt[32:tokens]  # its first half of n_ctx stays
    # said in every front end: the window's footer, the command line's statistics, the server's specchat object
    stored = stats_dict(finished.stats)
    assert stored["system_prompt_dropped"] is True and stored["system_prompt_tokens"] == tokens
    assert stats_problem(stored) is None
    words = f"part of the system prompt ({tokens} tokens) dropped: a context length of {2 * tokens} or more keeps it whole"
    assert system_prompt_dropped_text(tokens) == words and words in metrics_text(stored)
    assert "part of the system prompt among them)" in describe(finished.stats)
    assert stats_object(finished.stats)["system_prompt_dropped"] is True
    assert stats_object(finished.stats)["system_prompt_tokens"] == tokens
    engine.reset()
    _, kept, _ = _long_chat(engine, "Be brief.", "auto")
    assert "system_prompt_dropped" not in stats_dict(kept.stats) and "system prompt" not in metrics_text(stats_dict(kept.stats))
    assert "system prompt" not in describe(kept.stats) and stats_object(kept.stats)["system_prompt_dropped"] is False


def test_the_chats_note_on_a_dropped_system_prompt_gives_its_length_and_the_flags_that_keep_it(
    int4_dir, data_dir, monkeypatch, capsys
):
    """A trial's `specchat chat --n-ctx 256 --system <330 tokens>` was told "raise --n-ctx ... or give --n-keep its
    length": the length was said nowhere, and no --n-keep below n_ctx 256 could hold 330 tokens. The note now says
    how many tokens the system prompt is and the --n-ctx that keeps it."""
    import io

    import app.cli.commands as commands

    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(data_dir))
    monkeypatch.setattr("sys.stdin", io.StringIO("Tell me a long story about a lighthouse keeper.\n/exit\n"))
    args = commands.build_parser().parse_args(
        ["chat", "--mode", "ar", "--n-ctx", "64", "--system", LONG_SYSTEM, "--max-new-tokens", "40"]
    )
    assert commands.run_command(args) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "was dropped with it" in line]
    assert len(notes) == 1, err
    tokens = int(re.search(r"the system prompt \((\d+) tokens\)", notes[0]).group(1))
    assert 32 < tokens < 64  # LONG_SYSTEM rendered: over half of n_ctx 64, under n_ctx
    assert f"--n-ctx {2 * tokens} or more keeps it" in notes[0]
    assert f"--n-keep {tokens} keeps it at this --n-ctx, leaving {64 - tokens} tokens to the rest" in notes[0]
    assert "give --n-keep its length" not in notes[0]


def test_the_note_does_not_offer_an_n_keep_that_n_ctx_refuses():
    from app.cli.context_notes import system_prompt_dropped_notice

    note = system_prompt_dropped_notice(330, 256)
    assert "the system prompt (330 tokens)" in note and "--n-ctx 660 or more keeps it" in note
    assert "--n-keep" not in note.split("keeps it", 1)[1].replace("--n-keep auto", "")


def test_the_note_blames_n_keep_where_n_ctx_keeps_the_system_prompt_already():
    """`specchat chat --n-ctx 256 --n-keep 4` with a 19-token system prompt read "--n-ctx 38 or more keeps it": n_ctx
    was 256 already. Where n_ctx is twice the system prompt or more, only an --n-keep below its length drops it."""
    from app.cli.context_notes import system_prompt_dropped_notice

    assert system_prompt_dropped_notice(19, 256) == (
        "the context was full and part of the system prompt (19 tokens) was dropped with it, so the model no longer "
        "reads all of it: --n-keep auto (or 19 or more) keeps it")
