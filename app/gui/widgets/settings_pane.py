"""The settings pane: devices, decoding mode, draft model, K, rolling context, bit-width and sampling.

Why one module of ~900 lines: it is one form, :class:`SettingsPane` (about 640 of them), whose fields, their
in-place errors, what blocks Send or Compare and which edits reload the model all read and write the same
``fields``/``error_labels`` and one ``AppSettings``; splitting its sections into modules would scatter that one
form's state. The ~130 lines above it are its fields' words and choices (labels, help lines, tooltips, the
bit-widths and precisions offered), which the tests read too; the two module functions are the words its errors
and precisions are shown in elsewhere.

It fits a 1366x768 screen under the live graph without scrolling: the number fields are no wider than their
numbers, and the precision and draft-device fields, which few change, are folded away.

Every edit is checked at once with the engine's validation (``AppSettings.field_errors``); an invalid value is
flagged next to its field with the allowed range, and the settings stay invalid (sending is blocked) until it is
fixed, so bad settings never reach the engine. Only what a run uses blocks it: K is used only by the decodings that
draft a fixed K (``GenerationSettings.uses_fixed_k``): an invalid K blocks Send under those only, and Compare only
where its speculative run is one of them; under Auto, Adaptive or Plain it is flagged without blocking. A decimal typed past a decimal field's own (0.955 into
top-p, which holds 0.95) is said under the field without blocking. Valid settings are emitted with
:attr:`SettingsPane.settings_changed`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEvent, QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from inference.draft_head import HEAD_K, is_head_folder
from inference.model import REQUIRED_FILES
from inference.models.store import ModelManifest, model_labels, models_dir
from inference.precision import NumericPrecision
from inference.settings import AUTO_LABEL, MAX_K, MIN_N_CTX, Decoding, SpeculativeSettings

from ..settings_store import GENERATION_KEYS, RANDOM_SEED, AppSettings, SettingsStore
from ..theme import GROUP_MARGINS, GROUP_SPACING
from .dialogs import choose_file
from .elided_combo import ElidedComboBox
from .fold import Fold
from .number_box import DecimalBox, EmptyAware, NumberBox, RefusalAware
from .sampling_group import MORE_FIELDS, SamplingGroup
from .setting_row import SettingRow, add_setting
from .setting_words import in_words
from .wheel_guard import guard_wheel
from .wrapped_label import WrappedLabel

BIT_WIDTHS = {4: "4-bit (INT4)", 8: "8-bit (INT8)", 16: "16-bit (FP16)"}
#: The Weights (bits) row's line and tooltip. The default model's download is 4-bit (SmolLM2's Q4_1 release); its 8-
#: and 16-bit copies are re-encodings of those weights (``inference.models.default_model``), so they are larger and
#: slower and no more accurate (perplexity 9.958 for both 4 and 16 bits, README); the download itself is slightly less
#: accurate than the model as trained at 16 bits (a newcomer read "as accurate as the original" as "as the trained
#: model").
BITS_HELP = "4-bit: smallest, fastest; 8/16-bit are no more accurate."
BITS_TIP = (
    "Bit-width of the default model's weights. The download is 4-bit: the smallest and fastest, slightly less "
    "accurate than the model as trained at 16 bits. The 8- and 16-bit copies are built from it once (a minute or "
    "two): larger and slower, and no more accurate, since they hold the same 4-bit weights"
)
#: Upper end of the spin boxes: the largest they hold, so that a number typed past a setting's range is kept and
#: flagged with the range (a lower end cut "99" to "9" and an 8-digit length to 6 digits without a word).
BIG = 2**31 - 1
#: Fields whose change needs a model reload.
RELOAD_FIELDS = ("target_device", "bits", "precision", "kv_cache_precision", "decoding", "draft_model", "draft_device")
PRECISIONS = {
    "auto": "Auto (exact decode)",
    "f32": "f32 (exact prefill too)",
    "bf16": "bf16 (fast prefill, not exact)",
    "f16": "f16",
}
KV_PRECISIONS = {"auto": "Auto", "f32": "f32", "f16": "f16", "u8": "u8 (smallest)"}
#: Fields folded under "Advanced".
#: The line under Decoding, for each decoding. Auto's is its own: it takes a plain step (K 0) wherever guessing does
#: not pay, so "Speculative: guess ahead, check in one step" misstated it. "Same quality": greedy, plain decoding's
#: text (at an exact precision); sampled, replies as likely as plain decoding's, not the same text.
_SPECULATIVE_HELP = "Speculative: guess ahead, check in one step; same quality."
DECODING_HELP = {
    Decoding.AUTO: "Auto: guesses ahead only when that pays off; same quality.",
    Decoding.AUTOREGRESSIVE: "Plain: one token per step, at the model's own pace.",
    Decoding.DRAFT_MODEL: _SPECULATIVE_HELP,
    Decoding.PROMPT_LOOKUP: _SPECULATIVE_HELP,
}
#: Decoding's tooltip: "the same text" holds for greedy replies at an exact precision only (at a fast one drafting
#: may change a reply by rounding: ``precision_in_words``).
DECODING_TIP = (
    "Plain decoding writes one token per step. Speculative decoding lets a drafter guess the next tokens and checks "
    "them all in one step of the model: sooner when the guesses are good, and the same quality (greedy at an exact "
    "precision: the same text; sampled: replies as likely as plain decoding's, not the same text). Auto, the default, "
    "chooses each step between guessing (with the drafter below, or prompt lookup) and a plain step, whichever pays "
    "off"
)
ADVANCED_FIELDS = ("target_device", "draft_device", "precision", "kv_cache_precision", "n_keep", "n_discard")
#: The draft list's entry that means prompt lookup (Decoding.PROMPT_LOOKUP) instead of a draft model.
LOOKUP_DRAFT = "<prompt lookup>"
#: The draft list's last entry: choose a model folder outside the store.
BROWSE_DRAFT = "<browse>"
#: Pixels kept in view above and below a control scrolled into view when it takes the focus.
FOCUS_MARGIN = 4
#: The width of K's field (a number field grows to theme.FIELD_WIDTH at most).
SHORT_FIELD_WIDTH = 64
DRAFT_TIP = (
    "What guesses the next tokens: a small model with the same vocabulary as the chosen model (its tokenizer), or "
    "prompt lookup (text repeated from the chat). \"Other folder…\" picks a model folder outside the store"
)
#: How the draft list marks the target's own model at as many bits or more (``app.gui.draft_choices.never_faster``).
NEVER_FASTER_MARK = "(not faster: the chosen model itself)"
NEVER_FASTER_TIP = (
    "The chosen model itself, with as many bits or more: the same weights, no smaller, so each guess costs about "
    "as much as the step it should save. Drafting with it is never faster than plain decoding; a smaller model, a "
    "draft head or prompt lookup can be"
)
#: The item data role in which a draft list entry marked refused keeps its own text and tooltip (``_mark_refused_draft``).
_UNMARKED_ROLE = Qt.ItemDataRole.UserRole + 1
SEED_ERROR = "seed must be a whole number in [0, 2^63), or empty or -1 for a random seed"


def auto_label(draft: str) -> str:
    """Auto's entry in the Decoding list for the draft model chosen (a folder, "" = none): it names the drafters Auto
    chooses between, the draft head or draft model chosen, prompt lookup and a plain step. A newcomer trial with an
    imported model (no draft head) read "draft head" there beside a draft list saying "(none)"."""
    if not draft:
        return AUTO_LABEL.format("")
    return AUTO_LABEL.format("draft head, " if is_head_folder(draft) else "draft model, ")


#: The line under Model and decoding while a remote server answers (``SettingsPane.show_remote``), by whether it is
#: SpecChat's.
REMOTE_NOTES = {
    False: "Replies come from a remote server, which decodes with its own settings and context: Sampling applies.",
    True: "Replies come from SpecChat's server: it takes Decoding and K, and drafts and keeps its context its own way.",
}


class SettingsPane(QScrollArea):
    """Form for :class:`~app.gui.settings_store.AppSettings` with in-place validation.

    Signals:
        settings_changed(AppSettings): the settings changed and are all valid.
        validity_changed(str): "" when every field is valid, else a one-line summary of the first error.

    Attributes:
        fields: field name -> input widget; error_labels: field name -> its error label.
    """

    settings_changed = Signal(object)
    validity_changed = Signal(str)

    def __init__(self, settings: AppSettings, devices: list[str], parent=None, store: SettingsStore | None = None):
        super().__init__(parent)
        self.setObjectName("settingsPane")
        self.setAccessibleName("Settings")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # no Tab stop of its own (a trial's Tab outlined the whole pane, a stop with nothing to do): Tab goes from
        # field to field, and the pane scrolls to the one focused
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self._devices = list(devices) or ["CPU"]
        self._max_position_embeddings: int | None = None
        self._external_errors: dict[str, str] = {}
        self._advisories: dict[str, str] = {}
        self._advisory_chats: dict[str, str] = {}  # an advisory's field -> the chat whose reply was refused
        self._errors: dict[str, str] = {}
        self._compare_errors: dict[str, str] = {}
        # invalid values given to set_settings that their field cannot hold (n_ctx -5 shows as 0): name -> (the
        # value, what the field shows); checked as given until that field is edited
        self._not_shown: dict[str, tuple[Any, Any]] = {}
        self._from_file: dict[str, Any] = {}  # invalid values set_settings showed, by field, until edited
        self._loading = False
        self._last_emitted: AppSettings | None = None
        self.fields: dict[str, QWidget] = {}
        self.error_labels: dict[str, QLabel] = {}
        self._plain_names: dict[str, str] = {}  # field name -> its label ("Context length (n_ctx)")

        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(8, 2, 8, 2)
        layout.setSpacing(GROUP_SPACING)

        model = self._group(layout, "Model and decoding")
        self.bits = ElidedComboBox()
        for bits, label in BIT_WIDTHS.items():
            self.bits.addItem(label, bits)
        self._bits_row = self._row(model, "bits", "Weights (bits)", self.bits, BITS_TIP, BITS_HELP)
        self._model_form = model  # the bit-width rows show while the default model is the target (set_settings)
        self.decoding = ElidedComboBox()
        for decoding in Decoding:
            self.decoding.addItem(decoding.label, decoding.value)
        shown = DECODING_HELP[Decoding(self.decoding.currentData())]
        self._decoding_row = self._row(model, "decoding", "Decoding", self.decoding, DECODING_TIP, shown)
        self.draft_model = ElidedComboBox()
        self._model_draft = ""  # the draft model chosen ("" = none), kept while prompt lookup is shown
        self._preselected = ""  # the draft taken when draft-model decoding is chosen without one (set_models)
        self.draft_model.setMinimumContentsLength(8)
        self.draft_model.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self._row(model, "draft_model", "Drafter", self.draft_model, DRAFT_TIP, "Small models with the same vocabulary, or prompt lookup.")
        self.k = NumberBox()
        self.k.setRange(0, BIG)  # spin boxes reach past the valid range: a value out of it is flagged, not clamped
        self.k.setMaximumWidth(SHORT_FIELD_WIDTH)
        self.adaptive_k = QCheckBox("Adaptive")
        self.adaptive_k.setObjectName("setting_adaptive_k")
        self.adaptive_k.setAccessibleName("Adaptive K")
        self.adaptive_k.setToolTip(
            "Adaptive K: choose K each step as Auto does, from the measured pass costs and the acceptance rate (the "
            "share of drafted tokens the target model accepts), K 0 being a plain step; the drafter stays the one above"
        )
        k_row = QWidget()
        k_layout = QHBoxLayout(k_row)
        k_layout.setContentsMargins(0, 0, 0, 0)
        k_layout.addWidget(self.k)
        k_layout.addSpacing(12)
        k_layout.addWidget(self.adaptive_k)
        k_layout.addStretch(1)
        self._k_row = self._row(
            model, "k", "Draft tokens per step (K)", k_row,
            f"K: how many tokens the drafter proposes per step, 1 to {MAX_K}; the model checks them all in one step "
            f"and keeps the ones it agrees with (the acceptance rate). Auto, and Adaptive, choose K themselves each "
            f"step, from 0 (a plain step) to {MAX_K}, whatever this box says, and a reply's footer says the most they "
            "drafted (\"K up to 3\"); this box's K is used by the speculative decodings that draft a fixed K (a "
            "sampled reply with a seed plans from its own drafts, so it repeats)",
            K_HELP, self.k,
        )  # fmt: skip
        self._k_note = ""  # a note under K saying why it changed (note_k), until K is edited
        self._k_row.help.setToolTip(
            f"K follows the drafter: {HEAD_K} for a draft head (its later guesses are rarely right), "
            f"{SpeculativeSettings().k} for the others; a K set after choosing the drafter stays"
        )
        self.k.valueChanged.connect(lambda _value: self.note_k("") if not self._loading else None)
        self.fields["adaptive_k"] = self.adaptive_k
        self.n_ctx = NumberBox()
        self.n_ctx.setRange(0, BIG)
        self.n_ctx.setSingleStep(256)
        self._row(
            model, "n_ctx", "Context length (n_ctx)", self.n_ctx,
            f"n_ctx: how many tokens of the chat the model keeps in memory, at least {MIN_N_CTX}; past it, the "
            "oldest tokens (after the system prompt: Always kept, under Advanced) are forgotten and the chat goes on",
            "How much of the chat the model remembers, in tokens.",
        )  # fmt: skip
        self.remote_note = QLabel()  # while a remote server answers: why the fields above are off (show_remote)
        self.remote_note.setObjectName("remoteNote")
        self.remote_note.setWordWrap(True)
        model.addRow(self.remote_note)
        model.setRowVisible(self.remote_note, False)
        self._remote: bool | None = None  # None: replies come from this computer; else whether the server is SpecChat's

        self.sampling = SamplingGroup(store)
        layout.addWidget(self.sampling)

        # what few change is folded away (it unfolds by itself when one of its fields is flagged)
        self.advanced = Fold(
            "advancedToggle", "Advanced",
            "Devices, numeric precision, and what the rolling context keeps and drops",
        )  # fmt: skip
        # "Reset to defaults" on the fold's line: the room of a line of its own pays for the line kept free for an
        # error under each field (setting_row), so the pane still fits a 1366x768 screen
        self.reset_button = QPushButton("Reset to defaults")
        self.reset_button.clicked.connect(self.confirm_reset)
        fold_line = QHBoxLayout()
        fold_line.addWidget(self.advanced.button)
        fold_line.addStretch(1)
        fold_line.addWidget(self.reset_button)
        advanced_form = QFormLayout()
        advanced_form.addRow(fold_line)
        advanced_form.addRow(self.advanced.box)
        advanced_form.setContentsMargins(8, 0, 8, 0)
        layout.addLayout(advanced_form)
        advanced = self.advanced.form
        self.target_device = ElidedComboBox()
        self._row(
            advanced, "target_device", "Device", self.target_device, "OpenVINO device of the model (CPU, GPU, NPU)",
            "The chip the model runs on.",
        )  # fmt: skip
        self.draft_device = ElidedComboBox()
        self._row(
            advanced, "draft_device", "Drafter's device", self.draft_device, "OpenVINO device of the draft model",
            "The chip the drafter runs on.",
        )  # fmt: skip
        self.precision = ElidedComboBox()
        for key, label in PRECISIONS.items():
            self.precision.addItem(label, key)
        self._row(
            advanced, "precision", "Precision", self.precision,
            "Compute precision of the model. Auto and f32 make greedy speculative replies equal plain decoding's. "
            "On CPUs with AMX or AVX512_BF16, Auto reads long prompts in bf16 (about 3x sooner); f32 also reads them "
            "in f32, so a reply never depends on how its prompt was read; bf16 rounds the two modes differently",
            "How finely the model computes: f32 is exact, bf16 faster.",
        )
        self.kv_cache_precision = ElidedComboBox()
        for key, label in KV_PRECISIONS.items():
            self.kv_cache_precision.addItem(label, key)
        self._row(
            advanced, "kv_cache_precision", "Memory precision (KV cache)", self.kv_cache_precision,
            "How the model's memory of the chat (the KV cache) is stored. Auto = f32 with f32 compute; u8 takes a "
            "quarter of the memory but is not exact",
            "How the chat's memory is kept: u8 is smaller, not exact.",
        )
        self.precision_in_use = WrappedLabel()
        self.precision_in_use.setObjectName("hint")
        self.precision_in_use.setToolTip("What OpenVINO reports for the loaded model")
        advanced.addRow("Precision in use", self.precision_in_use)
        self.n_keep = NumberBox()
        self.n_keep.setRange(-1, BIG)
        self.n_keep.setSpecialValueText("auto (system prompt)")
        self._row(
            advanced, "n_keep", "Always kept (n_keep)", self.n_keep,
            "n_keep: tokens at the start of the chat that are never forgotten; auto keeps the system prompt, and of "
            "one longer than half the context length its first half-context-length tokens (the rest rolls out with "
            "the chat)",
            "Tokens at the start that are never forgotten.",
        )  # fmt: skip
        self.n_discard = NumberBox()
        self.n_discard.setRange(-1, BIG)
        self.n_discard.setSpecialValueText("auto (half)")
        self._row(
            advanced, "n_discard", "Forgotten at once (n_discard)", self.n_discard,
            "n_discard: tokens forgotten from the oldest end each time the memory is full; auto forgets half of "
            "n_ctx - n_keep",
            "Tokens forgotten at once when the memory is full.",
        )  # fmt: skip

        self.fields.update(self.sampling.fields)
        self._plain_names.update(self.sampling.labels)
        self.error_labels.update(self.sampling.error_labels)
        group = self.sampling  # its fields, as the pane's own
        self.temperature, self.top_p, self.top_k, self.seed = group.temperature, group.top_p, group.top_k, group.seed
        self.max_new_tokens = group.max_new_tokens

        self.general_error = QLabel()
        self.general_error.setObjectName("fieldError")
        self.general_error.setWordWrap(True)
        self.general_error.setVisible(False)
        layout.addWidget(self.general_error)
        self.error_labels["general"] = self.general_error
        layout.addStretch(1)
        self.setWidget(content)

        self._highlight = settings.highlight_draft
        self.set_devices(self._devices)
        self.set_models([])
        self.set_settings(settings)
        self.decoding.currentIndexChanged.connect(self._decoding_chosen)  # before _edited: the list follows first
        self.draft_model.currentIndexChanged.connect(self._draft_chosen)
        for widget in (self.bits, self.target_device, self.precision, self.kv_cache_precision, self.decoding, self.draft_device):
            widget.currentIndexChanged.connect(self._edited)
        for widget in (self.k, self.n_ctx, self.n_keep, self.n_discard):
            widget.valueChanged.connect(self._edited)
        self.adaptive_k.toggled.connect(self._edited)
        self.sampling.edited.connect(self._edited)
        for widget in self.fields.values():
            if isinstance(widget, RefusalAware):  # its error says the digits it refused (set_settings: none yet)
                widget.refused_changed.connect(lambda: self._validate(emit=False))
            if isinstance(widget, EmptyAware):  # (emptied, its value is not what it shows)
                widget.empty_changed.connect(lambda: self._validate(emit=False))
        guard_wheel(self)  # the wheel scrolls the pane; it changes a field only once the field has focus
        QApplication.instance().focusChanged.connect(self._follow_focus)  # (bound: dropped with the pane)

    def _follow_focus(self, _old: QWidget | None, now: QWidget | None) -> None:
        """Scroll a control of the pane that takes the focus into view, whole, however it came: Qt scrolls only on
        Tab from a control inside the pane, so Tab into it from the window (Decoding, the first stop under a remote
        server) focused a control scrolled out of sight (a newcomer's Tab walk)."""
        content = self.widget()
        if now is None or content is None or not content.isAncestorOf(now):
            return
        top = now.mapTo(content, QPoint(0, 0)).y()
        half = now.height() // 2
        self.ensureVisible(0, top + half, 0, half + FOCUS_MARGIN)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Guard the fields added after construction (by the sampling group, say) against the wheel too."""
        guard_wheel(self)
        super().showEvent(event)

    # --- building ---------------------------------------------------------------------------------

    @staticmethod
    def _group(layout: QVBoxLayout, title: str) -> QFormLayout:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        form.setContentsMargins(*GROUP_MARGINS)
        form.setVerticalSpacing(2)
        layout.addWidget(box)
        return form

    def _row(
        self, form: QFormLayout, name: str, label: str, widget: QWidget, tip: str, help_text: str = "",
        field: QWidget | None = None,
    ) -> SettingRow:
        row = add_setting(form, name, label, widget, tip, help_text, field)
        self._plain_names[name] = label
        self.fields[name] = row.field
        self.error_labels[name] = row.error
        return row

    def content_height(self) -> int:
        """The height, in pixels, that shows every field without a scroll bar."""
        self.ensurePolished()  # the style sheet's margins count
        return self.widget().sizeHint().height() + 2 * self.frameWidth()

    # --- data -------------------------------------------------------------------------------------

    def set_devices(self, devices: list[str]) -> None:
        """Offer these OpenVINO devices for the target and the draft."""
        self._devices = list(devices) or ["CPU"]
        for combo in (self.target_device, self.draft_device):
            current = combo.currentText()
            combo.blockSignals(True)
            combo.clear()
            combo.addItems(self._devices)
            if current in self._devices:
                combo.setCurrentText(current)
            combo.blockSignals(False)

    def set_models(self, models: list[ModelManifest], preselected: str = "", never_faster: set[str] | None = None) -> None:
        """Offer these installed models as draft models (the window passes those whose tokenizer matches the
        target's, and the folder of the one to preselect: ``app.gui.draft_choices.draft_choices``), by distinct
        readable names. Choosing draft-model decoding while no draft is chosen takes ``preselected``. The folders in
        ``never_faster`` (the target's own model at as many bits or more: ``app.gui.draft_choices.never_faster``)
        are marked as such, in their entry and its tooltip.

        The draft chosen stays chosen if it is offered, or if it is a folder outside the model store (chosen
        with Browse…); an installed model no longer offered (another tokenizer) is unselected, and the settings
        re-checked: a draft-model decoding without a draft is flagged until one is chosen.
        """
        current = self._model_draft
        self._preselected = preselected
        labels = model_labels(models)
        self.draft_model.blockSignals(True)
        self.draft_model.clear()
        self.draft_model.addItem("(none)" if models else "(none with this tokenizer: use prompt lookup)", "")
        for manifest in models:
            path = str(manifest.path)
            if path in (never_faster or ()):
                self.draft_model.addItem(f"{labels[path]} {NEVER_FASTER_MARK}", path)
                self.draft_model.setItemData(self.draft_model.count() - 1, NEVER_FASTER_TIP, 3)  # Qt.ToolTipRole
            else:
                self.draft_model.addItem(labels[path], path)
        self.draft_model.addItem("Prompt lookup", LOOKUP_DRAFT)
        self.draft_model.addItem("Other folder…", BROWSE_DRAFT)
        self.draft_model.setItemData(
            self.draft_model.count() - 1, "Choose a draft model folder (OpenVINO IR with the same tokenizer)", 3
        )  # Qt.ToolTipRole
        in_store = bool(current) and Path(current).parent == models_dir()
        if current and (self.draft_model.findData(current) >= 0 or not in_store):
            self._select_draft(current)
        else:
            self._model_draft = ""
        self._show_decoding_in_draft_list()
        self.draft_model.blockSignals(False)
        self._show_draft_tip()
        if current and self._model_draft != current:
            self._edited()

    @property
    def _model_draft(self) -> str:
        """The draft model chosen ("" = none), kept while prompt lookup is shown; Auto's entry names it."""
        return self._draft_path

    @_model_draft.setter
    def _model_draft(self, path: str) -> None:
        self._draft_path = path
        self.decoding.setItemText(self.decoding.findData(Decoding.AUTO.value), auto_label(path))

    def _show_draft_tip(self) -> None:
        """The draft list's tooltip starts with the whole name of the entry shown (the box may cut it), and why it
        is never faster when it is marked so."""
        marked = NEVER_FASTER_TIP in (self.draft_model.currentData(3) or "")  # Qt.ToolTipRole (a refused one's too)
        why = f"{NEVER_FASTER_TIP}.\n\n" if marked else ""
        self.draft_model.setToolTip(f"{self.draft_model.currentText()}\n\n{why}{DRAFT_TIP}")

    def _mark_refused_draft(self, why: str) -> None:
        """The draft model chosen reads in the draft list as its name with ``why`` it is refused ("" while it is
        not): a newcomer who opened the list with an invalid drafter saw its entry as a blank row. Any other entry
        marked before reads as its own name again."""
        combo = self.draft_model
        current = combo.currentIndex()
        refused = bool(why) and combo.currentData() not in ("", LOOKUP_DRAFT, BROWSE_DRAFT)
        for index in range(combo.count()):
            unmarked = combo.itemData(index, _UNMARKED_ROLE)
            if unmarked is not None and not (refused and index == current):
                combo.setItemText(index, unmarked[0])
                combo.setItemData(index, unmarked[1], 3)  # Qt.ToolTipRole
                combo.setItemData(index, None, _UNMARKED_ROLE)
        if refused:
            unmarked = combo.itemData(current, _UNMARKED_ROLE) or (combo.itemText(current), combo.itemData(current, 3))
            combo.setItemData(current, unmarked, _UNMARKED_ROLE)
            name = Path(combo.currentData()).name
            said = why.removeprefix(f"The draft model {name} ")
            combo.setItemText(current, f"{unmarked[0]} ✘ refused: {said}")
            combo.setItemData(current, "\n\n".join(filter(None, (f"{name} is refused: {said}", unmarked[1]))), 3)

    def _select_draft(self, path: str) -> None:
        """Show the draft model ``path`` ("" = none) in the draft list and remember it as the model draft."""
        self._model_draft = path
        index = self.draft_model.findData(path)
        if index < 0 and path:
            index = self.draft_model.findData(LOOKUP_DRAFT)  # a folder goes before prompt lookup
            self.draft_model.insertItem(index, Path(path).name, path)
        self.draft_model.setCurrentIndex(max(index, 0))

    def _show_decoding_in_draft_list(self) -> None:
        """The draft list follows the decoding: prompt lookup shows its entry, a draft model the model chosen."""
        lookup = self.decoding.currentData() == Decoding.PROMPT_LOOKUP.value
        blocked = self.draft_model.blockSignals(True)  # a sync, not a choice (see _draft_chosen)
        if lookup and self.draft_model.currentData() != LOOKUP_DRAFT:
            self.draft_model.setCurrentIndex(self.draft_model.findData(LOOKUP_DRAFT))
        elif not lookup and self.draft_model.currentData() == LOOKUP_DRAFT:
            self._select_draft(self._model_draft)
        self.draft_model.blockSignals(blocked)

    def _draft_chosen(self, index: int) -> None:
        """A choice in the draft list: prompt lookup, or a model (then speculative decoding with a draft model)."""
        if self._loading:  # set_settings shows a draft: the decoding shown is already the one to keep
            return
        data = self.draft_model.itemData(index)
        if data == BROWSE_DRAFT:  # the list shows what is chosen until a folder is
            blocked = self.draft_model.blockSignals(True)
            self._select_draft(self._model_draft)
            self._show_decoding_in_draft_list()
            self.draft_model.blockSignals(blocked)
            asyncio.ensure_future(self.browse_draft_model())
            return
        if data == LOOKUP_DRAFT:
            decoding = Decoding.PROMPT_LOOKUP
        else:
            self._model_draft = str(data or "")
            lookup = self.decoding.currentData() == Decoding.PROMPT_LOOKUP.value
            decoding = Decoding.DRAFT_MODEL if lookup else Decoding(self.decoding.currentData())
        self.decoding.setCurrentIndex(self.decoding.findData(decoding.value))
        self._edited()

    def _explain_decoding(self) -> None:
        """The line under Decoding says what the decoding shown does."""
        self._decoding_row.help.setText(DECODING_HELP[Decoding(self.decoding.currentData())])

    def _decoding_chosen(self, _index: int) -> None:
        self._explain_decoding()
        if self.decoding.currentData() == Decoding.DRAFT_MODEL.value and not self._model_draft and not self._loading:
            blocked = self.draft_model.blockSignals(True)
            self._select_draft(self._preselected)  # no red "choose a draft" first when one is there to take
            self.draft_model.blockSignals(blocked)
        self._show_decoding_in_draft_list()

    def show_remote(self, specchat: bool | None) -> None:
        """Where replies come from: this computer (None: every field on), or a remote server, which gets none of this
        computer's Drafter and rolling context (Context length, Always kept, Dropped per roll), nor its Decoding and K
        unless it is SpecChat's (``specchat``): those fields are off (their values kept), and a line under them says
        why. Devices and precisions stay on: the local model stays loaded meanwhile."""
        self._remote = specchat
        self.remote_note.setText("" if specchat is None else REMOTE_NOTES[specchat])
        self._model_form.setRowVisible(self.remote_note, specchat is not None)
        self._enable_for_source()

    def _enable_for_source(self) -> None:
        """The fields of this computer's models on or off as :meth:`show_remote` says (and as the decoding chosen
        uses them: the Drafter and Adaptive only under a speculative decoding)."""
        local, specchat = self._remote is None, self._remote is True
        speculative = Decoding(self.decoding.currentData()).speculative
        on = {"decoding": local or specchat, "k": local or specchat, "adaptive_k": (local or specchat) and speculative,
              "draft_model": local and speculative, "n_ctx": local, "n_keep": local, "n_discard": local}
        for name, enabled in on.items():  # (a flagged field stays on: it blocks Send until fixed)
            self.fields[name].setEnabled(enabled or (name in self._errors and name != "draft_model"))

    def set_precision_in_use(self, precision: NumericPrecision | None) -> None:
        """Show the loaded target's precision as OpenVINO reports it, in plain words (None while none is loaded);
        the tooltip gives OpenVINO's own terms."""
        self.precision_in_use.setText(precision_in_words(precision) if precision else "no model loaded")
        terms = f"OpenVINO reports: {precision.describe()}" if precision else "What OpenVINO reports for the loaded model"
        self.precision_in_use.setToolTip(terms)

    def set_max_position_embeddings(self, value: int | None) -> None:
        """The loaded target's longest position: the upper bound of n_ctx (re-validates)."""
        self._max_position_embeddings = value
        self._validate(emit=True)

    def set_settings(self, settings: AppSettings) -> None:
        """Show these settings (flagging any invalid value)."""
        self._loading = True
        try:
            self._highlight = settings.highlight_draft
            self.bits.setCurrentIndex(max(self.bits.findData(settings.bits), 0))
            # another model's bit-width is its own (the model picker lists each copy): the row would misstate it
            self._bits_row.set_visible(self._model_form, not settings.target_model and not settings.use_remote)
            self.precision.setCurrentIndex(max(self.precision.findData(settings.precision), 0))
            self.kv_cache_precision.setCurrentIndex(max(self.kv_cache_precision.findData(settings.kv_cache_precision), 0))
            if settings.target_device not in self._devices:
                self.target_device.addItem(settings.target_device)
            self.target_device.setCurrentText(settings.target_device)
            if settings.draft_device not in self._devices:
                self.draft_device.addItem(settings.draft_device)
            self.draft_device.setCurrentText(settings.draft_device)
            self.decoding.setCurrentIndex(max(self.decoding.findData(Decoding(settings.value("decoding")).value), 0))
            self._explain_decoding()  # (no signal when the index is the one shown, nor before __init__ connects it)
            self._select_draft(settings.draft_model)
            self._show_decoding_in_draft_list()
            self.k.setValue(settings.value("k"))
            self.adaptive_k.setChecked(settings.value("adaptive_k"))
            self.n_ctx.setValue(settings.value("n_ctx"))
            n_keep = settings.value("n_keep")
            self.n_keep.setValue(-1 if n_keep == "auto" else int(n_keep))
            self.n_discard.setValue(settings.value("n_discard"))
            self.sampling.show_settings(settings)
        finally:
            self._loading = False
        shown = self.current()
        invalid = settings.field_errors(self._max_position_embeddings, self._devices, speculative=True)
        self._not_shown = {
            name: (settings.value(name), shown.value(name)) for name in invalid
            if name in GENERATION_KEYS and settings.value(name) != shown.value(name)
        }  # fmt: skip
        # the pane emits no invalid value: one given here came from the settings file (until that field is edited)
        self._from_file = {name: shown.value(name) for name in invalid if name in GENERATION_KEYS}
        self._edited()

    def note_k(self, note: str) -> None:
        """Say under K why it changed without the user ("Set to 1 for the draft head (was 4)."), in its explanation's
        line (one line: nothing moves); "" puts the explanation back, as the user's next edit of K does. A newcomer
        saw K go from 4 to 1 without a word when the draft head became the drafter."""
        self._k_note = note
        self._explain_k()

    def _explain_k(self) -> None:
        """K's explanation line: its note (``note_k``), else what K is for the decoding shown: under Auto or
        Adaptive, that K is chosen per step (:data:`K_AUTO_HELP`, as the footers' "K up to" say), else
        :data:`K_HELP`."""
        chooses = self.decoding.currentData() == Decoding.AUTO.value or self.adaptive_k.isChecked()
        self._k_row.help.setText(self._k_note or (K_AUTO_HELP if chooses else K_HELP))

    def confirm_reset(self) -> QMessageBox:
        """"Reset to defaults": ask first, in a window-modal box (as Delete chat does) whose default button, and
        Escape's, is Cancel; its Reset button shows :meth:`defaults`, which the pane emits as an edit. Returns the box
        (open; it deletes itself once answered). A newcomer lost every sampling setting to one click, with no
        question and no undo."""
        box = QMessageBox(
            QMessageBox.Icon.Question, "Reset to defaults", "Reset every setting in this panel to its default?",
            QMessageBox.StandardButton.Reset | QMessageBox.StandardButton.Cancel, self,
        )  # fmt: skip
        box.setObjectName("confirmReset")
        box.setInformativeText("Decoding, sampling, lengths, devices and precision go back to their defaults. This "
                               "cannot be undone.")  # fmt: skip
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.setEscapeButton(QMessageBox.StandardButton.Cancel)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def answered(_result: int) -> None:
            if box.clickedButton() is box.button(QMessageBox.StandardButton.Reset):
                self.set_settings(self.defaults())

        box.finished.connect(answered)
        box.open()
        return box

    def defaults(self) -> AppSettings:
        """What "Reset to defaults" shows: ``AppSettings``' defaults with the drafter this pane preselects (the
        target's draft head where it has one, ``set_models``) and the K that drafter starts with (``HEAD_K`` for a
        head, as ``app.gui.model_choice.k_for_the_drafter`` sets it). A reset of settings already at their defaults
        changes nothing: it once emptied the drafter, which the window then chose again, announcing a reload."""
        defaults = replace(AppSettings(), highlight_draft=self._highlight, draft_model=self._preselected)
        return defaults.with_values(k=HEAD_K) if defaults.drafts_with_head else defaults

    def set_highlight(self, highlight: bool) -> None:
        """Record the chat view's highlight toggle (it is stored with the settings)."""
        self._highlight = highlight
        if not self._loading:
            self._validate(emit=True)

    def _seed_value(self) -> tuple[int | None, str | None]:
        text = self.seed.text().strip()
        if not text:
            return None, None
        try:
            seed = int(text)
        except ValueError:
            return None, f"{SEED_ERROR}, got '{text}'"  # (quoted: what is not a number may hold spaces)
        if seed == RANDOM_SEED:
            return None, None
        return seed, None if 0 <= seed < 2**63 else f"{SEED_ERROR}, got {text}"

    def current(self) -> AppSettings:
        """The settings as shown (possibly invalid: see :meth:`errors`)."""
        seed, _ = self._seed_value()
        return AppSettings(
            target_device=self.target_device.currentText(),
            draft_device=self.draft_device.currentText(),
            bits=int(self.bits.currentData()),
            precision=str(self.precision.currentData()),
            kv_cache_precision=str(self.kv_cache_precision.currentData()),
            draft_model=self._model_draft,
            highlight_draft=self._highlight,
        ).with_values(
            decoding=Decoding(self.decoding.currentData()),
            k=self.k.value(),
            adaptive_k=self.adaptive_k.isChecked(),
            n_ctx=self.n_ctx.value(),
            n_keep="auto" if self.n_keep.value() == -1 else self.n_keep.value(),
            n_discard=self.n_discard.value(),
            seed=seed,
            **self.sampling.values(),
        )

    def errors(self, compare: bool = False) -> dict[str, str]:
        """Current errors by field name (empty when valid): of what the chosen decoding uses, and with ``compare``
        of what a Compare uses too (K, where its speculative run drafts a fixed K); each
        message names its field as the pane labels it and says its range in words ("Context length must be between…")."""
        errors = {**self._compare_errors, **self._errors} if compare else self._errors
        return {name: self.in_words(name, message) for name, message in errors.items()}

    def flag(self, name: str, message: str | None, blocking: bool = True, chat: str = "") -> None:
        """Show (or clear, with None) an error found outside the pane next to its field.

        Args:
            blocking: the settings stay invalid until an edit (e.g. a draft whose tokenizer differs); otherwise
                the message is only shown (e.g. the engine refused one reply: it checks again next time).
            chat: the title of the chat whose reply the engine refused (a message not blocking): the words name it,
                the settings being the window's and the refusal that chat's (its system prompt, its length).
        """
        for errors in (self._external_errors, self._advisories, self._advisory_chats):
            errors.pop(name, None)
        if message:
            (self._external_errors if blocking else self._advisories)[name] = message
            if chat and not blocking:
                self._advisory_chats[name] = chat
        self._validate(emit=False)

    # --- validation -------------------------------------------------------------------------------

    def _edited(self, *_args) -> None:
        if self._loading:
            return
        current = self.current()  # a field edited since set_settings is checked as it shows
        self._not_shown = {name: pair for name, pair in self._not_shown.items() if current.value(name) == pair[1]}
        self._from_file = {name: value for name, value in self._from_file.items() if current.value(name) == value}
        self._external_errors = {}  # an edit may have fixed what the engine refused
        self._advisories = {}
        self._advisory_chats = {}
        self._validate(emit=True)

    def in_words(self, name: str, message: str) -> str:
        """``message`` about field ``name`` in words, its fields named by their labels ("Context length must be
        between 16 and 8,192; you typed 99999", not "n_ctx must be in [16, 8192], got 99999"): ``setting_words``."""
        box = self.fields.get(name)
        if isinstance(box, RefusalAware) and box.refused:  # (a newcomer's 99999999999 read "you typed 999999999")
            said = "you typed more digits than the field holds (it holds {})"
        elif name in self._not_shown or name in self._from_file:  # (the user typed nothing: "you typed" misled)
            said = "the settings file holds {}"
        else:
            said = "you typed {}"
        # a decimal field's number as typed or held ("0" for top-p, which the engine writes 0.0)
        typed = f"{box.value():g}" if isinstance(box, QDoubleSpinBox) and not said.startswith("the settings") else None
        return in_words(message, self._plain_names, said, typed)

    def _validate(self, emit: bool) -> None:
        settings = self.current()
        # a value its field cannot hold is checked as given (the error says "got -5", not the field's 0)
        checked = settings.with_values(**{name: value for name, (value, _) in self._not_shown.items()})
        errors = checked.field_errors(self._max_position_embeddings, self._devices)
        _, seed_error = self._seed_value()
        if seed_error:
            errors["seed"] = seed_error
            errors.pop("general", None)
        errors.update(self._external_errors)
        boxes = {name: box for name, box in self.fields.items() if isinstance(box, EmptyAware)}
        for name, box in boxes.items():
            # what it shows, not the value it held before it was cleared; one out of sight (folded) shows its value
            # again when it is shown (EmptyAware.showEvent): nothing to flag, nor to unfold for
            if box.empty and box.isVisibleTo(self):
                errors[name] = f"{name} is empty: type a number, or leave the field to put back {box.restored_text()}"
        self._errors = errors
        # K where the chosen decoding does not use it (Auto, Adaptive, plain) is flagged without blocking Send, and
        # blocks Compare only where Compare's run drafts a fixed K (under Plain it runs Auto: it does not)
        unused = checked.field_errors(self._max_position_embeddings, self._devices, speculative=True)
        unused = {name: message for name, message in unused.items() if name not in errors}
        compare_uses_k = checked.generation_settings(checked.compare_decoding).uses_fixed_k
        self._compare_errors = unused if compare_uses_k else {}
        notes = {name: f"{text} ({K_UNUSED_NOTE})" for name, text in unused.items()}
        for name, box in boxes.items():  # what an emptied field puts back when left: its last valid value
            if not box.empty and not any(name in flagged for flagged in (errors, notes, self._advisories)):
                box.fallback = box.value()
        for name, box in boxes.items():  # a decimal past the field's refused (0.955 typed into top-p kept 0.95 without
            # a word, newcomer trial): said under the field until its value changes, without blocking (0.95 is valid)
            if isinstance(box, DecimalBox) and box.refused and name not in errors and name not in notes:
                notes[name] = f"{name} takes at most {box.decimals()} decimals, got {box.value()}"
        for name, label in self.error_labels.items():
            message = errors.get(name) or notes.get(name) or self._advisories.get(name, "")
            if message and name in self._not_shown and not (name in boxes and boxes[name].empty):
                message += f" (the field shows {self._not_shown[name][1]})"
            words = self.in_words(name, message)
            if (chat := self._advisory_chats.get(name)) and not (errors.get(name) or notes.get(name)):
                words = f"The reply in “{chat}” was refused: {words}"
            label.setText(words)
            label.setVisible(bool(message))
            widget = self.fields.get(name)
            if widget is not None:
                mark_invalid(widget, bool(message))
        if any(name in errors or name in self._advisories for name in ADVANCED_FIELDS):
            self.advanced.show()  # a flagged field is never hidden
        if any(name in errors or name in self._advisories for name in MORE_FIELDS):
            self.sampling.more.show()
        self._explain_k()
        self._mark_refused_draft(self.error_labels["draft_model"].text())
        uses_draft = settings.uses_draft_model
        self.draft_device.setEnabled(uses_draft)
        self._show_draft_tip()
        self._enable_for_source()
        summary = blocked_summary(self.errors())
        self.validity_changed.emit(summary)
        if emit and not errors and settings != self._last_emitted:
            self._last_emitted = settings
            self.settings_changed.emit(settings)

    async def browse_draft_model(self) -> None:
        """Ask for a draft model folder and select it (flagged if it is not a model folder)."""
        folder = await choose_file(self, "Choose a draft model folder", directory=True, start_dir=str(models_dir()))
        if not folder:
            return
        missing = [name for name in REQUIRED_FILES if not (Path(folder) / name).is_file()]
        self._select_draft(folder)
        if missing:
            self.flag("draft_model", f"{folder} is not a model folder: missing {', '.join(missing)}")


#: The explanation under K (a note takes its line while K follows the drafter: ``note_k``).
K_HELP = "More pays off when the guesses are often right."
#: The explanation under K while Auto or Adaptive chooses K each step (a reply's footer then says "K up to 3").
K_AUTO_HELP = f"Auto picks K each step (0 to {MAX_K}), not this box."
def mark_invalid(widget: QWidget, invalid: bool) -> None:
    """Set a field's ``invalid`` property (the theme's style sheet draws such a field in the error colours) and
    polish it again where it changes. An unmarked field is also told that its style changed, so that it lays itself
    out in the theme's style again: a number field marked at start (an invalid value from settings.json) kept the
    layout of the marked style once fixed, its text box over its frame ("48" by the arrows, with no frame nor
    background). A field marked keeps its layout: its error moves no field (test_settings_validation)."""
    if bool(widget.property("invalid")) == invalid:
        return
    widget.setProperty("invalid", invalid)
    widget.style().unpolish(widget)
    widget.style().polish(widget)
    if not invalid:
        QCoreApplication.sendEvent(widget, QEvent(QEvent.Type.StyleChange))
        widget.updateGeometry()


#: Said after an invalid K where it blocks nothing: why the box's range (1 to MAX_K) differs from Auto's (0 to MAX_K,
#: :data:`K_AUTO_HELP`), which a newcomer read as a contradiction.
K_UNUSED_NOTE = (
    f"only the speculative decodings with a fixed K use this box; Auto picks its own K each step, 0 for a plain step "
    f"up to {MAX_K}"
)

#: Numeric types in plain words, the type's own name beside them (as the settings' labels keep their field terms).
_TYPE_WORDS = {"f32": "full (f32)", "bf16": "half (bf16)", "f16": "half (f16)", "u8": "8-bit (u8)", "i8": "8-bit (i8)", "u4": "4-bit (u4)"}


def blocked_summary(errors: dict[str, str]) -> str:
    """What the message box says while settings are invalid: the first field's message, and how many more fields
    are flagged (a newcomer fixed the one named and found Send still off for two others); "" without errors."""
    if not errors:
        return ""
    first = next(iter(errors.values()))
    more = len(errors) - 1
    return f"Fix the settings first: {first}" + (f" (and {more} more field{'s' if more > 1 else ''}, marked in red)" if more else "")


def precision_in_words(precision: NumericPrecision) -> str:
    """What the "In use" row says of ``precision``: "Computing: full (f32) · chat memory (KV cache): full (f32) ·
    drafting never changes a reply (exact)" and, when they are on, rounding of activations (dynamic quantization),
    how long prompts are read and whose kernels compute the 4-bit weights ("4-bit weights: SpecChat's faster
    kernels", or OpenVINO's and why). "Exact" is said of what it means to the user, speculative replies equal to
    plain decoding's (a newcomer read "exact" beside "long prompts read in half (bf16)" as a contradiction: every
    decoding reads a prompt the same way)."""

    def words(type_name: str) -> str:
        return _TYPE_WORDS.get(type_name, type_name or "the device's default")

    parts = [f"Computing: {words(precision.inference)}", f"chat memory (KV cache): {words(precision.kv_cache)}"]
    if precision.dynamic_quantization_group_size > 0:
        size = precision.dynamic_quantization_group_size
        parts.append(f"inputs rounded to 8 bits in groups of {size} (dynamic quantization)")
    if precision.prefill:
        parts.append(f"long prompts read in {words(precision.prefill)}")
    if precision.kernels == "SpecChat's":
        parts.append("4-bit weights: SpecChat's faster kernels")
    elif precision.kernels:
        parts.append("4-bit weights: " + precision.kernels.replace("OpenVINO's", "OpenVINO's kernels", 1))
    parts.append("drafting never changes a reply (exact)" if precision.exact
                 else "drafting may change a reply by rounding (fast, not exact)")
    return " · ".join(parts)
