"""The sampling controls of the settings pane: preset, greedy toggle, temperature, top-p, top-k, penalties, seed,
stop strings and reply length.

A preset (``app.gui.sampling_presets``) fills the values it holds; editing one of them by hand makes the preset
"Custom". ``MODEL_DEFAULT`` follows the loaded model (``set_model_defaults``). With a settings store, the user's
presets are saved there (Save as..., Delete) and each conversation remembers the preset last chosen in it, or the
values last edited by hand in it (``set_conversation``). The group does not validate: the settings pane does, for every field by its flat name
(``fields``, ``error_labels``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QToolButton,
    QWidget,
)

from inference.settings import MAX_PRESENCE_FREQUENCY_PENALTY, MAX_REPETITION_PENALTY

from ..sampling_presets import BUILTIN_PRESETS, MODEL_DEFAULT, PRESET_KEYS, model_default
from ..settings_store import AppSettings, SettingsStore
from ..theme import GROUP_MARGINS
from .elided_combo import ElidedComboBox
from .fold import Fold
from .number_box import DecimalBox, NumberBox
from .setting_row import FieldError, add_setting

#: Upper end of the token-count spin boxes: the largest they hold (a number typed past a setting's range is kept
#: and flagged with the range, never cut).
BIG = 2**31 - 1
#: The largest number a decimal field holds: three digits before the point, so that "50" typed into temperature
#: stays 50 and is flagged with its range (a field that stopped at 20 kept "5" of it without a word).
TYPED_MAX = 999.99
#: The fields folded under "Penalties, top-k, seed, stop strings" (``SamplingGroup.more``).
MORE_FIELDS = ("top_k", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop_strings")
#: The preset combo's entry while the values match no preset.
CUSTOM = "Custom"
#: Temperature the Greedy toggle restores when it is switched off and no other was shown before.
SAMPLED_TEMPERATURE = 0.7


class SamplingGroup(QGroupBox):
    """The "Sampling" group box.

    Args:
        store: where user presets and each conversation's preset (or Custom values) persist; None keeps only the shipped presets.

    Signals:
        edited(): a value or the preset changed (the pane re-reads :meth:`values`).

    Attributes:
        fields / error_labels: flat setting name -> input widget / its error label (merged into the pane's).
    """

    edited = Signal()

    def __init__(self, store: SettingsStore | None = None, parent=None):
        super().__init__("Sampling", parent)
        self._store = store
        self._model_default = model_default(None)
        self._preset = MODEL_DEFAULT
        self._left_preset = ""  # the preset a hand edit made Custom: chosen again when its values come back
        self._conversation: int | None = None
        self._loading = False
        self._sampled_temperature = SAMPLED_TEMPERATURE
        self.fields: dict[str, QWidget] = {}
        self.error_labels: dict[str, QLabel] = {}
        self.labels: dict[str, str] = {}  # field name -> its label ("Likely words only (top-p)")
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        form.setContentsMargins(*GROUP_MARGINS)  # spacing and margins as the pane's other groups
        form.setVerticalSpacing(2)

        self.preset = ElidedComboBox()
        self.preset.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset.setMinimumContentsLength(6)  # long preset names are elided, not widening the pane
        self.preset.setObjectName("setting_sampling_preset")
        self.preset.setAccessibleName("Sampling preset")
        self.preset.setToolTip(
            f"{MODEL_DEFAULT}: what the model recommends (its generation_config.json), the rest temperature 0.7, "
            "top-p 0.9, repetition penalty 1.1. "
            "Precise: greedy, repetition penalty 1.1. Balanced: 0.7, top-p 0.9, repetition penalty 1.1. "
            "Creative: 1.0, top-p 0.95"
        )
        # why a preset was not saved or deleted, beside the preset (which gives it half the row), cut to one line and
        # whole in its tooltip: a line of its own would move the fields below, or push the pane past 1366x768
        self.preset_note = FieldError()
        self.preset_note.setVisible(False)
        preset_row = QWidget()
        row_layout = QHBoxLayout(preset_row)
        row_layout.setContentsMargins(0, 0, 0, 0)
        row_layout.addWidget(self.preset, 1)
        row_layout.addWidget(self.preset_note, 1)
        preset_label = QLabel("Preset")
        preset_label.setBuddy(self.preset)
        form.addRow(preset_label, preset_row)
        self.greedy = QCheckBox("Greedy: likeliest word")
        self.greedy.setObjectName("setting_greedy")
        self.greedy.setToolTip("Temperature 0: the same reply every time, and the Compare button checks identity")
        self.save_button = QToolButton()  # compact: the row fits the pane's narrowest width
        self.save_button.setText("Save as…")
        self.save_button.setToolTip("Save the values shown as a new preset")
        self.save_button.setAccessibleName("Save the values as a preset")
        self.save_button.clicked.connect(lambda: asyncio.ensure_future(self.ask_preset_name()))
        self.delete_button = QToolButton()
        self.delete_button.setText("Delete")
        self.delete_button.setToolTip("Delete this preset (the shipped ones stay)")
        self.delete_button.setAccessibleName("Delete this preset")
        self.delete_button.clicked.connect(lambda: self.delete_preset(self._preset))
        greedy_row = QWidget()
        greedy_layout = QHBoxLayout(greedy_row)
        greedy_layout.setContentsMargins(0, 0, 0, 0)
        greedy_layout.addWidget(self.greedy)
        greedy_layout.addStretch(1)
        greedy_layout.addWidget(self.save_button)
        greedy_layout.addWidget(self.delete_button)
        form.addRow(greedy_row)

        self.temperature = self._double(
            form, "temperature", "Randomness (temperature)", TYPED_MAX, 0.1,
            "Temperature: 0 = greedy (always the most likely token); 0.7 is a common chat value",
            help_text="0: always the likeliest word; higher: more varied.",
        )  # fmt: skip
        self.top_p = self._double(
            form, "top_p", "Likely words only (top-p)", TYPED_MAX, 0.05,
            "Top-p (nucleus sampling): only the most likely tokens that make up this share, in (0, 1]; 1 = off",
        )  # fmt: skip
        self.max_new_tokens = NumberBox()
        self.max_new_tokens.setRange(0, BIG)
        self.max_new_tokens.setSingleStep(64)
        self._row(
            form, "max_new_tokens", "Longest reply (tokens)", self.max_new_tokens,
            "Max new tokens: a reply stops at this many tokens (about 3/4 of a word each); Continue writes more of "
            "a reply from a model on this computer (a remote server's: raise this, then Regenerate)",
        )  # fmt: skip

        # Folded by default, so that the pane fits a 1366x768 screen; a flagged field unfolds them (SettingsPane).
        self.more = Fold(
            "moreSampling", "Penalties, top-k, seed, stop strings",
            "Repetition, presence and frequency penalties, top-k, the seed and stop strings",
        )  # fmt: skip
        self.more.add_to(form)
        more = self.more.form
        self.top_k = NumberBox()
        self.top_k.setRange(0, BIG)
        self.top_k.setSpecialValueText("off")
        self.top_k.minimum_alias = "-1"  # off, as the command line and the server take it
        self._row(more, "top_k", "Candidates (top-k)", self.top_k, "Top-k: only the k most likely tokens; 0 (or -1) = off, as is a k of the vocabulary's size or more")
        self.repetition_penalty = self._double(
            more, "repetition_penalty", "Repetition penalty", 10 * MAX_REPETITION_PENALTY, 0.05,
            "Makes words already used less likely: tokens seen in the last 64 tokens (prompt included); 1 = off, 1.1 is common",
        )
        bound = MAX_PRESENCE_FREQUENCY_PENALTY
        self.presence_penalty = self._double(
            more, "presence_penalty", "Presence penalty", 10 * bound, 0.1,
            f"Lowers every token the reply already used, once (OpenAI's definition); -{bound:g} to {bound:g}, 0 = off",
            minimum=-10 * bound,
        )
        self.frequency_penalty = self._double(
            more, "frequency_penalty", "Frequency penalty", 10 * bound, 0.1,
            f"Lowers a token once per use in the reply (OpenAI's definition); -{bound:g} to {bound:g}, 0 = off",
            minimum=-10 * bound,
        )
        self.seed = QLineEdit()
        self.seed.setPlaceholderText("random")
        self._row(more, "seed", "Seed", self.seed, "Same seed and settings give the same reply; empty or -1 = random")
        self.stop_strings = QPlainTextEdit()
        self.stop_strings.setPlaceholderText("one per line")
        self.stop_strings.setTabChangesFocus(True)
        self.stop_strings.setFixedHeight(self.stop_strings.fontMetrics().lineSpacing() * 3 + 12)
        self._row(more, "stop_strings", "Stop at (stop strings)", self.stop_strings,
                  "The reply ends before the first of these texts, one per line")

        self._fill_presets()
        self.preset.activated.connect(lambda index: self.choose_preset(self.preset.itemData(index)))
        self.greedy.toggled.connect(self._greedy_toggled)
        for name in PRESET_KEYS:
            widget = getattr(self, name)
            widget.valueChanged.connect(self._value_edited)
        self.seed.textChanged.connect(self._changed)
        self.stop_strings.textChanged.connect(self._changed)
        self.max_new_tokens.valueChanged.connect(self._changed)

    # --- building ---------------------------------------------------------------------------------

    def _double(self, form: QFormLayout, name: str, label: str, maximum: float, step: float, tip: str,
                minimum: float = 0.0, help_text: str = "") -> DecimalBox:
        box = DecimalBox()
        box.setRange(minimum, maximum)  # past the valid range: a value out of it is flagged, not clamped
        box.setDecimals(2)
        box.setSingleStep(step)
        self._row(form, name, label, box, tip, help_text)
        return box

    def _row(self, form: QFormLayout, name: str, label: str, widget: QWidget, tip: str, help_text: str = "") -> None:
        row = add_setting(form, name, label, widget, tip, help_text)
        self.labels[name] = label
        self.fields[name] = row.field
        self.error_labels[name] = row.error

    def _presets(self) -> dict[str, dict[str, Any]]:
        """Every preset by name: the model's, the shipped ones, the user's."""
        user = self._store.presets if self._store is not None else {}
        return {MODEL_DEFAULT: self._model_default, **BUILTIN_PRESETS, **user}

    def _fill_presets(self) -> None:
        self.preset.blockSignals(True)
        self.preset.clear()
        for name in self._presets():
            self.preset.addItem(name, name)
        if not self._preset:
            self.preset.addItem(CUSTOM, "")
        self.preset.setCurrentIndex(max(self.preset.findData(self._preset), 0))
        self.preset.blockSignals(False)
        self.delete_button.setEnabled(self._store is not None and self._preset in self._store.presets)

    # --- data -------------------------------------------------------------------------------------

    @property
    def preset_name(self) -> str:
        """The preset the values come from, "" when edited by hand."""
        return self._preset

    def show_settings(self, settings: AppSettings) -> None:
        """Show these settings; under ``MODEL_DEFAULT`` the values are the loaded model's recommendation."""
        preset = settings.sampling_preset if settings.sampling_preset in self._presets() else ""
        values = self._presets()[preset] if preset == MODEL_DEFAULT else {k: settings.value(k) for k in PRESET_KEYS}
        self._loading = True
        try:
            self._preset, self._left_preset = preset, ""
            self._set_values(values)
            seed = settings.value("seed")
            self.seed.setText("" if seed is None else str(seed))
            self.stop_strings.setPlainText("\n".join(settings.value("stop_strings")))
            self.max_new_tokens.setValue(settings.value("max_new_tokens"))
        finally:
            self._loading = False
        self._fill_presets()

    def values(self) -> dict[str, Any]:
        """The values shown by flat setting name (seed excluded: the pane parses and checks it)."""
        values = {name: round(getattr(self, name).value(), 4) for name in PRESET_KEYS}
        values["top_k"] = int(values["top_k"])
        lines = self.stop_strings.toPlainText().split("\n")
        values["stop_strings"] = tuple(line for line in lines if line)
        values["max_new_tokens"] = self.max_new_tokens.value()
        values["sampling_preset"] = self._preset
        return values

    def set_model_defaults(self, values: dict[str, Any]) -> None:
        """The loaded model's ``MODEL_DEFAULT`` values (``sampling_presets.model_default``); shown at once while
        that preset is chosen."""
        self._model_default = dict(values)
        shown = {name: round(getattr(self, name).value(), 4) for name in PRESET_KEYS}
        if self._preset == MODEL_DEFAULT and shown != self._model_default:  # an unchanged value is not an edit
            self.choose_preset(MODEL_DEFAULT, remember=False)

    def set_conversation(self, conversation_id: int | None) -> None:
        """The conversation on screen: its remembered preset (if any, and still existing) is chosen, or its values
        edited by hand are shown, as Custom."""
        self._conversation = conversation_id
        chosen = self._store.conversation_preset(conversation_id) if self._store and conversation_id is not None else None
        if isinstance(chosen, dict) and (self._preset or not self._shows(chosen)):
            self._loading = True
            try:
                self._preset, self._left_preset = "", ""
                self._set_values(chosen)
            finally:
                self._loading = False
            self._fill_presets()
            self.edited.emit()
        elif isinstance(chosen, str) and chosen in self._presets() and chosen != self._preset:
            self.choose_preset(chosen, remember=False)

    def adopt_conversation(self, conversation_id: int) -> None:
        """A new chat was just saved as ``conversation_id``: it keeps the preset chosen, or the values edited by
        hand, while it had no id yet."""
        self._conversation = conversation_id
        if self._store is not None:
            self._persist(lambda: self._store.set_conversation_preset(conversation_id, self._remembered()))

    def _remembered(self) -> str | dict[str, Any]:
        """What the conversation on screen remembers: the preset's name, or the values shown when edited by hand."""
        return self._preset or {name: self.values()[name] for name in PRESET_KEYS}

    def choose_preset(self, name: str, remember: bool = True) -> None:
        """Show a preset's values (an unknown name, or "", changes nothing); with ``remember``, the conversation
        on screen keeps this choice."""
        presets = self._presets()
        if name not in presets:
            return
        self._loading = True
        try:
            self._preset = name
            self._set_values(presets[name])
        finally:
            self._loading = False
        self._fill_presets()
        if remember and self._store is not None and self._conversation is not None:
            self._persist(lambda: self._store.set_conversation_preset(self._conversation, name))
        self.edited.emit()

    def save_preset(self, name: str) -> str | None:
        """Save the values shown as a user preset and choose it; returns an error message instead when the name
        is empty or taken by a shipped preset."""
        name = name.strip()
        if not name:
            return "a preset needs a name"
        if name in BUILTIN_PRESETS or name in (MODEL_DEFAULT, CUSTOM):
            return f"{name!r} is a shipped preset: choose another name"
        if self._store is None:
            return "presets cannot be saved here"
        error = self._persist(lambda: self._store.save_preset(name, {k: self.values()[k] for k in PRESET_KEYS}))
        if error is None:
            self.choose_preset(name)
        return error

    def delete_preset(self, name: str) -> None:
        """Delete a user preset (shipped ones stay); the values shown stay, as "Custom", and the conversations that
        had chosen it show ``MODEL_DEFAULT`` when opened again (``SettingsStore.delete_preset``)."""
        if self._store is None or name not in self._store.presets:
            return
        if self._persist(lambda: self._store.delete_preset(name)) is not None:
            return
        if self._preset == name:
            self._preset = ""
        self._fill_presets()
        self.edited.emit()

    async def ask_preset_name(self) -> None:
        """Ask for a name and save the values shown under it (the answer is awaited: no nested event loop)."""
        dialog = QInputDialog(self)
        dialog.setObjectName("presetNameDialog")
        dialog.setWindowTitle("Save sampling preset")
        dialog.setLabelText("Name of the new preset:")
        dialog.setWindowModality(Qt.WindowModality.WindowModal)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        dialog.finished.connect(lambda result: future.done() or future.set_result((result, dialog.textValue())))
        dialog.open()
        result, text = await future
        if result:
            error = self.save_preset(text)
            self._note(f"Preset not saved: {error}" if error else "")

    def _persist(self, write) -> str | None:
        """Run a store write; on failure show why (the values shown stay) and return the message."""
        try:
            write()
        except OSError as error:
            message = f"could not write {self._store.path}: {error}"
            self._note(message)
            return message
        self._note("")
        return None

    def _note(self, text: str) -> None:
        self.preset_note.setText(text)
        self.preset_note.setVisible(bool(text))

    # --- editing ----------------------------------------------------------------------------------

    def _set_values(self, values: dict[str, Any]) -> None:
        for name in PRESET_KEYS:
            getattr(self, name).setValue(values[name])
        self.greedy.setChecked(values["temperature"] == 0)

    def _value_edited(self, *_args) -> None:
        if self._loading:
            return
        if self.temperature.value() > 0:
            self._sampled_temperature = self.temperature.value()
        self._loading = True
        self.greedy.setChecked(self.temperature.value() == 0)
        self._loading = False
        if self._preset:
            self._left_preset, self._preset = self._preset, ""
            self._fill_presets()
        elif self._left_preset in self._presets() and self._shows(self._presets()[self._left_preset]):
            # back to the values of the preset edited away from (Greedy ticked and unticked): it is chosen again
            # (newcomer trial: the preset stayed "Custom"), and the conversation remembers it again
            self._preset = self._left_preset
            self._fill_presets()
        if self._store is not None and self._conversation is not None:  # saved with the settings the edit changes
            self._store.set_conversation_preset(self._conversation, self._remembered(), write=False)
        self.edited.emit()

    def _shows(self, preset: dict[str, Any]) -> bool:
        """Whether the fields show ``preset``'s values (as ``values`` rounds them)."""
        return all(round(getattr(self, name).value(), 4) == round(preset[name], 4) for name in PRESET_KEYS)

    def _greedy_toggled(self, checked: bool) -> None:
        if self._loading:
            return
        if not checked and self.temperature.value() > 0:
            return
        if checked and self.temperature.value() > 0:
            self._sampled_temperature = self.temperature.value()
        self.temperature.setValue(0.0 if checked else self._sampled_temperature)

    def _changed(self, *_args) -> None:
        if not self._loading:
            self.edited.emit()
