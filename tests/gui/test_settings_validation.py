"""Settings validation: each invalid value is flagged next to its field with its range; nothing invalid is emitted;
settings persist."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import field_geometry
from gui_helpers import reset_to_defaults

from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.widgets.setting_words import short_label
from app.gui.widgets.settings_pane import BROWSE_DRAFT, LOOKUP_DRAFT, SettingsPane
from inference.models.store import ModelManifest
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings


@pytest.mark.parametrize(
    "changes,field,fragments",
    [
        ({"decoding": "spec_lookup", "k": 0}, "k", ["K", "[1, 16]"]),
        ({"decoding": "spec_model", "draft_model": "/", "k": 17}, "k", ["K", "[1, 16]"]),
        ({"n_ctx": 8}, "n_ctx", ["n_ctx", "[16, 8192]"]),
        ({"n_ctx": 9000}, "n_ctx", ["n_ctx", "[16, 8192]"]),
        ({"n_ctx": 512, "n_keep": 512}, "n_keep", ["n_keep", "[0, 511]"]),
        ({"n_ctx": 512, "n_keep": 4, "n_discard": 508}, "n_discard", ["n_discard", "[1, 507]", "n_keep + n_discard < n_ctx"]),
        ({"n_ctx": 512, "n_discard": 0}, "n_discard", ["n_discard"]),
        ({"temperature": 2.5}, "temperature", ["temperature", "[0, 2]"]),
        ({"top_p": 0.0}, "top_p", ["top_p", "(0, 1]"]),
        ({"top_p": 1.5}, "top_p", ["top_p", "(0, 1]"]),
        ({"max_new_tokens": 0}, "max_new_tokens", ["max_new_tokens", ">= 1"]),
        ({"seed": -1}, "seed", ["seed", "[0, 2^63)"]),
        ({"decoding": "spec_model", "draft_model": ""}, "draft_model", ["draft model", "prompt lookup"]),
        ({"decoding": "spec_model", "draft_model": "/no/such/folder"}, "draft_model", ["does not exist"]),
        ({"target_device": "NPU.7"}, "target_device", ["device must be one of CPU, AUTO"]),
        ({"bits": 3}, "bits", ["4, 8, 16"]),
        ({"precision": "fp8"}, "precision", ["inference precision must be one of auto, f32, bf16, f16"]),
        ({"kv_cache_precision": "int4"}, "kv_cache_precision", ["kv_cache precision must be one of auto, u8, f16, f32"]),
    ],
)
def test_field_errors_name_the_setting_and_its_range(changes, field, fragments):
    errors = AppSettings().with_values(**changes).field_errors(max_position_embeddings=8192, devices=["CPU", "AUTO"])
    assert field in errors, errors
    for fragment in fragments:
        assert fragment in errors[field]


def test_a_precision_the_cpu_lacks_is_flagged_next_to_its_field():
    from inference.devices import device_computes

    missing = [p for p in ("bf16", "f16") if not device_computes("CPU", p)]
    if not missing:
        pytest.skip("this CPU computes bf16 and f16 natively")
    errors = replace(AppSettings(), precision=missing[0]).field_errors(8192, ["CPU"])
    assert set(errors) == {"precision"} and "choose auto or f32" in errors["precision"]


def test_defaults_and_several_errors_at_once():
    assert AppSettings().field_errors(8192, ["CPU"]) == {}
    errors = AppSettings().with_values(decoding="spec_lookup", k=0, top_p=0.0, n_ctx=4).field_errors(8192)
    assert set(errors) == {"k", "top_p", "n_ctx"}
    assert AppSettings().with_values(n_keep="auto", n_ctx=64).field_errors() == {}


def test_generation_settings_carry_every_field():
    settings = AppSettings().with_values(decoding="spec_lookup", k=6, adaptive_k=True, n_ctx=1024, n_keep="auto",
                       n_discard=100, temperature=0.7, top_p=0.9, top_k=40, seed=7, max_new_tokens=99)  # fmt: skip
    generation = settings.generation_settings()
    assert (generation.decoding.mode, generation.decoding.drafter) == ("spec", "lookup")
    assert (generation.speculative.k, generation.speculative.adaptive) == (6, True)
    assert (generation.context.n_ctx, generation.context.n_keep, generation.context.n_discard) == (1024, "auto", 100)
    sampling = generation.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.seed, sampling.max_new_tokens) == (0.7, 0.9, 40, 7, 99)
    assert settings.generation_settings(Decoding.AUTOREGRESSIVE, seed=3).decoding.mode == "ar"
    assert settings.generation_settings(Decoding.AUTOREGRESSIVE, seed=3).sampling.seed == 3
    generation.validate(8192)


def test_model_key_changes_only_for_reload_fields():
    base = AppSettings()
    assert base.with_values(temperature=1.0, k=8, n_ctx=512).model_key() == base.model_key()
    assert replace(base, target_device="AUTO").model_key() != base.model_key()
    assert replace(base, bits=8).model_key() != base.model_key()
    assert replace(base, precision="f32").model_key() != base.model_key()
    assert replace(base, kv_cache_precision="u8").model_key() != base.model_key()
    assert base.with_values(decoding="spec_lookup").model_key() == base.model_key()  # no draft model needed
    assert base.with_values(decoding="spec_model", draft_model="/x").model_key() != base.model_key()


def test_store_round_trip_and_atomic_file(tmp_path):
    store = SettingsStore(tmp_path / "cfg" / "settings.json")
    assert store.load() == AppSettings()
    settings = AppSettings().with_values(bits=8, decoding="spec_lookup", k=7, n_keep="auto", seed=42, temperature=0.5)
    store.save(settings)
    data = json.loads(store.path.read_text())
    assert data["version"] == 2 and data["settings"]["k"] == 7 and data["settings"]["n_keep"] == "auto"
    assert SettingsStore(store.path).load() == settings
    assert [p.name for p in store.path.parent.iterdir()] == ["settings.json"]  # no temporary file left


#: settings.json as the version before AppSettings embedded GenerationSettings wrote it (its flat fields).
VERSION_1_FILE = {
    "version": 1,
    "settings": {
        "target_device": "CPU", "draft_device": "AUTO", "bits": 8, "precision": "f32", "kv_cache_precision": "u8",
        "decoding": "spec_lookup", "draft_model": "/models/draft", "k": 7, "adaptive_k": True, "n_ctx": 2048,
        "n_keep": "auto", "n_discard": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 42,
        "max_new_tokens": 99, "highlight_draft": False,
    },
    "ui": {"geometry": "AAAA"},
}  # fmt: skip


def test_store_reads_and_writes_the_version_1_file(tmp_path):
    """A file of version 1 loads with the same values, and what is saved holds the same flat keys and values."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(VERSION_1_FILE))
    store = SettingsStore(path)
    loaded = store.load()
    assert store.warnings == [] and store.ui_state == {"geometry": "AAAA"}
    assert (loaded.target_device, loaded.draft_device, loaded.bits, loaded.precision, loaded.kv_cache_precision,
            loaded.draft_model, loaded.highlight_draft) == ("CPU", "AUTO", 8, "f32", "u8", "/models/draft", False)  # fmt: skip
    assert loaded.generation == GenerationSettings(
        decoding=Decoding.PROMPT_LOOKUP,
        sampling=SamplingSettings(temperature=0.5, top_k=40, top_p=0.9, seed=42, max_new_tokens=99),
        context=ContextSettings(n_ctx=2048, n_keep="auto", n_discard=100),
        speculative=SpeculativeSettings(k=7, adaptive=True),
    )
    assert loaded.sampling_preset == ""  # sampling values the user chose stay (not replaced by the model's)
    store.save(loaded)
    saved = json.loads(path.read_text())
    assert saved["settings"]["target_model"] == ""  # added since (the default model), read as absent by v1 readers
    assert {**saved["settings"], **VERSION_1_FILE["settings"]} == saved["settings"]  # the same flat keys and values
    assert saved["version"] == 2 and saved["ui"] == VERSION_1_FILE["ui"]


#: settings.json as SpecChat wrote it while n_keep's default was 4 (before "auto" kept the system prompt): every
#: file saved then holds ``"n_keep": 4``, chosen or not.
OLD_DEFAULT_N_KEEP_FILE = {"version": 1, "settings": {"n_keep": 4, "n_ctx": 2048, "k": 7}, "ui": {"geometry": "AAAA"}}


def test_a_version_1_file_with_the_old_default_n_keep_4_loads_as_auto_and_is_migrated_once(tmp_path):
    """A user who upgraded kept ``"n_keep": 4`` (the old default) and lost the system prompt at the chat's first roll:
    a version 1 file's 4 loads as "auto"; loading writes nothing, the next save writes it with format version 2, and
    a 4 chosen after that stays 4."""
    path = tmp_path / "settings.json"
    old = json.dumps(OLD_DEFAULT_N_KEEP_FILE)
    path.write_text(old)
    store = SettingsStore(path)
    loaded = store.load()
    assert (loaded.value("n_keep"), loaded.value("n_ctx"), loaded.value("k"), store.warnings) == ("auto", 2048, 7, [])
    assert path.read_text() == old  # written back only as the app saves
    store.save(loaded)
    saved = json.loads(path.read_text())
    assert (saved["version"], saved["settings"]["n_keep"], saved["ui"]) == (2, "auto", {"geometry": "AAAA"})
    store.save(loaded.with_values(n_keep=4))  # chosen in this version: no migration again
    assert json.loads(path.read_text())["version"] == 2
    assert SettingsStore(path).load().value("n_keep") == 4


@pytest.mark.parametrize("n_keep", [64, 0, 5, "auto"])
def test_a_version_1_file_keeps_an_n_keep_the_user_chose(tmp_path, n_keep):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({**OLD_DEFAULT_N_KEEP_FILE, "settings": {"n_keep": n_keep, "n_ctx": 2048}}))
    store = SettingsStore(path)
    loaded = store.load()
    assert loaded.value("n_keep") == n_keep and store.warnings == []
    store.save(loaded)
    assert json.loads(path.read_text())["settings"]["n_keep"] == n_keep


def test_store_survives_a_bad_file(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    store = SettingsStore(path)
    assert store.load() == AppSettings()
    assert "is not a settings file (not valid JSON" in store.notice and store.warnings == []
    path.write_text(json.dumps({"version": 1, "settings": {"k": "seven", "top_p": True, "n_keep": "sometimes", "seed": None, "n_ctx": 2048}}))
    loaded = store.load()
    assert loaded == AppSettings().with_values(n_ctx=2048)
    assert len(store.warnings) == 3 and any("k has an invalid value 'seven'" in w for w in store.warnings)


def test_a_seed_of_minus_one_in_the_file_loads_as_a_random_seed(tmp_path):
    """A hand-edited ``"seed": -1`` is the random seed, as the seed box, the command line and the server read it (the
    window said the setting was invalid, while its message offered -1); other seeds stay as written."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"seed": -1, "temperature": 0.5}}))
    store = SettingsStore(path)
    loaded = store.load()
    assert loaded.value("seed") is None and loaded.value("temperature") == 0.5
    assert store.warnings == [] and loaded.field_errors(max_position_embeddings=8192, devices=["CPU"]) == {}
    path.write_text(json.dumps({"version": 1, "settings": {"seed": 42}}))
    assert store.load().value("seed") == 42


WITH_PRESETS = {"version": 1, "settings": {"k": 7}, "presets": {"Mine": {"temperature": 0.3, "top_p": 0.8}}}


@pytest.mark.parametrize("content, said", [
    (b'{"version": 1, "settings": {"k": 7}, "presets": {"Mine": {"tempera', "is not a settings file (not valid JSON"),
    (b"[1, 2, 3]", "is not a settings file (not a JSON object)"),
    (b'{"version": "1.0"}', "is not a settings file (its version is '1.0')"),
    (b"\xff\xfe\x00garbage", "is not a settings file (not valid JSON"),
    (b'{"ui": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "is not a settings file (not valid JSON: nested more than"),
])
def test_a_file_that_cannot_be_read_is_kept_aside_never_overwritten(tmp_path, content, said):
    """A damaged settings.json (cut short by a crash, edited by hand) is moved aside and said; the next save writes
    a new file beside it instead of over it, so the presets in it can still be rescued."""
    path = tmp_path / "settings.json"
    path.write_bytes(content)
    store = SettingsStore(path)
    assert store.load() == AppSettings() and said in store.notice
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("settings.json.unreadable-")]
    assert len(moved) == 1 and moved[0].read_bytes() == content and moved[0].name in store.notice
    store.save_preset("New", {"temperature": 0.9})
    assert moved[0].read_bytes() == content
    assert json.loads(path.read_text())["presets"]["New"]["temperature"] == 0.9


def test_a_file_of_a_newer_version_is_left_untouched(tmp_path):
    path = tmp_path / "settings.json"
    newer = json.dumps({**WITH_PRESETS, "version": 3})
    path.write_text(newer)
    store = SettingsStore(path)
    assert store.load() == AppSettings()
    assert store.notice.startswith(f"{path} was written by a newer SpecChat (settings format 3; this one reads 2)")
    store.save(AppSettings().with_values(k=3))
    store.save_preset("New", {"temperature": 0.9})
    assert path.read_text() == newer and list(tmp_path.iterdir()) == [path]


def test_a_file_that_cannot_be_read_nor_moved_is_never_written(tmp_path, monkeypatch):
    path = tmp_path / "settings.json"
    path.write_text("{cut short")

    def refuse(_path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("app.gui.settings_store.move_aside", refuse)
    store = SettingsStore(path)
    assert store.load() == AppSettings()
    assert "could not be moved aside (Permission denied): it is left untouched" in store.notice
    assert store.held is not None
    store.save(AppSettings().with_values(k=3))
    assert path.read_text() == "{cut short"


def test_a_save_reaches_the_disk_before_it_replaces_the_file(tmp_path, monkeypatch):
    """fsync before os.replace: after a power cut the file is the old one or the new one, never an empty one."""
    import os

    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.fstat(fd).st_size)), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", Path(b).name)), real_replace(a, b))[1])
    store = SettingsStore(tmp_path / "settings.json")
    store.save(AppSettings())
    size = store.path.stat().st_size
    assert calls[:2] == [("fsync", size), ("replace", "settings.json")]  # the written file, then the rename
    assert len(calls) == 3 and calls[2][0] == "fsync"  # and the folder, which holds the rename


def test_a_remote_url_with_a_password_loses_it_on_load(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "settings": {"remote_url": "http://bob:pw@gpu-box:8000/v1"}}))
    store = SettingsStore(path)
    assert store.load().remote_url == "http://gpu-box:8000/v1"
    assert "held a user name or password; they were removed" in store.warnings[0] and "pw" not in store.warnings[0]
    store.save(store.load())
    assert "pw@" not in path.read_text()


@pytest.fixture
def pane(qtbot):
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU", "AUTO"])
    pane.set_max_position_embeddings(8192)
    qtbot.addWidget(pane)
    pane.show()
    emitted = []
    summaries = []
    pane.settings_changed.connect(emitted.append)
    pane.validity_changed.connect(summaries.append)
    return pane, emitted, summaries


def _shown_error(pane, field):
    label = pane.error_labels[field]
    return label.text() if label.isVisibleTo(pane) else ""


def test_pane_flags_invalid_values_in_place_and_emits_only_valid_settings(pane):
    pane, emitted, summaries = pane
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))  # K counts in speculative decoding
    emitted.clear()
    pane.k.setValue(17)
    assert "Draft tokens per step (K) must be between 1 and 16; you typed 17" == _shown_error(pane, "k")
    assert pane.fields["k"].property("invalid") is True
    assert emitted == [] and summaries[-1] == "Fix the settings first: Draft tokens per step (K) must be between 1 and 16; you typed 17"
    pane.n_ctx.setValue(5)  # a second field flagged: the summary says the first and counts the others
    assert summaries[-1] == (
        "Fix the settings first: Context length must be between 16 and 8,192; you typed 5 (and 1 more field, marked in red)"
    )  # (in the words of the field's label, as under the field)
    pane.n_ctx.setValue(4096)
    assert summaries[-1].endswith("you typed 17")
    pane.k.setValue(6)
    assert _shown_error(pane, "k") == "" and pane.fields["k"].property("invalid") is False
    assert emitted[-1].generation.speculative.k == 6 and summaries[-1] == ""

    pane.n_ctx.setValue(512)
    pane.n_keep.setValue(600)
    assert "Always kept must be auto or between 0 and 511 (below Context length); you typed 600" == _shown_error(pane, "n_keep")
    pane.n_keep.setValue(4)
    pane.n_discard.setValue(600)
    assert (
        "Forgotten at once must be auto or between 1 and 507 (Always kept plus Forgotten at once must stay below "
        "Context length); you typed 600"
    ) == _shown_error(pane, "n_discard")
    pane.n_discard.setValue(-1)
    assert pane.n_discard.text() == "auto (half)"
    pane.n_keep.setValue(-1)
    assert pane.n_keep.text() == "auto (system prompt)" and emitted[-1].generation.context.n_keep == "auto"

    pane.n_ctx.setValue(10000)
    assert "Context length must be between 16 and 8,192; you typed 10000" == _shown_error(pane, "n_ctx")
    pane.n_ctx.setValue(2048)

    pane.top_p.setValue(0.0)
    assert "Likely words only (top-p) must be above 0 and at most 1; you typed 0" == _shown_error(pane, "top_p")
    pane.top_p.setValue(0.9)
    pane.temperature.setValue(5)
    assert "Randomness (temperature) must be between 0 and 2" in _shown_error(pane, "temperature")
    pane.temperature.setValue(0.7)
    pane.max_new_tokens.setValue(0)
    assert "Longest reply (tokens) must be at least 1; you typed 0" == _shown_error(pane, "max_new_tokens")
    pane.max_new_tokens.setValue(64)
    pane.seed.setText("abc")
    assert "Seed must be a whole number at least 0 and below 2^63" in _shown_error(pane, "seed")
    pane.seed.setText("-5")  # the error says how to get a random seed (newcomer trial)
    assert _shown_error(pane, "seed") == (
        "Seed must be a whole number at least 0 and below 2^63, or empty or -1 for a random seed; you typed -5"
    )
    pane.seed.setText("-1")  # a random seed, as llama.cpp, LM Studio, the command line and the server read it
    assert "seed" not in pane.errors() and pane.current().value("seed") is None
    pane.seed.setText("123")
    pane.top_k.setValue(50)
    pane.adaptive_k.setChecked(True)

    assert pane.errors() == {}
    final = emitted[-1]
    names = ("k", "n_ctx", "n_keep", "n_discard", "top_p", "temperature", "max_new_tokens", "seed", "top_k", "adaptive_k")
    assert tuple(final.value(name) for name in names) == (6, 2048, "auto", -1, 0.9, 0.7, 64, 123, 50, True)
    assert all(not errors for errors in [s.field_errors(8192) for s in emitted])


def test_pane_draft_model_rules(pane, tmp_path):
    pane, emitted, summaries = pane
    # Auto, the default, drafts with the draft model chosen, and with prompt lookup when none is: no error
    assert pane.draft_model.isEnabled() and _shown_error(pane, "draft_model") == "" and not pane.errors()
    pane.decoding.setCurrentIndex(pane.decoding.findData("ar"))
    assert not pane.draft_model.isEnabled() and not pane.draft_device.isEnabled()
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_model"))
    assert pane.draft_model.isEnabled() and pane.draft_device.isEnabled()
    assert pane.draft_model.findData(BROWSE_DRAFT) == pane.draft_model.count() - 1  # "Other folder…", last
    assert "needs a draft model" in _shown_error(pane, "draft_model")  # none installed: nothing to preselect
    pane.set_models([ModelManifest(name="Tiny", bits=8, path=tmp_path)])
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(str(tmp_path)))
    assert _shown_error(pane, "draft_model") == ""
    assert emitted[-1].generation.decoding == "spec_model" and emitted[-1].draft_model == str(tmp_path)
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(LOOKUP_DRAFT))  # prompt lookup, from the draft list
    assert pane.decoding.currentData() == "spec_lookup" and pane.draft_model.isEnabled() and not pane.draft_device.isEnabled()
    assert emitted[-1].generation.decoding == "spec_lookup" and emitted[-1].draft_model == str(tmp_path)  # kept
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_model"))
    assert pane.draft_model.currentData() == str(tmp_path)  # the model chosen before comes back
    pane.flag("draft_model", "the draft model X has another tokenizer than the target Y")
    assert "another tokenizer" in _shown_error(pane, "draft_model") and pane.errors()
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))  # any edit clears what the engine refused
    assert _shown_error(pane, "draft_model") == "" and emitted[-1].generation.decoding == "spec_lookup"


def test_pane_shows_stored_invalid_settings_flagged(qtbot):
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings().with_values(decoding="spec_lookup", k=40, target_device="GPU.9"), ["CPU"])
    qtbot.addWidget(pane)
    assert set(pane.errors()) == {"k", "target_device"}
    assert pane.k.value() == 40 and pane.target_device.currentText() == "GPU.9"
    reset_to_defaults(pane)
    assert pane.errors() == {} and pane.current() == AppSettings()


def test_choosing_draft_model_decoding_takes_the_preselected_draft_without_an_error_first(pane, tmp_path):
    from app.gui.draft_choices import draft_choices

    pane, emitted, summaries = pane
    target = ModelManifest(name="Target", bits=4, tokenizer_fingerprint="a" * 64, path=tmp_path / "target")
    small = ModelManifest(name="Small", bits=4, size_bytes=10, tokenizer_fingerprint="a" * 64, path=tmp_path / "small")
    large = ModelManifest(name="Large", bits=16, size_bytes=99, tokenizer_fingerprint="a" * 64, path=tmp_path / "large")
    other = ModelManifest(name="Other", bits=4, size_bytes=1, tokenizer_fingerprint="b" * 64, path=tmp_path / "other")
    for manifest in (small, large):
        manifest.path.mkdir()
    drafts, preselected = draft_choices(target, [target, large, small, other])
    assert [m.name for m in drafts] == ["Large", "Small"] and preselected == str(small.path)  # the smallest that fits
    assert draft_choices(target, [target, other]) == ([], "")
    pane.set_models(drafts, preselected)
    shown = []
    pane.validity_changed.connect(shown.append)
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_model"))
    assert pane.draft_model.currentData() == str(small.path) and _shown_error(pane, "draft_model") == ""
    assert shown and all(summary == "" for summary in shown)  # no red error, not even for a moment
    assert emitted[-1].generation.decoding == "spec_model" and emitted[-1].draft_model == str(small.path)


def _type_into(qtbot, spin_box, text: str) -> None:
    """Select a spin box's text and type ``text`` over it, key by key, as a user does."""
    from PySide6.QtCore import Qt

    spin_box.setFocus()
    spin_box.selectAll()
    qtbot.keyClick(spin_box, Qt.Key.Key_Delete)
    qtbot.keyClicks(spin_box, text)


def test_a_number_typed_past_its_range_is_kept_and_the_range_said_in_plain_words(pane, qtbot):
    """K typed as "99" became 9, and an 8-digit context length was cut to 6 digits, without a word; the context
    length's error named only the field term and said its range in interval notation ("n_ctx must be in [16,
    8192]"): each field is named by its label, its range said in words."""
    pane, _emitted, _summaries = pane
    pane.decoding.setCurrentIndex(pane.decoding.findData(Decoding.PROMPT_LOOKUP.value))
    _type_into(qtbot, pane.k, "99")
    assert pane.k.value() == 99
    assert _shown_error(pane, "k") == "Draft tokens per step (K) must be between 1 and 16; you typed 99"
    _type_into(qtbot, pane.n_ctx, "12345678")
    assert pane.n_ctx.value() == 12_345_678
    error = _shown_error(pane, "n_ctx")
    assert error == "Context length must be between 16 and 8,192; you typed 12345678", error
    _type_into(qtbot, pane.n_ctx, "4096")
    _type_into(qtbot, pane.k, "4")
    assert _shown_error(pane, "n_ctx") == _shown_error(pane, "k") == ""
    _type_into(qtbot, pane.temperature, "50")  # (a newcomer's "50" became 5.00, flagged as "got 5")
    assert pane.temperature.value() == 50 and "between 0 and 2" in _shown_error(pane, "temperature")
    assert _shown_error(pane, "temperature").endswith("; you typed 50")


def test_auto_can_be_typed_where_an_error_says_a_field_may_be_auto(pane, qtbot):
    """Newcomer trial: 5000 typed into Always kept said "Always kept must be auto or between 0 and 4,095 (below
    Context length); you typed 5000", but the field refused "auto" typed (only the arrows below 0 reached "auto
    (system prompt)"). A field with such a value takes its first word typed (any case), or its whole text."""
    from PySide6.QtCore import Qt

    pane, emitted, _summaries = pane
    _type_into(qtbot, pane.n_keep, "5000")
    assert _shown_error(pane, "n_keep") == (
        "Always kept must be auto or between 0 and 4,095 (below Context length); you typed 5000"
    )
    _type_into(qtbot, pane.n_keep, "aut")  # on the way: kept as typed, nothing refused
    assert pane.n_keep.lineEdit().text() == "aut" and not pane.n_keep.refused
    qtbot.keyClicks(pane.n_keep, "o")
    assert pane.n_keep.value() == -1 and _shown_error(pane, "n_keep") == ""
    qtbot.keyClick(pane.n_keep, Qt.Key.Key_Return)
    assert pane.n_keep.text() == "auto (system prompt)" and emitted[-1].generation.context.n_keep == "auto"
    _type_into(qtbot, pane.n_discard, "Auto")
    assert pane.n_discard.value() == -1 and emitted[-1].generation.context.n_discard == -1  # (auto: -1)
    _type_into(qtbot, pane.top_k, "off")  # Top-k's is "off"
    assert pane.top_k.value() == pane.top_k.minimum() and pane.top_k.text() == "off"
    pane.top_k.setValue(40)
    _type_into(qtbot, pane.top_k, "-1")  # off too, as the command line and the server take it (it became top-k 1)
    qtbot.keyClick(pane.top_k, Qt.Key.Key_Return)
    assert pane.top_k.value() == 0 and pane.top_k.text() == "off" and emitted[-1].generation.sampling.top_k == 0
    _type_into(qtbot, pane.n_keep, "Auto (System prompt)")  # its whole text, as shown
    assert pane.n_keep.lineEdit().text() == "Auto (System prompt)" and pane.n_keep.value() == -1
    _type_into(qtbot, pane.n_keep, "autox")  # no other word
    assert pane.n_keep.lineEdit().text() == "auto"
    _type_into(qtbot, pane.k, "a")  # a field with no such value takes no letters
    assert pane.k.lineEdit().text() == ""


def test_the_decoding_help_line_is_true_with_sampling_too(pane):
    """ "same text" holds for greedy replies only: sampled ones are as likely as plain decoding's, not the same."""
    from app.gui.widgets.settings_pane import DECODING_HELP

    pane, _emitted, _summaries = pane
    pane.decoding.setCurrentIndex(pane.decoding.findData(Decoding.PROMPT_LOOKUP.value))
    shown = pane._decoding_row.help.text()
    assert shown == DECODING_HELP[Decoding.PROMPT_LOOKUP] and "same text" not in shown
    assert "sampled" in pane.decoding.toolTip()


@pytest.mark.parametrize(
    "name,value,shown,widget",
    [("n_ctx", -5, 0, "n_ctx"), ("k", -3, 0, "k"), ("max_new_tokens", -7, 0, None)],
)
def test_a_stored_value_a_field_cannot_hold_is_said_as_the_file_holds_it(qtbot, name, value, shown, widget):
    """``"n_ctx": -5`` in settings.json: the spin box holds no -5 (it shows 0), so its error says the file's -5
    and what the field shows, never "got 0"; an edit of that field validates what it shows."""
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings().with_values(decoding="spec_lookup", **{name: value}), ["CPU"])
    pane.set_max_position_embeddings(8192)
    qtbot.addWidget(pane)
    pane.show()
    box = getattr(pane, widget) if widget else getattr(pane.sampling, name)
    assert box.value() == shown
    error = pane.errors()[name]
    assert f"the settings file holds {value}" in error and " 0" not in error, error
    assert _shown_error(pane, name).endswith(f"; the settings file holds {value} (the field shows {shown})")
    box.setValue(1)
    box.setValue(shown)  # the user chose what the field shows: that is what is checked now
    assert pane.errors()[name].endswith(f"; you typed {shown}")
    reset_to_defaults(pane)
    assert pane.errors() == {}


@pytest.mark.parametrize("width", [1000, 400])
@pytest.mark.parametrize("field,value", [("n_keep", 512), ("n_ctx", 5), ("top_p", 0.0), ("k", 17)])
def test_an_error_appearing_under_a_field_moves_no_field_unless_it_needs_more_lines(qtbot, field, value, width):
    """A newcomer typed an invalid n_keep: its error line pushed the fields below it down ~15 px, and a click aimed
    at the next field landed on another. The error takes its slot's room (the explanation's lines, or the line kept
    free under a field without one): one that fits there moves nothing. A longer one (a narrow pane) is wrapped
    whole (it was cut with "…", unreadable: test_field_errors_whole) and moves only the fields below it, by its extra
    lines."""
    from PySide6.QtWidgets import QLabel

    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings().with_values(n_ctx=512, decoding="spec_lookup"), ["CPU"])
    qtbot.addWidget(pane)
    pane.resize(width, 760)
    pane.show()
    pane.advanced.button.click()
    pane.sampling.more.show()
    qtbot.wait(50)  # (layouts settle in posted events)

    def geometry():
        return field_geometry(pane)

    before = geometry()
    assert field in before and len(before) >= 15
    error = pane.error_labels[field]
    room = error.height()  # the slot's lines
    original = getattr(pane, field).value()
    getattr(pane, field).setValue(value)
    qtbot.wait(50)
    assert error.isVisibleTo(pane) and error.text() and error.text() == error.toolTip()
    shown = error.shown_text()
    assert "…" not in shown and shown.replace("\n", " ") == error.text()  # whole, every word in order
    extra = error.height() - room
    assert (extra == 0) == (width == 1000) and extra % error.fontMetrics().lineSpacing() == 0
    top = before[field].bottom()
    moved = {name: rect.top() - before[name].top() for name, rect in geometry().items() if rect != before[name]}
    assert moved == {name: extra for name, rect in before.items() if rect.top() > top and extra}
    explanation = [label for label in error.parentWidget().findChildren(QLabel, "settingHelp")]
    assert not any(label.isVisibleTo(pane) for label in explanation)  # the error is said in the explanation's place
    getattr(pane, field).setValue(original)
    qtbot.wait(50)
    assert not error.isVisibleTo(pane) and all(label.isVisibleTo(pane) for label in explanation) and geometry() == before


@pytest.mark.parametrize("values,field", [
    ({"k": 99}, "k"), ({"n_ctx": 5}, "n_ctx"), ({"n_ctx": 512, "n_keep": 600}, "n_keep"),
    ({"n_ctx": 512, "n_discard": 600}, "n_discard"), ({"top_p": 0.0}, "top_p"), ({"temperature": 50.0}, "temperature"),
    ({"max_new_tokens": 0}, "max_new_tokens"), ({"repetition_penalty": 50.0}, "repetition_penalty"),
    ({"presence_penalty": 9.0}, "presence_penalty"),
])  # fmt: skip
def test_no_error_in_the_window_shows_interval_notation_or_a_field_term(pane, values, field):
    """A newcomer read "K (draft tokens per step) must be in [1, 16], got 99" and "n_ctx must be in [16, 8192]":
    under its field and in the composer's line, each error names fields by their labels and ranges in words."""
    import re

    pane, _emitted, summaries = pane
    pane.decoding.setCurrentIndex(pane.decoding.findData(Decoding.PROMPT_LOOKUP.value))
    for name, value in values.items():
        box = getattr(pane, name, None) or getattr(pane.sampling, name)
        box.setValue(value)
    shown = _shown_error(pane, field)
    assert shown.startswith(short_label(pane._plain_names[field]) + " must be "), shown
    for text in (shown, summaries[-1]):
        assert not re.search(r"[\[(]-?\d[^)\]]*, |>=|<=|\bgot\b", text), text  # no "[1, 16]", "(0, 1]", ">= 1", "got"
        assert not re.search(r"\b(n_ctx|n_keep|n_discard|max_new_tokens|top_p|top_k|repetition_penalty|presence_penalty)\b", text), text
    assert re.search(rf"; you typed {values[field]:g}(\.0)?$", shown), shown


def test_longest_reply_and_top_k_are_bounded_and_digits_refused_are_said(pane, qtbot):
    """Newcomer trial: Longest reply took 999999999 (months of decoding), top-k 999999999 without a word, and
    99999999999 typed into Context length read "you typed 999999999" (the field had dropped two digits)."""
    pane, _emitted, summaries = pane
    _type_into(qtbot, pane.sampling.max_new_tokens, "999999999")
    assert _shown_error(pane, "max_new_tokens") == "Longest reply (tokens) must be between 1 and 131,072; you typed 999999999"
    assert summaries[-1].startswith("Fix the settings first: Longest reply (tokens)")
    _type_into(qtbot, pane.sampling.max_new_tokens, "131072")
    assert _shown_error(pane, "max_new_tokens") == ""
    pane.sampling.more.show()
    _type_into(qtbot, pane.sampling.top_k, "999999999")
    assert _shown_error(pane, "top_k") == (
        "Candidates (top-k) must be between 0 and 262,144 (0 or -1 = off; so is a k of the vocabulary's size or more); "
        "you typed 999999999"
    )
    _type_into(qtbot, pane.sampling.top_k, "40")
    _type_into(qtbot, pane.n_ctx, "99999999999")
    assert pane.n_ctx.value() == 999_999_999
    assert _shown_error(pane, "n_ctx") == (
        "Context length must be between 16 and 8,192; you typed more digits than the field holds (it holds 999999999)"
    )
    _type_into(qtbot, pane.n_ctx, "4096")
    assert _shown_error(pane, "n_ctx") == "" and summaries[-1] == ""


def test_an_invalid_value_from_the_settings_file_is_not_said_as_typed(qtbot):
    """Newcomer trial: "max_new_tokens": 99999999 in settings.json read "you typed 99999999": the user typed
    nothing. It says the file holds it, until the user edits the field."""
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings().with_values(max_new_tokens=99_999_999), ["CPU"])
    qtbot.addWidget(pane)
    pane.show()
    assert pane.sampling.max_new_tokens.value() == 99_999_999
    assert _shown_error(pane, "max_new_tokens") == (
        "Longest reply (tokens) must be between 1 and 131,072; the settings file holds 99999999"
    )
    _type_into(qtbot, pane.sampling.max_new_tokens, "99999998")
    assert _shown_error(pane, "max_new_tokens").endswith("; you typed 99999998")


@pytest.mark.parametrize("field,typed", [("n_ctx", "123456789012"), ("max_new_tokens", "987654321098")])
def test_digits_refused_are_never_quoted_as_a_number_the_user_did_not_type(pane, qtbot, field, typed):
    """Newcomer trial: 123456789012 typed into Context length, then Tab, read "the field refused 12345678902 (too
    many digits) and holds 1234567890": the digits kept and only the last one refused, a number never typed. The
    error says the field holds fewer digits than were typed, and what it holds, not a number of its own making."""
    from PySide6.QtCore import Qt

    pane, _emitted, summaries = pane
    box = pane.fields[field]
    _type_into(qtbot, box, typed)
    qtbot.keyClick(box, Qt.Key.Key_Tab)
    held = str(box.value())
    assert typed.startswith(held) and len(held) < len(typed)
    shown = _shown_error(pane, field)
    assert shown.endswith(f"; you typed more digits than the field holds (it holds {held})"), shown
    assert " must be between " in shown and summaries[-1] == f"Fix the settings first: {shown}"
    numbers = re.findall(r"\d{5,}", shown.rpartition(";")[2])
    assert numbers == [held]  # no other long number: none the user did not type
    _type_into(qtbot, box, "512")
    assert _shown_error(pane, field) == ""


@pytest.mark.parametrize("field,typed,held", [("temperature", "99999999", "999"), ("top_p", "9999999999999", "999")])
def test_digits_a_decimal_field_refused_are_said(pane, qtbot, field, typed, held):
    """Trial: 99999999 typed into Randomness showed "999" and the error "you typed 999" (top-p the same with
    9999999999999): the field had dropped the digits past its 999.99 without a word. As in a whole-number field, the
    error says it held fewer digits than were typed, and what it holds."""
    pane, _emitted, summaries = pane
    box = pane.fields[field]
    _type_into(qtbot, box, typed)
    shown = _shown_error(pane, field)
    assert box.text() == held and shown.endswith(f"; you typed more digits than the field holds (it holds {held})"), shown
    assert " must be " in shown and summaries[-1] == f"Fix the settings first: {shown}"
    _type_into(qtbot, box, "0.5")
    assert not box.refused and _shown_error(pane, field) == ""


def test_an_emptied_number_field_says_so_and_leaving_it_puts_back_its_last_valid_value(pane, qtbot):
    """Newcomer trial: 5 typed into Context length, then the field cleared, still read "you typed 5", and Tab put
    5 back, an invalid value, where 4096 was the last valid one. An empty field says it is empty; leaving it (Tab,
    Return) puts back the last valid value; a number typed out of range stays with its error, as in every field."""
    from PySide6.QtCore import Qt

    pane, emitted, summaries = pane
    _type_into(qtbot, pane.n_ctx, "5")
    assert _shown_error(pane, "n_ctx") == "Context length must be between 16 and 8,192; you typed 5"
    _type_into(qtbot, pane.n_ctx, "")
    shown = _shown_error(pane, "n_ctx")
    assert shown == "Context length is empty: type a number, or leave the field to put back 4096", shown
    assert summaries[-1] == f"Fix the settings first: {shown}"
    qtbot.keyClick(pane.n_ctx, Qt.Key.Key_Tab)
    assert (pane.n_ctx.text(), pane.n_ctx.value(), _shown_error(pane, "n_ctx")) == ("4096", 4096, "")
    assert summaries[-1] == "" and pane.errors() == {} and pane.current().value("n_ctx") == 4096
    _type_into(qtbot, pane.n_ctx, "5")  # typed out of range and left: kept with its error
    qtbot.keyClick(pane.n_ctx, Qt.Key.Key_Tab)
    assert pane.n_ctx.text() == "5" and _shown_error(pane, "n_ctx").endswith("; you typed 5")
    _type_into(qtbot, pane.n_ctx, "2048")
    _type_into(qtbot, pane.sampling.max_new_tokens, "")  # Return leaves it too
    assert _shown_error(pane, "max_new_tokens").startswith("Longest reply (tokens) is empty: ")
    qtbot.keyClick(pane.sampling.max_new_tokens, Qt.Key.Key_Return)
    assert pane.sampling.max_new_tokens.value() == AppSettings().value("max_new_tokens")
    assert _shown_error(pane, "max_new_tokens") == "" and emitted[-1].generation.context.n_ctx == 2048
    pane.advanced.show()
    _type_into(qtbot, pane.n_keep, "auto")
    _type_into(qtbot, pane.n_keep, "")  # a field whose last valid value is its word
    assert _shown_error(pane, "n_keep").endswith("leave the field to put back auto (system prompt)")
    qtbot.keyClick(pane.n_keep, Qt.Key.Key_Tab)
    assert pane.n_keep.text() == "auto (system prompt)" and _shown_error(pane, "n_keep") == ""


def test_an_emptied_decimal_field_says_so_and_leaving_it_puts_back_its_last_valid_value(pane, qtbot):
    """As a whole-number field (above): a cleared Randomness field read "you typed 5" after 5 was typed, and Tab
    put 5.00 back."""
    from PySide6.QtCore import Qt

    pane, _emitted, _summaries = pane
    last_valid = pane.temperature.textFromValue(AppSettings().value("temperature"))
    _type_into(qtbot, pane.temperature, "5")
    assert _shown_error(pane, "temperature").endswith("; you typed 5")
    _type_into(qtbot, pane.temperature, "")
    shown = _shown_error(pane, "temperature")
    assert shown == f"Randomness (temperature) is empty: type a number, or leave the field to put back {last_valid}"
    qtbot.keyClick(pane.temperature, Qt.Key.Key_Tab)
    assert (pane.temperature.text(), _shown_error(pane, "temperature"), pane.errors()) == (last_valid, "", {})


def test_a_decimal_past_the_fields_two_is_said_without_blocking(pane, qtbot):
    """Newcomer trial: 0.955 typed into top-p kept 0.95 without a word (the field holds two decimals and refused the
    third keystroke). The field says so under it, marked, without blocking Send (0.95 is a valid top-p), until its
    value changes."""
    from PySide6.QtCore import Qt

    pane, emitted, summaries = pane
    _type_into(qtbot, pane.top_p, "0.955")
    shown = _shown_error(pane, "top_p")
    assert pane.top_p.text() == "0.95" and pane.top_p.property("invalid")
    assert shown == "Likely words only (top-p) takes at most 2 decimals; you typed more digits than the field holds (it holds 0.95)", shown
    assert pane.errors() == {} and summaries[-1] == "" and emitted[-1].value("top_p") == 0.95
    qtbot.keyClick(pane.top_p, Qt.Key.Key_Tab)
    assert _shown_error(pane, "top_p") == shown  # (still true once the field is left)
    _type_into(qtbot, pane.top_p, "0.9")
    assert _shown_error(pane, "top_p") == "" and not pane.top_p.property("invalid")
    _type_into(qtbot, pane.temperature, "1.234")
    assert _shown_error(pane, "temperature").endswith("takes at most 2 decimals; you typed more digits than the field holds (it holds 1.23)")


def test_a_decimal_field_quotes_the_number_as_typed(pane, qtbot):
    """Newcomer trial: with Greedy ticked, 0 typed into top-p read "you typed 0.0" (the engine's float): the error
    quotes the number as the user typed it."""
    from PySide6.QtCore import Qt

    pane, _emitted, _summaries = pane
    pane.sampling.greedy.setChecked(True)
    _type_into(qtbot, pane.top_p, "0")
    qtbot.keyClick(pane.top_p, Qt.Key.Key_Tab)
    assert _shown_error(pane, "top_p").endswith("; you typed 0"), _shown_error(pane, "top_p")
    _type_into(qtbot, pane.temperature, "50")
    assert _shown_error(pane, "temperature").endswith("; you typed 50")


def test_the_seed_error_says_what_was_typed_and_ranges_have_thousands_separators(pane, qtbot):
    """Newcomer trial: the Seed error alone said nothing of what was typed, and ranges read "8192" and "262144"
    where the window writes "4,096" elsewhere."""
    pane, _emitted, _summaries = pane
    pane.sampling.more.show()
    pane.seed.setText("abc")
    assert _shown_error(pane, "seed") == (
        "Seed must be a whole number at least 0 and below 2^63, or empty or -1 for a random seed; you typed 'abc'"
    )
    pane.seed.setText(" -5 ")
    assert _shown_error(pane, "seed").endswith("random seed; you typed -5")
    pane.n_ctx.setValue(9000)
    assert _shown_error(pane, "n_ctx") == "Context length must be between 16 and 8,192; you typed 9000"
    pane.top_k.setValue(999_999)
    assert _shown_error(pane, "top_k").startswith("Candidates (top-k) must be between 0 and 262,144 (0 or -1 = off")
