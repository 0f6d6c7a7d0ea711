"""The Models dialog: installed models, adding one (import, download, convert), removing, pairing, catalogue.

Why one module of ~650 lines: it is one dialog, :class:`ModelsDialog` (about 500 of them), whose three tabs share
one operation slot (at most one runs: ``_start``/``_finish``, the progress bar, the status line, Cancel, the
buttons it disables) and refresh one table of installed models; a tab in a module of its own would reach back into
the dialog for all of them. ``Operation`` and ``ProgressThrottle`` are that slot's state and progress callback.

``ModelsDialog(parent=None, in_use=None)`` is self-contained (``in_use`` says which models the window uses, so that
removing one says so); it emits ``models_changed`` after a model was added or removed,
and ``pair_installed`` when "Download this pair" has installed a recommended pair (the window selects it). Models
are named by their store names (folder names: unique, and the names ``specchat`` commands take) and readable
labels (``inference.models.store.model_labels``), so the 4- and 8-bit copies of a model read differently.
All long work (copying, converting, downloading, reading tokenizers for a pair check) runs off the GUI thread
the way ``app.background`` prescribes: a coroutine on the GUI loop awaits it in a daemon thread, and its
progress reaches the GUI thread through ``loop.call_soon_threadsafe``, so the event loop never blocks. One
operation runs at a time; Cancel stops it (a ``threading.Event`` it polls) and nothing is left in the store.
Quitting does not wait for an operation still running.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from inference.models import store
from inference.models.errors import ModelImportError
from inference.models.importing import classify_source, import_model
from inference.models.progress import ProgressEvent

from ...background import DaemonThreadExecutor, run_in, threadsafe
from ..store_words import window_words
from .elided_combo import ElidedComboBox

#: "Long chats": whether a chat longer than the context length keeps going (a newcomer could not tell what the
#: earlier "Endless chats" meant, nor "Chats past context length: yes").
PAST_CONTEXT = "Long chats"
#: What a long chat does with a model, by ``ModelManifest.rope_supported``, in the words of LM Studio's context
#: overflow choices (a rolling window, stop at the limit); "?" where the model was not checked.
LONG_CHATS = {True: "keep going (rolling window)", False: "stop at the limit", None: "?"}
INSTALLED_COLUMNS = ("Name", "Use", "Bits", "Size", PAST_CONTEXT, "Source", "Added")
#: The column that says whether the rolling context can shift a model's keys (it has its own tooltip).
ENDLESS_COLUMN = INSTALLED_COLUMNS.index(PAST_CONTEXT)
PAST_CONTEXT_TIP = (
    "Whether a chat longer than the context length (n_ctx) keeps going: a rolling window forgets the oldest "
    "tokens (after the first ones) as the chat grows, instead of the reply stopping at the limit"
)
SOURCE_COLUMN = INSTALLED_COLUMNS.index("Source")
#: The catalogue's sizes are estimates, and say so ("Estimated sizes": "950 + 86 MiB", ``CatalogueModel.size_mib``).
CATALOGUE_COLUMNS = ("Pair", "Target", "Draft", "Estimated sizes", "Licence")
#: The Remove confirmation's button that removes (named after its action, not "Yes"; Cancel is the default).
REMOVE_LABEL = "&Remove"


#: Shortest time between two progress updates that only change a byte count (at most ~20 a second).
PROGRESS_INTERVAL_S = 0.05


@dataclass
class Operation:
    """The operation running (at most one).

    Attributes:
        title: what it does ("Adding org/name"); tab: the page of the tab that started it, whose status message
        its progress and outcome are; log: that tab's log, which gets its progress lines and outcome (None: the
        status line only; a pair check on the Installed tab once left "Checking the pair: done" in the Add tab's
        log); cancel: set to make it stop (it cleans up and reports cancelled); task: the coroutine on the GUI loop
        that awaits it.
    """

    title: str
    tab: QWidget
    log: QPlainTextEdit | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task | None = None


def _log_view(name: str) -> QPlainTextEdit:
    """A tab's read-only log of its operations' progress lines (the last 500), ``name`` its accessible name."""
    log = QPlainTextEdit()
    log.setAccessibleName(name)
    log.setReadOnly(True)
    log.setMaximumBlockCount(500)
    return log


class ProgressThrottle:
    """The progress callback handed to a store operation: passes ``(message, fraction, amount)`` on, at most every
    PROGRESS_INTERVAL_S for repeats of the same message (byte counts), always for a new message or completion.

    Args:
        deliver: called with ``(message, fraction in [0, 1] or -1 when unknown, amount)`` (``amount``: the event's
            :attr:`~inference.models.progress.ProgressEvent.amount`, e.g. "45.0% (1.2 / 2.7 MiB)", or ""); may be
            called from any thread (give it a :func:`~app.background.threadsafe` callback).
        clock: monotonic clock in seconds.
    """

    def __init__(self, deliver: Callable[[str, float, str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self._deliver = deliver
        self._clock = clock
        self._last_emit = 0.0
        self._last_message = ""

    def __call__(self, event) -> None:
        """Report an ``inference.models.progress`` event (``.message``, ``.fraction`` or None, ``.amount``)."""
        now = self._clock()
        fraction = event.fraction if event.fraction is not None else -1.0
        if event.message == self._last_message and now - self._last_emit < PROGRESS_INTERVAL_S and fraction < 1.0:
            return
        self._last_emit, self._last_message = now, event.message
        self._deliver(event.message, fraction, event.amount)


class ModelsDialog(QDialog):
    """Manage the model store (see the module doc).

    Signals:
        models_changed: a model was added or removed (the main window refreshes its model choices).
        pair_installed(target_folder, draft_folder): a recommended pair was downloaded and its tokenizers match
            (emitted after ``models_changed``).
    """

    models_changed = Signal()
    pair_installed = Signal(str, str)

    def __init__(self, parent: QWidget | None = None, in_use: Callable[[], dict[str, str]] | None = None) -> None:
        """Args:
            parent: the window.
            in_use: returns the folders of the models the window uses now (resolved paths), each with what it is
                there (``"the model in use"``, ``"the draft in use"``); the confirmation of their removal says it.
        """
        super().__init__(parent)
        self._in_use = in_use or dict
        self.setWindowTitle("Models")
        self.resize(1100, 560)  # (room for the Source column in a 1366x768 window)
        self.job: Operation | None = None
        self._executor = DaemonThreadExecutor("models-dialog")
        self._manifests: list[store.ModelManifest] = []

        #: Each tab's last status message, by its page (newcomer trial: "Checking the pair: done" stayed shown on
        #: the other tabs); the status line shows the chosen tab's, or the running operation's progress.
        self._said: dict[QWidget, str] = {}
        self.tabs = QTabWidget()
        self.installed_page = self._installed_tab()
        self.add_page = self._add_tab()
        self.catalogue_page = self._catalogue_tab()
        self.tabs.addTab(self.installed_page, "Installed")
        self.tabs.addTab(self.add_page, "Add a model")
        self.tabs.addTab(self.catalogue_page, "Recommended pairs")

        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_job)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress_bar, 1)
        progress_row.addWidget(self.cancel_button)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addLayout(progress_row)
        layout.addWidget(self.status)
        layout.addWidget(buttons)
        self.tabs.currentChanged.connect(self._show_tab_status)
        self.refresh()

    # --- tabs ----------------------------------------------------------------------------------------

    def _installed_tab(self) -> QWidget:
        page = QWidget()
        self.table = QTableWidget(0, len(INSTALLED_COLUMNS))
        self.table.setAccessibleName("Installed models")
        self.table.setHorizontalHeaderLabels(INSTALLED_COLUMNS)
        self.table.horizontalHeaderItem(ENDLESS_COLUMN).setToolTip(PAST_CONTEXT_TIP)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        header = self.table.horizontalHeader()
        # every column as wide as its text but Source, which takes the room left and ends with "…" where its text
        # is longer (a newcomer found it cut at the table's edge, the rest of it only by scrolling sideways); the
        # whole source is in its tooltip
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(SOURCE_COLUMN, QHeaderView.Stretch)
        header.setStretchLastSection(False)
        self.table.setTextElideMode(Qt.ElideRight)
        self.table.setWordWrap(False)  # (one line a model: wrapped, "…" ended the second line of a cell)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.remove_button = QPushButton("Remove…")
        self.remove_button.clicked.connect(self.ask_remove)
        row = QHBoxLayout()
        row.addWidget(self.refresh_button)
        row.addStretch(1)
        row.addWidget(self.remove_button)

        self.target_combo = ElidedComboBox()
        self.target_combo.currentIndexChanged.connect(lambda _index: self._list_drafts())
        self.draft_combo = ElidedComboBox()
        self.draft_combo.setPlaceholderText("(none fits: choose one to check)")
        self._user_draft: str | None = None  # the draft the user chose in the list (kept while listed)
        self.draft_combo.activated.connect(lambda _index: setattr(self, "_user_draft", self.draft_combo.currentData()))
        self.pair_button = QPushButton("Check pair")
        self.pair_button.clicked.connect(self.check_pair)
        self.pair_result = QLabel("Choose a target and a draft: they must share a tokenizer.")
        self.pair_result.setWordWrap(True)
        pair_row = QHBoxLayout()
        target_label, draft_label = QLabel("Target"), QLabel("Draft")
        target_label.setBuddy(self.target_combo)
        draft_label.setBuddy(self.draft_combo)
        pair_row.addWidget(target_label)
        pair_row.addWidget(self.target_combo, 1)
        pair_row.addWidget(draft_label)
        pair_row.addWidget(self.draft_combo, 1)
        pair_row.addWidget(self.pair_button)

        layout = QVBoxLayout(page)
        layout.addWidget(self.table, 1)
        layout.addLayout(row)
        layout.addLayout(pair_row)
        layout.addWidget(self.pair_result)
        return page

    def _add_tab(self) -> QWidget:
        page = QWidget()
        self.source_edit = QLineEdit()
        self.source_edit.setPlaceholderText("a .gguf file, an OpenVINO IR folder, a transformers checkpoint folder, or org/repository")
        self.source_edit.textChanged.connect(self._update_add_button)
        browse_folder = QPushButton("Folder…")
        browse_folder.clicked.connect(lambda: self._browse(folder=True))
        browse_file = QPushButton("GGUF file…")
        browse_file.clicked.connect(lambda: self._browse(folder=False))
        source_row = QHBoxLayout()
        source_row.addWidget(self.source_edit, 1)
        source_row.addWidget(browse_folder)
        source_row.addWidget(browse_file)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("(derived from the source)")
        self.bits_combo = QComboBox()
        for bits, label in ((4, "4-bit (INT4, smallest and fastest)"), (8, "8-bit (INT8)"), (16, "16-bit (FP16)")):
            self.bits_combo.addItem(label, bits)
        self.replace_box = QComboBox()
        self.replace_box.addItems(["Refuse if the name is taken", "Replace a model of the same name"])
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(self.add_model)
        self.add_hint = QLabel("")
        self.add_hint.setWordWrap(True)
        self.log = _log_view("Log of added models")

        form = QFormLayout()
        source_label = QLabel("Source")
        source_label.setBuddy(self.source_edit)  # (a row of a layout gets no buddy)
        form.addRow(source_label, source_row)
        form.addRow("Name", self.name_edit)
        form.addRow("Bit-width when converting", self.bits_combo)
        form.addRow("If installed", self.replace_box)
        layout = QVBoxLayout(page)
        layout.addLayout(form)
        layout.addWidget(self.add_hint)
        layout.addWidget(self.add_button, 0, Qt.AlignRight)
        layout.addWidget(self.log, 1)
        self._update_add_button()
        return page

    def _catalogue_tab(self) -> QWidget:
        from inference.models.catalogue import pairs

        page = QWidget()
        self.catalogue = pairs()
        self.catalogue_table = QTableWidget(len(self.catalogue), len(CATALOGUE_COLUMNS))
        self.catalogue_table.setAccessibleName("Recommended pairs")
        self.catalogue_table.setHorizontalHeaderLabels(CATALOGUE_COLUMNS)
        self.catalogue_table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.catalogue_table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.catalogue_table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        for row, pair in enumerate(self.catalogue):
            licence = pair.target.licence if pair.target.licence == pair.draft.licence else f"{pair.target.licence} / {pair.draft.licence}"
            cells = (pair.title, pair.target.repo_id, pair.draft.repo_id, f"{pair.target.size_mib} + {pair.draft.size_mib} MiB", licence)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(pair.note)
                self.catalogue_table.setItem(row, column, item)
        # every column as wide as its text but Pair, which takes the room left and wraps its words (a newcomer found
        # "Sizes (MB)" cut to "Sizes" and "1000 + 90" to "1000" at the table's edge, the licences only by scrolling)
        header = self.catalogue_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        header.setStretchLastSection(False)
        self.catalogue_table.setWordWrap(True)
        header.sectionResized.connect(lambda column, *_: column == 0 and self.catalogue_table.resizeRowsToContents())
        self.catalogue_note = QLabel("Select a pair to see why it fits. Pre-converted OpenVINO models download as they are; "
                                     "the others are converted at the bit-width chosen on the 'Add a model' tab (needs the "
                                     "conversion extra: pip install 'specchat[convert]').")  # fmt: skip
        self.catalogue_note.setWordWrap(True)
        self.catalogue_table.itemSelectionChanged.connect(self._show_pair_note)
        self.download_pair_button = QPushButton("Download this pair")
        self.download_pair_button.clicked.connect(self.download_pair)
        self.catalogue_table.itemSelectionChanged.connect(self._update_buttons)  # (it waits for a pair selected)
        # a pair's download: each model's progress, "installed already", the check
        self.catalogue_log = _log_view("Log of downloaded pairs")
        self.catalogue_log.setMaximumHeight(6 * self.catalogue_log.fontMetrics().lineSpacing())
        layout = QVBoxLayout(page)
        layout.addWidget(self.catalogue_table, 1)
        layout.addWidget(self.catalogue_note)
        layout.addWidget(self.download_pair_button, 0, Qt.AlignRight)
        layout.addWidget(self.catalogue_log)
        return page

    # --- installed models ----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the manifests of the store (fast: JSON files only)."""
        self._manifests = store.installed_models()
        self.table.setRowCount(len(self._manifests))
        labels = store.model_labels(self._manifests)
        for row, manifest in enumerate(self._manifests):
            cells = (
                manifest.store_name,
                manifest.use_label,
                manifest.bits_label,
                manifest.size_label,
                # whether the rolling context can shift its keys (RoPE): chats of any length; a draft head does not
                # chat (a newcomer trial read "yes" on the head's row)
                "—" if manifest.is_draft_head else LONG_CHATS[manifest.rope_supported],
                manifest.source or "?",
                manifest.created[:19].replace("T", " ") or "?",
            )
            tip = labels[str(manifest.path)] + (
                f"\nA draft head: it drafts for {manifest.head_for or '?'} only (with that model's vocabulary)"
                if manifest.is_draft_head
                else f"\nVocabulary (tokenizer) {manifest.tokenizer_label}: models with the same one can draft for each other"
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.UserRole, str(manifest.path))
                endless = (
                    f"{PAST_CONTEXT}: does not apply: a draft head does not chat, it drafts for {manifest.head_for or '?'}"
                    if manifest.is_draft_head
                    else f"{PAST_CONTEXT} {LONG_CHATS[False]}: "
                    + (manifest.rope_note or "a chat longer than the context length (n_ctx) stops")
                    if manifest.rope_supported is False
                    else f"{PAST_CONTEXT} keep going: past the context length (n_ctx) the oldest tokens (after the "
                    "first ones) are forgotten as the chat grows, a rolling window (the model's position encoding, "
                    "RoPE, can be shifted)"
                )
                if column == ENDLESS_COLUMN:
                    item.setToolTip(endless)
                else:
                    item.setToolTip(f"Source: {text}\n{tip}" if column == SOURCE_COLUMN else tip)
                self.table.setItem(row, column, item)
        current = self.target_combo.currentData()
        blocked = self.target_combo.blockSignals(True)  # (the drafts are listed once, below)
        self.target_combo.clear()
        for manifest in store.target_models(self._manifests):  # a draft head drafts only: it is never a target
            self.target_combo.addItem(labels[str(manifest.path)], str(manifest.path))
        self.target_combo.setCurrentIndex(max(self.target_combo.findData(current), 0))
        self.target_combo.blockSignals(blocked)
        self._list_drafts()
        self._update_buttons()

    def _list_drafts(self) -> None:
        """The Draft list for the target chosen: every other installed model (any pair may be checked), the draft
        the user chose kept, else the one that fits the target the window's Drafter list would preselect
        (``app.gui.draft_choices.draft_choices``: the same vocabulary, a draft head only for its own model, the
        smallest), else none. A newcomer found the shipped draft head, which an imported target
        always refuses, preselected, and the target offered as its own draft."""
        from ..draft_choices import draft_choices

        target = self.target_combo.currentData()
        by_path = {str(manifest.path): manifest for manifest in self._manifests}
        labels = store.model_labels(self._manifests)
        current = self.draft_combo.currentData()
        self.draft_combo.clear()
        for path in by_path:
            if path != target:
                self.draft_combo.addItem(labels[path], path)
        fitting, preselected = draft_choices(by_path.get(target), self._manifests)
        kept = current in {str(m.path) for m in fitting} | ({self._user_draft} - {None, target})
        chosen = current if kept else preselected
        self.draft_combo.setCurrentIndex(self.draft_combo.findData(chosen) if chosen else -1)

    def selected_path(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        return self.table.item(rows[0].row(), 0).data(Qt.UserRole)

    def ask_remove(self) -> None:
        """Ask for confirmation (a window-modal message box, not a nested event loop), then remove; the box says when
        the window uses the model (``in_use``) and what follows its removal."""
        path = self.selected_path()
        if path is None:
            self._set_status("Select a model to remove.", self.installed_page)
            return
        name = Path(path).name
        text = f"Remove {name}?\n\nThis deletes {path} and its files."
        role = self._in_use().get(str(Path(path).resolve()))
        if role is not None:
            then = (
                "SpecChat prepares it again when it next loads it" if store.reserved_name(name)
                else f"the window then chats with the default model, {store.DEFAULT_MODEL_NAME}"
                if role == "the model in use" else "replies then go without it"
            )  # fmt: skip
            text = f"{name} is {role}. Remove it?\n\nThis deletes {path} and its files; {then}."
        box = QMessageBox(QMessageBox.Warning, "Remove model", text, QMessageBox.Yes | QMessageBox.Cancel, self)
        box.button(QMessageBox.Yes).setText(REMOVE_LABEL)
        box.setDefaultButton(QMessageBox.Cancel)
        box.setObjectName("confirm-remove")
        box.finished.connect(lambda result: self._remove_confirmed(path) if result == QMessageBox.Yes else None)
        box.finished.connect(box.deleteLater)
        box.open()

    def _remove_confirmed(self, path: str) -> None:
        from inference.models.store import remove_model

        self._start(f"Removing {Path(path).name}", self.installed_page,
                    lambda report, cancel: remove_model(path, report), changes_models=True)  # fmt: skip

    def check_pair(self) -> None:
        target, draft = self.target_combo.currentData(), self.draft_combo.currentData()
        if not target or self.draft_combo.count() == 0:
            self.pair_result.setText("Install at least two models to check a pair.")
            return
        if not draft:
            self.pair_result.setText("Choose a draft to check.")
            return
        from inference.models.inspect import check_pair

        self.pair_result.setText("Checking…")
        self._start("Checking the pair", self.installed_page, lambda report, cancel: check_pair(target, draft),
                    on_success=lambda info: self._pair_ok(info, draft), on_failure=self._pair_refused)  # fmt: skip

    def _pair_ok(self, info, draft: str) -> None:
        from inference.draft_head import is_head_folder
        from inference.models.inspect import HEAD_PAIR_OK

        why = HEAD_PAIR_OK if is_head_folder(draft) else f"same tokenizer (vocabulary {info.vocab_size})"
        self.pair_result.setText(f"✔ {self.draft_combo.currentText()} can draft for {self.target_combo.currentText()}: {why}.")

    def _pair_refused(self, message: str) -> None:
        self.pair_result.setText(f"✘ Refused: {message}")
        self._set_status("", self.installed_page)  # not again as "Checking the pair failed: ..."

    # --- adding ------------------------------------------------------------------------------------

    def _browse(self, folder: bool) -> None:
        dialog = QFileDialog(self, "Choose a model folder" if folder else "Choose a GGUF file")
        if folder:
            dialog.setFileMode(QFileDialog.Directory)
            dialog.setOption(QFileDialog.ShowDirsOnly, True)
        else:
            dialog.setFileMode(QFileDialog.ExistingFile)
            dialog.setNameFilter("GGUF models (*.gguf);;All files (*)")
        dialog.fileSelected.connect(self.source_edit.setText)
        dialog.open()

    def _source_kind(self) -> tuple[str, str]:
        """``(kind, problem)`` of the Source field: :func:`inference.models.importing.classify_source`'s kind, or
        ``""`` and why it names nothing to add (``""`` when it is merely empty or unrecognised)."""
        try:
            return classify_source(self.source_edit.text()), ""
        except ModelImportError as error:
            return "", str(error)

    def _update_add_button(self) -> None:
        kind, problem = self._source_kind()
        hints = {
            "": "Enter a path or a Hugging Face repository id (organisation/name).",
            "gguf": "A GGUF file: converted to OpenVINO IR by openvino-genai (F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K weights).",
            "ir": "An OpenVINO IR folder: validated and copied into the store.",
            "checkpoint": "A transformers checkpoint folder: converted at the chosen bit-width (needs the conversion extra).",
            "repo": "A Hugging Face repository: pre-converted OpenVINO and GGUF repositories are downloaded as they are; "
            "transformers checkpoints are downloaded and converted at the chosen bit-width.",
        }
        self.add_hint.setText(problem or hints[kind])
        self.add_button.setText({"": "Add", "gguf": "Import", "ir": "Import", "checkpoint": "Convert", "repo": "Download"}[kind])
        self._update_buttons()

    def add_model(self) -> None:
        """Import, download or convert what the Source field names, in a worker thread."""
        text = self.source_edit.text().strip()
        kind, problem = self._source_kind()
        if not kind:
            self._set_status(problem or "Nothing to add: enter an existing path or an organisation/name repository id.",
                             self.add_page)  # fmt: skip
            return
        name = self.name_edit.text().strip() or None
        bits = int(self.bits_combo.currentData())
        replace = self.replace_box.currentIndex() == 1
        self.log.clear()
        if kind in ("gguf", "ir"):
            def work(report, cancel):
                return import_model(text, name, replace=replace, progress=report, cancel=cancel)

        elif kind == "checkpoint":
            from inference.models.convert import convert_checkpoint

            def work(report, cancel):
                return convert_checkpoint(text, bits, name, replace=replace, progress=report, cancel=cancel)

        else:
            work = self._download_work(text, bits, name, replace)
        self._start(f"Adding {text}", self.add_page, work, changes_models=True, log=self.log)

    @staticmethod
    def _download_work(repo_id: str, bits: int, name: str | None, replace: bool):
        from inference.models.hub import install_from_hub

        def work(report, cancel):
            return install_from_hub(repo_id, bits=bits, name=name, replace=replace, progress=report, cancel=cancel)

        return work

    def _show_pair_note(self) -> None:
        rows = self.catalogue_table.selectionModel().selectedRows()
        if rows:
            pair = self.catalogue[rows[0].row()]
            self.catalogue_note.setText(f"{pair.title}: {pair.note} (vocabulary {pair.vocab_size})")

    def download_pair(self) -> None:
        rows = self.catalogue_table.selectionModel().selectedRows()
        if not rows:
            self._set_status("Select a pair first.", self.catalogue_page)
            return
        pair = self.catalogue[rows[0].row()]
        bits = int(self.bits_combo.currentData())
        from inference.models.hub import install_from_hub

        def install(model, report, cancel) -> Path:
            if model.built_in:
                from inference.models.default_model import ensure_default_model

                report(ProgressEvent(f"{model.repo_id} is the built-in model: its {bits}-bit copy is used"))
                return ensure_default_model(bits, progress=lambda line: report(ProgressEvent(line)), cancel=cancel,
                                            download_progress=report)
            wanted = None if model.openvino else bits
            for manifest in store.installed_models():  # a model of the pair installed before is used as it is
                if manifest.details.get("repo_id") == model.repo_id and (wanted is None or manifest.bits == wanted):
                    report(ProgressEvent(f"{model.repo_id} is installed already, as {manifest.store_name}"))
                    return manifest.path
            return install_from_hub(model.repo_id, bits=wanted, progress=report, cancel=cancel)

        def work(report, cancel):
            target = install(pair.target, report, cancel)
            draft = install(pair.draft, report, cancel)
            from inference.models.inspect import check_pair

            check_pair(target, draft)
            return target, draft

        self.catalogue_log.clear()
        self._start(f"Downloading {pair.title}", self.catalogue_page, work, changes_models=True,
                    on_success=self._pair_downloaded, log=self.catalogue_log)  # fmt: skip

    def _pair_downloaded(self, folders: tuple[Path, Path]) -> None:
        target, draft = folders
        self._set_status(f"{target.name} and {draft.name} are installed and selected in the window: ready to chat "
                         "(speculative decoding with the draft model).", self.catalogue_page)  # fmt: skip
        self.pair_installed.emit(str(target), str(draft))

    # --- jobs ------------------------------------------------------------------------------------

    def busy(self) -> bool:
        """True while an operation runs."""
        return self.job is not None

    def _start(self, title: str, tab: QWidget, work, *, changes_models: bool = False, on_success=None,
               on_failure=None, log: QPlainTextEdit | None = None) -> None:
        """Run ``work(report, cancel)`` off the GUI thread (see the module doc); one operation at a time. Its
        progress and outcome go to the status line as the message of ``tab``, the page of the tab starting it, and
        to ``log``, that tab's own log (None: none)."""
        if self.job is not None:  # said until the operation's next progress, kept by no tab
            self.status.setText("Another operation is running; wait for it or cancel it.")
            return
        job = Operation(title, tab, log)
        self.job = job
        self.progress_bar.setVisible(True)
        self.progress_bar.setRange(0, 0)  # busy until the first fraction arrives
        self.cancel_button.setVisible(True)
        self.cancel_button.setEnabled(True)
        self._set_status(f"{title}…", tab)
        self._update_buttons()
        job.task = asyncio.ensure_future(self._run(job, work, changes_models, on_success, on_failure))

    async def _run(self, job: Operation, work, changes_models: bool, on_success, on_failure) -> None:
        from inference.models.errors import OperationCancelled

        title = job.title
        report = ProgressThrottle(threadsafe(partial(self._on_progress, job)))
        try:
            result = await run_in(self._executor, work, report, job.cancel)
        except OperationCancelled:
            self._finish(job, f"{title}: cancelled; nothing was added", changes_models, None, None, failed=True)
        except Exception as error:  # shown to the user; the message says what to do
            message = window_words(error)
            self._finish(job, f"{title} failed: {message}", changes_models, on_failure, message, failed=True)
        else:
            self._finish(job, f"{title}: done", changes_models, on_success, result)

    def _on_progress(self, job: Operation, message: str, fraction: float, amount: str) -> None:
        if fraction >= 0:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(fraction * 1000))
        else:
            self.progress_bar.setRange(0, 0)
        self._set_status(f"{message} {amount}" if amount else message, job.tab)  # the log: a line a step
        if job.log is not None and message != job.log.document().lastBlock().text():
            job.log.appendPlainText(message)

    def _finish(self, job: Operation, message: str, changes_models: bool, callback, value, failed: bool = False) -> None:
        if job is not self.job:
            return
        self.job = None
        self.progress_bar.setVisible(False)
        self.cancel_button.setEnabled(False)
        self.cancel_button.setVisible(False)
        self._set_status(message, job.tab)
        if job.log is not None:
            job.log.appendPlainText(message)
        if changes_models:
            self.refresh()
            if not failed:
                self.models_changed.emit()
        if callback is not None:
            callback(value)
        self._update_buttons()

    def cancel_job(self) -> None:
        """Ask the running operation to stop (it cleans up and reports 'cancelled')."""
        if self.job is not None:
            self.job.cancel.set()
            self.cancel_button.setEnabled(False)
            self._set_status("Cancelling…", self.job.tab)

    def _update_buttons(self) -> None:
        idle = self.job is None
        for attribute in ("remove_button", "pair_button", "refresh_button"):
            if hasattr(self, attribute):  # the tabs are being built
                getattr(self, attribute).setEnabled(idle)
        if hasattr(self, "add_button"):
            self.add_button.setEnabled(idle and bool(self._source_kind()[0]))
        if hasattr(self, "download_pair_button"):  # enabled with no pair selected, a click did nothing to be seen
            self.download_pair_button.setEnabled(idle and self.catalogue_table.selectionModel().hasSelection())

    def _set_status(self, text: str, tab: QWidget) -> None:
        """Say ``text`` in the status line now, as the message of ``tab`` (a tab's page), which the line shows again
        whenever that tab is chosen."""
        self._said[tab] = text
        self.status.setText(text)

    def _show_tab_status(self) -> None:
        """The status line of the tab just chosen: the running operation's progress (the progress bar and Cancel
        are the operation's, on every tab), else the tab's own last message ("" for none)."""
        tab = self.job.tab if self.job is not None else self.tabs.currentWidget()
        self.status.setText(self._said.get(tab, ""))

    def reject(self) -> None:
        """Closing the dialog cancels a running operation (it cleans up in its thread)."""
        if self.job is not None:
            self.job.cancel.set()
        super().reject()

