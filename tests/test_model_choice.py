"""Choosing models by name: distinct names and labels in the store, drafts with the target's tokenizer, the CLI's
``--model NAME --draft NAME``, the ``target_model`` setting, and judging a draft model's speed (no Qt, no GUI)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.gui.draft_speed import DraftSpeedEvidence, StepRates, draft_speed_ratio
from app.gui.settings_store import AppSettings, SettingsStore
from app.main import main
from inference.events import StepStats
from inference.models import store as model_store
from inference.models.errors import ModelImportError


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    return model_store.models_dir()


def _fake_model(folder_name: str, name: str, bits: int, tokenizer: str, size_mb: int = 90) -> None:
    """A store entry with only its manifest (enough for listing, naming and pairing; not loadable)."""
    folder = model_store.models_dir() / folder_name
    folder.mkdir(parents=True)
    manifest = {"name": name, "bits": bits, "size_bytes": size_mb * 2**20, "tokenizer_fingerprint": tokenizer}
    (folder / model_store.MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.fixture
def default_copies(store):
    _fake_model("SmolLM2-135M-Instruct-int4", "SmolLM2-135M-Instruct", 4, "aaaa", 88)
    _fake_model("SmolLM2-135M-Instruct-int8", "SmolLM2-135M-Instruct", 8, "aaaa", 144)
    _fake_model("other", "Other-1B", 4, "bbbb", 600)
    return store


def test_the_default_models_copies_read_differently_and_pair_by_tokenizer(default_copies):
    int4, int8, other = model_store.installed_models()
    assert int4.display_name == int8.display_name == "SmolLM2-135M-Instruct"  # what every list showed
    assert [m.store_name for m in (int4, int8, other)] == [
        "SmolLM2-135M-Instruct-int4",
        "SmolLM2-135M-Instruct-int8",
        "other",
    ]
    labels = model_store.model_labels([int4, int8, other])
    assert labels[str(int4.path)] == "SmolLM2-135M-Instruct · 4-bit · 88 MiB"
    assert labels[str(int8.path)] == "SmolLM2-135M-Instruct · 8-bit · 144 MiB"
    assert labels[str(other.path)] == "Other-1B · 4-bit · 600 MiB"
    assert model_store.compatible_drafts(int4, [int4, int8, other]) == [int8]
    assert model_store.compatible_drafts(other, [int4, int8, other]) == []
    assert model_store.compatible_drafts(None, [int4, int8]) == []


def test_labels_that_would_read_the_same_get_their_folder_name(store):
    _fake_model("a", "Same", 4, "aaaa")
    _fake_model("b", "Same", 4, "aaaa")
    labels = model_store.model_labels(model_store.installed_models())
    assert sorted(labels.values()) == ["Same · 4-bit · 90 MiB (a)", "Same · 4-bit · 90 MiB (b)"]


def test_find_model_takes_store_names_and_unique_manifest_names(default_copies):
    assert model_store.find_model("SmolLM2-135M-Instruct-int8") == default_copies / "SmolLM2-135M-Instruct-int8"
    assert model_store.find_model("Other-1B") == default_copies / "other"
    with pytest.raises(ModelImportError, match="several installed models are named 'SmolLM2-135M-Instruct'.*-int4, "):
        model_store.find_model("SmolLM2-135M-Instruct")
    with pytest.raises(ModelImportError, match="no installed model named 'nope'.*SmolLM2-135M-Instruct-int4"):
        model_store.find_model("nope")
    with pytest.raises(ModelImportError, match="model folder /no/such/folder does not exist"):
        model_store.find_model("/no/such/folder")


def test_a_name_not_installed_is_answered_with_the_close_names_case_insensitively(default_copies, capsys):
    """``--model smollm2-135m-instruct-int4`` (the name typed in lower case, or mistyped) said only "no installed
    model named ..." and the whole list: the message now says which installed names are close (difflib, case
    ignored), best first, and still how to see them all."""
    with pytest.raises(ModelImportError) as caught:
        model_store.find_model("smollm2-135m-instruct-int")
    assert str(caught.value) == (
        "no installed model named 'smollm2-135m-instruct-int'; did you mean: SmolLM2-135M-Instruct-int4, "
        "SmolLM2-135M-Instruct-int8? (installed: SmolLM2-135M-Instruct-int4, SmolLM2-135M-Instruct-int8, other); "
        "see `specchat models list`"
    )
    with pytest.raises(ModelImportError, match=r"did you mean: SmolLM2-135M-Instruct-int8\? \(installed"):
        model_store.find_model("smollm2-135m-instruct-int8")  # only the case differs: that one alone
    assert main(["generate", "Hi", "--model", "Othr", "--max-new-tokens", "2"]) == 2
    said = capsys.readouterr().err
    assert "no installed model named 'Othr'; did you mean: other? (installed: " in said
    assert said.rstrip().endswith("see `specchat models list`")
    with pytest.raises(ModelImportError) as caught:  # nothing close: no suggestion
        model_store.find_model("llama")
    assert str(caught.value) == (
        "no installed model named 'llama' (installed: SmolLM2-135M-Instruct-int4, SmolLM2-135M-Instruct-int8, other); "
        "see `specchat models list`"
    )


def test_models_list_shows_names_that_models_remove_takes(default_copies, capsys):
    assert main(["models", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert names == ["SmolLM2-135M-Instruct-int4", "SmolLM2-135M-Instruct-int8", "other"]
    assert main(["models", "remove", "SmolLM2-135M-Instruct-int8", "--yes"]) == 0
    assert [m.store_name for m in model_store.installed_models()] == ["SmolLM2-135M-Instruct-int4", "other"]
    assert main(["models", "remove", "Other-1B", "--yes"]) == 0
    assert [m.store_name for m in model_store.installed_models()] == ["SmolLM2-135M-Instruct-int4"]


def test_generate_takes_installed_model_names_for_the_target_and_the_draft(tiny_ir, store, capsys):
    for source, name in (
        (tiny_ir["same"], "tiny-target"),
        (tiny_ir["same"], "tiny-draft"),
        (tiny_ir["other"], "tiny-other"),
    ):
        assert main(["models", "import", str(source), "--name", name]) == 0
    capsys.readouterr()
    common = ["--max-new-tokens", "4", "--n-ctx", "256", "--json"]
    assert main(["generate", "Hi", "--model", "tiny-target", "--mode", "spec", "--draft", "tiny-draft", *common]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mode"] == "spec" and result["new_tokens"] > 0, result
    assert main(["generate", "Hi", "--model", "tiny-target", "--mode", "spec", "--draft", "lookup", *common]) == 0
    assert json.loads(capsys.readouterr().out)["mode"] == "spec"
    assert main(["generate", "Hi", "--model", "no-such-model", *common]) == 2
    assert "no installed model named 'no-such-model'" in capsys.readouterr().err
    assert main(["generate", "Hi", "--model", "tiny-target", "--mode", "spec", "--draft", "tiny-other", *common]) == 2
    assert "tokenizer" in capsys.readouterr().err


def test_a_draft_head_made_for_another_model_is_refused_in_the_pair_checks_words_before_loading(
        tiny_ir, store, capsys, monkeypatch):
    """A newcomer's `generate Hi --model other --draft SmolLM2-135M-Instruct-head` loaded both models, then said
    "other cannot give the outputs of decoder layers [1, 14] that its draft head reads (decoder layer 1 out of
    range: ...)", where `models pair` says in plain words that a head drafts only for its own model. The command
    line now says that, before anything loads, for generate, chat and serve alike."""
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine
    from inference.models.default_head import shipped_head

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    assert main(["models", "import", str(tiny_ir["same"]), "--name", "tiny-target"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    head = shipped_head()
    for command in (["generate", "Hi"], ["chat"], ["serve", "--port", "0"]):
        assert main([*command, "--model", "tiny-target", "--draft", str(head), "--n-ctx", "256"]) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == (
            f"error: {head.name} cannot draft for tiny-target: a draft head made for SmolLM2-135M-Instruct drafts "
            "only for SmolLM2-135M-Instruct"), err
        assert "loading" not in err


def test_a_draft_with_another_tokenizer_is_refused_from_the_manifests_before_loading(tiny_ir, store, capsys, monkeypatch):
    """A newcomer's `generate Hi --mode spec --draft other-tok` loaded both models (6.9 s for the default model; a
    minute for a large one) before "the draft model other-tok has another tokenizer than the target". The store's
    manifests hold both tokenizers' fingerprints (`models list` shows them, the window's Drafter list compares them):
    compared before anything loads, in `models pair`'s words."""
    from app.backends.worker import InferenceWorker
    from inference.engine import Engine

    def load(*args, **kwargs):
        raise AssertionError("a model was loaded")

    for source, name in ((tiny_ir["same"], "tiny-target"), (tiny_ir["other"], "tiny-other")):
        assert main(["models", "import", str(source), "--name", name]) == 0
    capsys.readouterr()
    monkeypatch.setattr(Engine, "load", load)
    monkeypatch.setattr(InferenceWorker, "load", load)
    for command in (["generate", "Hi", "--mode", "spec"], ["chat"], ["serve", "--port", "0"]):
        assert main([*command, "--model", "tiny-target", "--draft", "tiny-other", "--n-ctx", "256"]) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == (
            "error: tiny-other cannot draft for tiny-target: their tokenizers differ (the text of the vocabulary "
            "differs). Choose a draft from the same model family (see `specchat models catalogue`), or use prompt "
            "lookup."), err
        assert "loading" not in err


def test_target_model_setting_persists_and_version_1_files_still_load(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"bits": 8, "n_ctx": 2048}}))  # a file of an earlier release
    store = SettingsStore(path)
    loaded = store.load()
    assert (loaded.target_model, loaded.bits, loaded.value("n_ctx"), store.warnings) == ("", 8, 2048, [])
    assert loaded.target_name == "SmolLM2-135M-Instruct-int8"
    store.save(AppSettings(target_model="tiny-target", bits=8))
    assert json.loads(path.read_text())["version"] == 2
    chosen = SettingsStore(path).load()
    assert (chosen.target_model, chosen.target_name, chosen.bits) == ("tiny-target", "tiny-target", 8)
    # The bit-width chooses among the default model's copies only.
    assert AppSettings(target_model="x", bits=4).model_key() == AppSettings(target_model="x", bits=8).model_key()
    assert (
        AppSettings(bits=4).model_key()
        != AppSettings(bits=8).model_key()
        != AppSettings(target_model="x", bits=8).model_key()
    )
    path.write_text(json.dumps({"version": 1, "settings": {"target_model": 3}}))
    assert SettingsStore(path).load().target_model == ""


def _step(drafted: int, emitted: int, step_ms: float) -> StepStats:
    return StepStats(
        drafted, max(0, emitted - 1) if drafted else 0, emitted, 0.0, 0.0, step_ms, drafted, 10, 256, 0.0, 0
    )


def test_draft_speed_from_a_comparison_and_from_the_steps_of_a_reply_whose_k_is_chosen():
    slow_compare = {"compare": {"ar": {"mode": "ar"}, "spec": {"mode": "spec", "drafter": "model"}, "speedup": 0.4}}
    assert draft_speed_ratio(slow_compare) == 0.4
    lookup_compare = {"compare": {"ar": {}, "spec": {"drafter": "lookup"}, "speedup": 0.4}}
    assert draft_speed_ratio(lookup_compare) is None  # prompt lookup has no draft model to blame

    rates = StepRates()
    rates.add([_step(0, 1, 10.0)] * 3 + [_step(4, 2, 50.0)] * 5)  # plain 100 tokens/s, speculative 40 tokens/s
    assert rates.ratio() is None  # too few speculative steps to judge yet
    rates.add([_step(4, 2, 50.0), object()])
    assert rates.ratio() == pytest.approx(0.4)
    assert draft_speed_ratio({"mode": "spec", "drafter": "model"}, rates) == pytest.approx(0.4)
    assert draft_speed_ratio({"mode": "spec", "drafter": "lookup"}, rates) is None
    assert draft_speed_ratio({"mode": "ar"}, rates) is None
    fast = StepRates()
    fast.add([_step(0, 1, 10.0)] * 3 + [_step(4, 5, 20.0)] * 6)
    assert fast.ratio() == pytest.approx(2.5)


def _evidence(*ratios: float) -> DraftSpeedEvidence:
    evidence = DraftSpeedEvidence()
    for ratio in ratios:
        evidence.add(ratio)
    return evidence


def test_a_draft_is_called_slow_only_from_several_replies_whose_interval_lies_below_one():
    """One Compare is not evidence (a newcomer saw 1.19x, then 0.79x a minute later, then "Keep plain decoding")."""
    assert not _evidence(0.4).slow() and _evidence(0.4, 0.45).interval() is None  # fewer than 3 replies: no verdict
    ratio, low, high = _evidence(0.4, 0.45, 0.5).interval()
    logs = np.log([0.4, 0.45, 0.5])  # the geometric mean and Student's t interval with 2 degrees of freedom
    half = 4.303 * logs.std(ddof=1) / np.sqrt(3)
    assert (ratio, low, high) == pytest.approx((np.exp(logs.mean()), np.exp(logs.mean() - half), np.exp(logs.mean() + half)))
    assert _evidence(0.4, 0.45, 0.5).slow()
    assert not _evidence(1.19, 0.79, 0.8).slow()  # noisy: its interval (0.51-1.62) holds 1.0
    assert not _evidence(0.95, 0.94, 0.96).slow()  # below 1.0 for sure, but within SLOWER_THAN's margin
    assert _evidence(*([0.5] * 7 + [1.0] * 3)).slow()  # 7 of 10 replies at half speed: 0.62x (0.48-0.78)
    kept = _evidence(*([0.5] * 10 + [1.0] * 10))  # only the last 10 replies count
    assert kept.ratios == [1.0] * 10 and not kept.slow()


def test_a_gguf_file_or_a_checkpoint_folder_given_as_model_says_to_import_or_convert_it_first(
    default_copies, tmp_path, monkeypatch, capsys
):
    """A trial brought a model and gave it to `generate --model` as the README's `--model NAME|PATH` reads: a GGUF file
    was "no installed model named 'my-tiny.gguf'", and a Hugging Face checkpoint folder "is incomplete: missing
    openvino_model.xml, ... Re-import or re-download the model (`specchat models fetch-default` repairs the default
    one)". Each now says what the file or folder is and the one command that makes it usable."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-tiny.gguf").write_bytes(b"GGUF")
    (tmp_path / "my-ckpt").mkdir()
    (tmp_path / "my-ckpt" / "config.json").write_text("{}")
    for given in ("my-tiny.gguf", "./my-tiny.gguf", str(tmp_path / "my-tiny.gguf")):
        assert main(["generate", "Hi", "--model", given]) == 2
        err = capsys.readouterr().err
        assert f"{given} is a GGUF file, not an installed model: import it first (`specchat models import {given}`), " \
               "then give the name it is installed under" in err, err
    for given in ("./my-ckpt", str(tmp_path / "my-ckpt")):
        assert main(["generate", "Hi", "--model", given]) == 2
        err = capsys.readouterr().err
        assert f"{given} is a Hugging Face checkpoint, not an OpenVINO model: convert it first (`specchat models " \
               f"convert {given}`), then give the name it is installed under" in err, err
        assert "fetch-default" not in err
