"""Bad input gets its own clear error, never a crash or a hang."""

import shutil

import pytest
from helpers import PROMPTS, chat_ids, settings
from tiny_models import default_gguf, write_tiny_llama

from inference.chat import ChatSession, valid_text
from inference.detokenizer import IncrementalDetokenizer
from inference.engine import Engine
from inference.events import ContextRolled, PromptOverflow, TextDelta
from inference.model import ModelLoadError, TokenizerMismatchError, load_model
from inference.models.default_head import default_head_dir
from inference.rope import RopeUnsupportedError
from inference.settings import SettingError


@pytest.fixture(scope="module")
def engine(target):
    return Engine(target)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, data_dir):
    """Two tiny random models: one with the default tokenizer, one with two token strings swapped."""
    root = tmp_path_factory.mktemp("tiny")
    source = default_gguf(root / "source")
    same = write_tiny_llama(source, root / "same-tokenizer")
    other = write_tiny_llama(source, root / "other-tokenizer", swap_tokens=(28, 30))  # ',' <-> '.'
    return same, other


def test_empty_prompt_and_empty_message(engine):
    with pytest.raises(ValueError, match="prompt is empty"):
        next(engine.generate([], settings("ar")))
    with pytest.raises(ValueError, match="message is empty"):
        next(ChatSession(engine).send("   \n", settings("ar")))


@pytest.mark.parametrize(
    "bad,name,field",
    [
        (dict(decoding="spec_lookup", k=0), "K", "k"),
        (dict(n_ctx=64, n_keep=64), "n_keep", "n_keep"),
        (dict(n_ctx=64, n_keep=4, n_discard=60), "n_discard", "n_discard"),
        (dict(n_ctx=10_000), "n_ctx", "n_ctx"),
        (dict(temperature=-0.5), "temperature", "temperature"),
        (dict(top_p=0.0), "top_p", "top_p"),
        (dict(max_new_tokens=0), "max_new_tokens", "max_new_tokens"),
    ],
)
def test_each_invalid_setting_is_refused_before_any_work(engine, target, bad, name, field):
    decoding = bad.pop("decoding", "ar")
    with pytest.raises(SettingError, match=name) as error:
        next(engine.generate(chat_ids(target, "Hi"), settings(decoding, **bad)))
    assert error.value.field == field
    assert engine.generate_text(chat_ids(target, "Hi"), settings("ar", max_new_tokens=2)).new_tokens >= 1  # still usable


def test_spec_with_a_draft_model_but_none_loaded(engine, target):
    with pytest.raises(ValueError, match="draft model"):
        next(engine.generate(chat_ids(target, "Hi"), settings("spec_model")))


def test_draft_with_another_tokenizer_is_refused(target, tiny_dirs):
    same, other = tiny_dirs
    Engine(target, load_model(same))  # same tokenizer, different model: accepted
    # trial: "(token ids of a probe text differs)"; each check says its subject and verb
    with pytest.raises(TokenizerMismatchError, match=r"another tokenizer than the target \S+ \((the token ids of a probe "
                       r"text differ|the text of the vocabulary differs)\)"):
        Engine(target, load_model(other))


def test_missing_model_folder_and_missing_file(tmp_path, int4_dir):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    shutil.copytree(int4_dir, broken)
    (broken / "openvino_tokenizer.xml").unlink()
    with pytest.raises(ModelLoadError, match="missing openvino_tokenizer.xml"):
        load_model(broken)


def test_a_draft_head_given_as_the_chat_model_is_named_a_head():
    """A newcomer gave the default model's head (``specchat models list`` lists it) as ``--model`` and was told to
    re-download an incomplete model; it is a head, which drafts only for its target."""
    with pytest.raises(ModelLoadError, match="is a draft head, not a chat model") as refused:
        load_model(default_head_dir())
    assert "Re-import" not in str(refused.value)


@pytest.mark.parametrize("name", ["openvino_model.bin", "openvino_model.xml"])
def test_truncated_model_file(tmp_path, int4_dir, name):
    broken = tmp_path / "truncated"
    shutil.copytree(int4_dir, broken)
    data = (broken / name).read_bytes()
    (broken / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        load_model(broken)


@pytest.mark.parametrize(
    "text",
    [
        "Emoji: 🙂👍🏽🇫🇷 family 👨‍👩‍👧",
        "中文和日本語のテキスト、한국어도。",
        "def f(x):\n\treturn {'a': [x ** 2, \"\\n\"]}  # ok\n",
        "Ünïcödé ñ ß ø å — “quotes” …",
    ],
)
def test_incremental_detokenization_round_trips(target, text):
    ids = target.encode(text)
    detokenizer = IncrementalDetokenizer(target.tokenizer)
    pieces = [detokenizer.push(token) for token in ids]
    assert "".join(pieces) == text
    assert all("\ufffd" not in piece for piece in pieces)


def test_texts_longer_than_the_tokenizer_limit_are_encoded_whole(target):
    """openvino-genai's tokenizer IR cuts at 8192 tokens; LoadedModel.encode must not lose the tail."""
    text = open(__import__("pathlib").Path(__file__).parent.parent / "bench" / "data" / "kjv_genesis.txt", encoding="utf-8").read()
    ids = target.encode(text)
    assert len(ids) > 30_000
    assert target.tokenizer.decode(ids[-40:]).endswith("he was put in a coffin in Egypt.\n")
    middle = text[:6000]
    whole = [int(t) for t in target.tokenizer.encode(middle, add_special_tokens=False).input_ids.data[0]]
    assert target.encode(middle) == whole  # pieces give the same ids as one call


def test_lone_surrogates_are_replaced_before_the_chat_template(engine, target):
    """A command-line argument with invalid UTF-8 arrives with lone surrogates (surrogateescape), which the chat
    template refuses; every message is made valid Unicode on its way there (U+FFFD), whichever front end sent it."""
    bad = "Hello \udcff\udcfe world"
    with pytest.raises((RuntimeError, UnicodeError)):
        target.tokenizer.apply_chat_template([{"role": "user", "content": bad}], add_generation_prompt=True)
    session = ChatSession(engine, system_prompt="Be brief \udcff.")
    events = list(session.send(bad, settings("ar", max_new_tokens=4)))
    assert events[-1].stats.new_tokens >= 1
    rendered = target.tokenizer.decode(session.prompt_ids(), skip_special_tokens=False)
    assert "Hello \ufffd\ufffd world" in rendered and "Be brief \ufffd." in rendered
    assert session.messages[0]["content"] == bad  # the history keeps what was sent; only the template sees U+FFFD
    assert valid_text("pair \ud83d\ude00, lone \ud83d") == "pair \U0001f600, lone \ufffd"


def test_a_prompt_longer_than_n_ctx_is_announced_before_its_prefill(engine, target):
    ids = chat_ids(target, " ".join(PROMPTS * 3))
    engine.reset()
    events = list(engine.generate(ids, settings("ar", max_new_tokens=4, n_ctx=64, n_discard=20), roll_long_prompt=True))
    assert isinstance(events[0], PromptOverflow)
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    rolled = sum(e.discarded_tokens for e in events[:first_text] if isinstance(e, ContextRolled))
    assert events[0] == PromptOverflow(prompt_tokens=len(ids), n_ctx=64, discarded_tokens=rolled, head_tokens=4, message_tokens=0,
                                      tail_tokens=len(ids) - 4 - rolled, max_n_ctx=8192)
    assert rolled >= 3 * 20 and target.max_context == 8192  # SmolLM2's trained length: the n_ctx a front end offers
    engine.reset()
    fits = list(engine.generate(ids[:60], settings("ar", max_new_tokens=2, n_ctx=64)))
    assert not [e for e in fits if isinstance(e, PromptOverflow)]


@pytest.mark.parametrize("threads", [-1, 0, 10_000])
def test_a_thread_count_out_of_range_is_a_setting_error_not_a_corrupt_model(int4_dir, threads):
    with pytest.raises(SettingError, match=r"threads must be in \[1, \d+\]") as error:
        Engine.load(int4_dir, num_threads=threads)
    assert error.value.field == "threads"


def test_the_engines_load_errors_name_no_front_ends_commands(tmp_path, tiny_ir, monkeypatch, capsys):
    """The engine's load errors said "run `specchat models list`", "Choose a chat model (`specchat models list`)",
    "(`specchat models fetch-default` for the default one)", words that reached the window's retry question. The
    engine says what to do in words of no front end and keeps a key of it; the command line says its commands."""
    from app.main import main
    from inference.advice import in_words
    from inference.models.errors import CLI_ADVICE

    incomplete, truncated = tmp_path / "incomplete", tmp_path / "truncated"
    for folder in (incomplete, truncated):
        shutil.copytree(tiny_ir["same"], folder)
    (incomplete / "openvino_model.bin").unlink()
    (truncated / "openvino_model.xml").write_text("<net")
    refusals = {}
    for folder in (tmp_path / "nowhere", default_head_dir(), incomplete, truncated):
        with pytest.raises(ModelLoadError) as refused:
            load_model(folder)
        assert "specchat" not in str(refused.value)
        refusals[folder] = refused.value
    assert str(refusals[incomplete]) == (f"model folder {incomplete} is incomplete: missing openvino_model.bin. "
                                         "Re-import or re-download the model.")
    said = {folder: in_words(error, CLI_ADVICE) for folder, error in refusals.items()}
    assert said[tmp_path / "nowhere"] == f"model folder {tmp_path / 'nowhere'} does not exist; see `specchat models list`"
    assert said[default_head_dir()].endswith("by itself). Choose a chat model (`specchat models list`).")
    assert said[incomplete] == (f"model folder {incomplete} is incomplete: missing openvino_model.bin. Re-import or "
                                "re-download the model (`specchat models fetch-default` repairs the default one).")
    assert said[truncated].startswith(f"cannot load the model in {truncated} on CPU: ")
    assert said[truncated].endswith(". The files may be truncated or corrupt. Re-import or re-download the model "
                                    "(`specchat models fetch-default` repairs the default one).")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    assert main(["generate", "Hi", "--model", str(incomplete)]) == 2
    assert capsys.readouterr().err == f"error: {said[incomplete]}\n"


def test_a_roll_refused_for_a_model_without_its_config_names_no_front_ends_command(tiny_ir, tmp_path):
    """"Re-import the model with `specchat models import`" reached the window; the engine keeps the advice's key."""
    from inference.advice import in_words
    from inference.models.errors import CLI_ADVICE

    shutil.copytree(tiny_ir["same"], tmp_path / "tiny")
    (tmp_path / "tiny" / "config.json").unlink()
    model = load_model(tmp_path / "tiny")
    with pytest.raises(RopeUnsupportedError) as refused:
        Engine(model).generate_text(model.encode("the cat sat on the mat " * 30), settings("ar", n_ctx=64))
    reason = (f"the conversation needs more than n_ctx tokens, but tiny cannot be rolled: {tmp_path / 'tiny'}"
              "/config.json is missing: RoPE parameters are unknown, so the rolling context cannot shift the KV cache")
    assert str(refused.value) == f"{reason}. Re-import or re-download the model."
    assert in_words(refused.value, CLI_ADVICE) == (f"{reason}. Re-import or re-download the model (`specchat models "
                                                   "fetch-default` repairs the default one).")
