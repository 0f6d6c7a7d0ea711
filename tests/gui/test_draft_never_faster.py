"""A draft that can never be faster, the target's own model at as many bits or more (newcomer trial: the default
model's 8-bit copy was offered to draft for its 4-bit copy, the same weights at twice the size), is never
preselected and is marked as such in the draft list, its entry and its tooltip."""

from __future__ import annotations

from app.gui.model_choice import draft_choices, never_faster
from app.gui.settings_store import AppSettings
from app.gui.widgets.settings_pane import NEVER_FASTER_MARK, NEVER_FASTER_TIP, SettingsPane
from inference.models.manifest import DRAFT_HEAD_KIND, ModelManifest

FINGERPRINT = "a" * 64


def _model(tmp_path, folder: str, name: str, bits: int | None, size: int, kind: str = "") -> ModelManifest:
    return ModelManifest(name=name, bits=bits, size_bytes=size, tokenizer_fingerprint=FINGERPRINT,
                         path=tmp_path / folder, kind=kind)  # fmt: skip


def test_the_targets_own_model_at_more_bits_is_offered_last_and_never_preselected(tmp_path):
    target = _model(tmp_path, "smol-int4", "Smol", 4, 90)
    int8 = _model(tmp_path, "smol-int8", "Smol", 8, 150)
    int16 = _model(tmp_path, "smol-fp16", "Smol", 16, 270)
    other = _model(tmp_path, "other", "Other", 4, 200)  # another model with the same tokenizer: larger, yet useful
    head = _model(tmp_path, "smol-head", "Smol", 16, 20, kind=DRAFT_HEAD_KIND)  # (a head may share the name)
    assert [never_faster(target, m) for m in (int8, int16, other)] == [True, True, False]
    assert never_faster(target, _model(tmp_path, "smol-copy", "Smol", 4, 90))  # a second 4-bit copy: the same
    assert not never_faster(int16, target) and not never_faster(int8, target)  # fewer bits: smaller, can be faster
    assert not never_faster(target, _model(tmp_path, "unknown", "Smol", None, 10))  # unknown bits: not judged
    drafts, preselected = draft_choices(target, [target, int8, int16, other])
    assert [m.store_name for m in drafts] == ["other", "smol-int8", "smol-fp16"]
    assert preselected == str(other.path)  # not the smaller 8-bit copy of the target itself
    assert draft_choices(target, [target, int8]) == ([int8], "")  # nothing useful to preselect
    assert head.is_draft_head and not never_faster(target, head)  # a head drafts for its model: never its weights


def test_the_draft_list_marks_a_draft_that_is_never_faster(qtbot, tmp_path):
    from app.gui.application import create_application

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    target, int8 = _model(tmp_path, "smol-int4", "Smol", 4, 90), _model(tmp_path, "smol-int8", "Smol", 8, 150)
    other = _model(tmp_path, "other", "Other", 4, 200)
    drafts, preselected = draft_choices(target, [target, int8, other])
    pane.set_models(drafts, preselected, {str(m.path) for m in drafts if never_faster(target, m)})
    combo = pane.draft_model
    marked = combo.itemText(combo.findData(str(int8.path)))
    assert marked.startswith("Smol · 8-bit") and marked.endswith(NEVER_FASTER_MARK)
    assert combo.itemData(combo.findData(str(int8.path)), 3) == NEVER_FASTER_TIP  # Qt.ToolTipRole
    assert NEVER_FASTER_MARK not in combo.itemText(combo.findData(str(other.path)))
    combo.setCurrentIndex(combo.findData(str(int8.path)))  # chosen anyway: the box's tooltip says why it is slow
    assert NEVER_FASTER_TIP in combo.toolTip()


def test_the_window_marks_the_default_models_8_bit_copy_for_its_4_bit_target(make_window, int8_dir):
    window = make_window(start=False)
    combo = window.settings_pane.draft_model
    index = combo.findData(str(int8_dir))
    assert window.choice.settings.bits == 4 and index >= 0
    assert combo.itemText(index).endswith(NEVER_FASTER_MARK)
