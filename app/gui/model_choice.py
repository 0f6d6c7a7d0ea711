"""Which model answers, and what the window says about it: the settings the window runs with, the model picker,
remote servers, the draft list, the model's state in the status bar, and the notices above the chat.

Why one module of ~630 lines: it is one controller, :class:`ModelChoice` (about 490 of them), the one owner of the
settings (see the rules below): the picker, the draft list, remote targets, the status and the notices are all
recomputed from the same settings, store and conversation shown whenever one of them changes, so splitting it would
split that one owner. The module functions above it (~60 lines) are the rules it decides by, each in one place.

Rules:
- One owner of the settings: :attr:`ModelChoice.settings`. The settings pane's edits (:meth:`ModelChoice.edited`)
  and choices made elsewhere (the picker, a notice's button, the Models dialog: :meth:`ModelChoice.apply`) go
  through it; it saves them (debounced), asks :class:`~app.gui.model_loader.ModelLoader` to reload when a model
  setting changed, and recomputes everything that depends on them.
- The picker chooses the target (``target_model``, and ``bits`` for the default model's copies); the draft list offers
  the installed models with the target's tokenizer, and which draft is preselected is decided in one place,
  :func:`~app.gui.draft_choices.draft_choices`: choosing "Speculative, draft model" without a draft takes it, so no error shows first.
  A draft head (trained for one model) is preselected for its model whatever the decoding, so that Compare on
  autoregressive decoding measures it (``AppSettings.compare_decoding``), and dropped when another target is chosen.
- K follows the drafter (:func:`k_for_the_drafter`): HEAD_K when the box's K starts drafting with a head (draft-model
  decoding; Auto chooses its own K), the general default when it stops; a K the user sets afterwards stays. Under
  a decoding that chooses K each step (Auto, Adaptive) no note says why K changed: the box's line says Auto's.
- A remote OpenAI-compatible server is a target too (``AppSettings.use_remote``): the window asks it for its models
  in the background; one that does not answer (or a reply cannot connect to) is marked in the picker ("not
  reachable") until it answers again (a reply to it included), and
  Compare is off (the button says why) unless the server is SpecChat's, which offers both modes.
- Notices above the chat are derived from the state, never left over: :meth:`ModelChoice.refresh_notices` computes
  them from the conversation shown, the settings and the store whenever one of them changes. A conversation last
  answered with another model says so (naming that model and its bit-width, with a Switch button); a draft model
  measured slower than plain decoding in the conversation shown says so while that draft is chosen. A notice the
  user dismissed stays dismissed while it is about the same thing (the same conversation shown; the same pair).
- A target model no longer installed (removed in the Models dialog, or from the command line before this start) is
  not waited for: the window chooses the default model instead (at the bit-width of the settings) and a notice names
  the model gone (:func:`gone_target`), until another target is chosen.
- An error said in the composer about the previous target (a remote server that refused the connection) is cleared
  when the target changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QLabel, QMessageBox, QProgressBar, QWidget

from inference.draft_head import HEAD_K, is_head_folder
from inference.models.default_model import default_model_dir
from inference.models.errors import ModelImportError
from inference.models.progress import ProgressEvent
from inference.models.store import (
    SUPPORTED_BITS,
    ModelManifest,
    find_model,
    installed_models,
    readable_name,
    target_models,
)
from inference.settings import MAX_K, Decoding, SpeculativeSettings

from ..backends.remote_errors import RemoteError, shown_url
from ..backends.remote_keys import load_api_key, save_api_key, save_secret_url
from ..backends.worker import ModelInfo
from ..background import TaskSet
from .draft_choices import draft_choices, never_faster
from .draft_speed import DraftSpeedEvidence, draft_speed_ratio
from .history_db import HistoryDB
from .model_loader import ModelLoader
from .reply_controller import ReplyController
from .reply_format import DRAFTER_NAMES, answered_with
from .sampling_presets import model_default
from .settings_store import AppSettings, SettingsStore
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.dialogs import ModelProgressDialog, message_box
from .widgets.model_notice import ModelNotice
from .widgets.model_picker import ModelPicker
from .widgets.settings_pane import SettingsPane

logger = logging.getLogger(__name__)

SETTINGS_SAVE_DELAY_MS = 300


def gone_target(settings: AppSettings) -> str:
    """The target model ``settings`` choose when it is no longer installed (neither an installed model's name nor a
    folder, :func:`inference.models.store.find_model`), else ""; "" too for the default model and while a remote
    server is the target."""
    if not settings.target_model or settings.use_remote:
        return ""
    try:
        find_model(settings.target_model)
    except ModelImportError:
        return settings.target_model
    return ""


def compare_words(settings: AppSettings) -> str:
    """What a Compare runs, for its menu item and button (``AppSettings.compare_decoding``): ``plain vs Auto
    decoding``, or ``plain vs speculative decoding (prompt lookup)`` (``draft model``, ``draft head``) when another
    speculative decoding is chosen (newcomer trial: the menu said "plain vs speculative" where Compare ran Auto)."""
    decoding = settings.compare_decoding
    if decoding is Decoding.AUTO:
        return "plain vs Auto decoding"
    drafter = "head" if decoding is Decoding.DRAFT_MODEL and settings.draft_is_a_head else decoding.drafter
    return f"plain vs speculative decoding ({DRAFTER_NAMES.get(drafter, drafter)})"


def k_for_the_drafter(previous: AppSettings, settings: AppSettings) -> AppSettings:
    """``settings`` with K following a change of drafter: HEAD_K (``inference.draft_head``) when the box's K starts
    drafting with a draft head (``AppSettings.drafts_with_head``: draft-model decoding, not Auto), the general
    default K when it stops; unchanged otherwise, so a K the user set for the drafter in use stays."""
    if settings.drafts_with_head == previous.drafts_with_head:
        return settings
    return settings.with_values(k=HEAD_K if settings.drafts_with_head else SpeculativeSettings().k)


class ModelChoice(QObject):
    """The window's settings and model choice (see the module doc).

    Args:
        settings: the settings to start with (``store.load()``); store: the settings file.
        db: the chat history (which model answered the conversation shown).
        models: the model loader (reloads when a model setting changes; what is loaded).
        replies: the reply controller (remote servers: their keys this session, which are SpecChat's, a backend).
        tasks: where its coroutines run (remote servers asked in the background).
        model_picker, settings_pane, model_notice, composer: the widgets it drives; chat_view: which conversation
            is shown (its notices); model_label, busy_bar: the model's state in the status bar.
        say: ``say(text, milliseconds)`` shows a line in the status bar.
        parent: the Qt parent, and the parent of its dialogs (progress, Models, remote server, no model).

    Attributes:
        settings: the settings the window runs with now.
        missing_target: the target model chosen that is no longer installed, while the default model stands in for it
            (its notice shows); "" otherwise.
        unreachable: remote base URLs that did not answer, with why (the picker marks them).
        dismissed: ``(kind, about)`` of notices the user dismissed.

    Signals:
        compare_available(bool): whether Compare can run on the target chosen (see :meth:`update_compare`).
        compare_named(str): what Compare runs now (:func:`compare_words`), when the settings change.
    """

    compare_available = Signal(bool)
    compare_named = Signal(str)

    def __init__(
        self,
        settings: AppSettings,
        store: SettingsStore,
        db: HistoryDB,
        models: ModelLoader,
        replies: ReplyController,
        tasks: TaskSet,
        model_picker: ModelPicker,
        settings_pane: SettingsPane,
        model_notice: ModelNotice,
        composer: Composer,
        chat_view: ChatView,
        model_label: QLabel,
        busy_bar: QProgressBar,
        say: Callable[[str, int], None],
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.store, self._db, self._models, self._replies, self._tasks = store, db, models, replies, tasks
        self._picker, self._pane, self._notice, self._composer = model_picker, settings_pane, model_notice, composer
        self._view, self._label, self._busy, self._parent = chat_view, model_label, busy_bar, parent
        self.say = say
        self.missing_target = gone_target(settings)  # the window starts with the default model instead
        self.settings = replace(settings, target_model="") if self.missing_target else settings
        if self.missing_target:
            settings_pane.set_settings(self.settings)
        self.unreachable: dict[str, str] = {}
        replies.remote_reached.connect(self._remote_reached)
        self.dismissed: set[tuple[str, str]] = set()
        self._slow_drafts: dict[int, tuple[DraftSpeedEvidence, tuple[str, str]]] = {}  # per conversation
        self.progress_dialog: ModelProgressDialog | None = None
        self.models_dialog = None
        self._state = ("", model_label.text())  # the model loader's last state and its line (show_state)
        self._save_timer = QTimer(self)
        self._save_timer.setSingleShot(True)
        self._save_timer.timeout.connect(self.save)

    # --- settings ---------------------------------------------------------------------------------

    def edited(self, settings: AppSettings) -> None:
        """The settings pane's settings changed; the target model is the picker's (a new bit-width in the pane
        chooses the default model at that bit-width)."""
        previous = self.settings
        new_bits = settings.bits != previous.bits
        edited = replace(
            settings,
            target_model="" if new_bits else previous.target_model,
            remote_url=previous.remote_url,
            remote_model=previous.remote_model,
            use_remote=previous.use_remote and not new_bits,
            theme=previous.theme,
        )
        self.settings = k_for_the_drafter(previous, edited)
        if self.settings != edited:
            self._pane.set_settings(self.settings)
            self._note_k(edited)
        self._applied(previous)

    def apply(self, settings: AppSettings, announce: bool = True) -> None:
        """Apply settings chosen outside the settings pane (the picker, a notice, the Models dialog); ``announce``
        False: chosen by the window itself (the draft head preselected for a model), no word of new settings in the
        status bar (a newcomer's first start read "The model will be loaded with the new settings" with nothing
        changed)."""
        previous = self.settings
        asked, settings = settings, k_for_the_drafter(previous, settings)
        if settings == previous:
            return
        self.settings = settings
        self._pane.set_settings(settings)  # the pane shows them (and emits them back, unchanged)
        self._note_k(asked)
        self._applied(previous, announce)

    def _note_k(self, asked: AppSettings) -> None:
        """Say under K why it is not the K of ``asked`` (``k_for_the_drafter`` changed it with the drafter). A K out
        of range came from the settings file (the pane emits no invalid K): the note says so, not "was -5" (newcomer
        trial: K -5 in the file showed "Set to 1 for the draft head (was -5)"). Under a decoding that chooses K each
        step (Auto, Adaptive) the box's K is not used: no note, and an earlier one goes, so its line says so."""
        k, asked_k = self.settings.value("k"), asked.value("k")
        generation = self.settings.generation
        if k != asked_k and (generation.decoding == Decoding.AUTO or generation.speculative.adaptive):
            self._pane.note_k("")
        elif k != asked_k:
            drafter = "the draft head" if self.settings.drafts_with_head else "this drafter"
            if 1 <= asked_k <= MAX_K:
                self._pane.note_k(f"Set to {k} for {drafter} (was {asked_k}).")
            else:
                self._pane.note_k(f"Set to {k} for {drafter}: the settings file's K, {asked_k}, is out of range (1 to {MAX_K}).")

    def _applied(self, previous: AppSettings, announce: bool = True) -> None:
        settings = self.settings
        self._save_timer.start(SETTINGS_SAVE_DELAY_MS)
        if settings.model_key() != previous.model_key():
            self._models.load_later(settings)
            if announce and not self._models.is_ready_for(settings) and not self._models.waits_for_reply:
                # one message: while a reply runs, the loader's state says "The model will reload after this reply"
                self.say("The model will be loaded with the new settings, in the background", 3000)  # (also the first load)
        if (settings.target_name, settings.target_device) != (previous.target_name, previous.target_device):
            self.missing_target = ""  # another target chosen: the notice about the one gone is over
            self.refresh_models()
            self._composer.clear_error()  # what the previous target said is no longer true
            self._picker.flag(None)
        remote_changed = settings.use_remote != previous.use_remote or settings.remote_url != previous.remote_url
        if remote_changed or settings.remote_model != previous.remote_model:
            self._show_model()
        if remote_changed or compare_words(settings) != compare_words(previous):
            self.update_compare()
        self.refresh_notices()

    def save(self) -> None:
        """Write the settings to their file now (edits are saved ``SETTINGS_SAVE_DELAY_MS`` after the last)."""
        self._save_timer.stop()
        try:
            self.store.save(self.settings)
        except OSError as error:
            self.say(f"Could not save the settings to {self.store.path}: {error}", 10000)

    # --- the model's state ------------------------------------------------------------------------

    def show_state(self, state: str, text: str) -> None:
        """Show the model loader's state: a short line in the status bar, the details in its tooltip; while a remote
        server is chosen, the line names it as the picker does (:meth:`_show_model`)."""
        self._state = (state, text)
        self._show_model()

    def _show_model(self) -> None:
        """The status bar's model: the remote server chosen (``MODEL on HOST (remote)``, as the picker names it: a
        trial read the local model's "SmolLM2-135M-Instruct · 4-bit · exact" there while the server answered), else
        the local model loader's state (:meth:`show_state`)."""
        state, text = self._state
        self._busy.setVisible(state == "loading")
        info = self._models.info
        if self.settings.use_remote and self.settings.remote_model:
            remote = self.settings.remote_target().describe()
            self._label.setText(remote)
            self._label.setToolTip(f"Replies come from {remote}\n\nThe model on this computer: {text}")
        elif state == "ready" and info is not None:
            kind = "exact" if info.precision.exact else "fast"
            self._label.setText(f"{readable_name(info.spec.target_dir)} · {kind}")  # (the picker's name for it)
            self._label.setToolTip(
                f"{text}\n\n{kind.capitalize()}: "
                + ("greedy speculative replies equal plain decoding's, token for token" if info.precision.exact
                   else "reduced precision: faster, but greedy speculative replies may differ from plain decoding's")
            )  # fmt: skip
        else:
            self._label.setText(text)
            self._label.setToolTip(text)

    def loaded(self, info: ModelInfo) -> None:
        """Models were loaded: the pane shows the model's sampling defaults, its length and precision."""
        pane = self._pane
        pane.sampling.set_model_defaults(model_default(info.spec.target_dir))
        pane.set_max_position_embeddings(info.max_position_embeddings)
        pane.set_precision_in_use(info.precision)

    def refused(self, field: str, message: str) -> None:
        """The loader refused a setting: flag it where it is chosen."""
        if field == "target_model":
            self._picker.flag(message)
        else:
            self._pane.flag(field, message)

    def fetch_progress(self, event: ProgressEvent) -> None:
        """A step of the default model's fetch: shown in a progress dialog (Cancel stops it)."""
        if self.progress_dialog is None:
            self.progress_dialog = ModelProgressDialog(self._parent, "SpecChat: preparing the model")
            self.progress_dialog.canceled.connect(self._models.cancel_fetch)
            self.progress_dialog.show()
        self.progress_dialog.show_event(event)
        self.say(event.message, 5000)

    def close_progress(self) -> None:
        """The fetch is over: close its dialog."""
        if self.progress_dialog is not None:
            self.progress_dialog.blockSignals(True)  # closing is not cancelling
            self.progress_dialog.close()
            self.progress_dialog.deleteLater()
            self.progress_dialog = None

    async def ask_retry(self, what: str, details: str, cancelled: bool = False) -> bool:
        """The dialog after a failure to fetch or load the model (``what`` it could not do, ``details`` why), or after
        the user cancelled the first fetch (``cancelled``: ``what`` was cancelled, e.g. "the download"); True if the
        user chose to try again."""
        buttons = QMessageBox.StandardButton
        if cancelled:  # the user's choice, not a failure: said as such, nothing to fix
            icon, default, name = QMessageBox.Icon.Information, buttons.Close, "modelCancelled"
            text = f"{what[:1].upper()}{what[1:]} was cancelled."
            informative = ("SpecChat needs its default model to chat. Prepare it now, or send a message later: that "
                           "prepares it too. Your chats are safe meanwhile.")
        else:
            icon, default, name = QMessageBox.Icon.Critical, buttons.Retry, "modelError"
            text = f"SpecChat could not {what}."
            informative = (f"{details}\n\nYour chats are safe: you can read and export them without a model. Fix the "
                           "problem, then choose Retry (or change the model settings).")
        answer = await message_box(self._parent, icon, "SpecChat: no model", text, buttons.Retry | buttons.Close,
                                   default, informative=informative, object_name=name,
                                   labels={buttons.Retry: "&Prepare now"} if cancelled else None)
        return answer == buttons.Retry

    # --- the store --------------------------------------------------------------------------------

    def refresh_models(self) -> None:
        """Re-read the model store: the picker lists every installed model but draft heads (a head only drafts),
        the draft list those with the target's tokenizer (a draft-model decoding whose draft no longer fits gets the preselected one).
        A target no longer installed is replaced by the default model (:func:`gone_target`)."""
        gone = gone_target(self.settings)
        if gone:
            self.apply(replace(self.settings, target_model=""))
            self.missing_target = gone
        models = _installed_models()
        settings = self.settings
        picker = self._picker
        remote = settings.remote_target().describe() if settings.remote_model else None
        root = settings.remote_target().root if settings.remote_model else ""
        picker.set_remote(remote, settings.use_remote, self.unreachable.get(root))
        picker.set_models(target_models(models), settings.target_model, settings.bits)
        picker.set_device(None if settings.use_remote else settings.target_device)
        target = self._target_manifest(models)
        drafts, preselected = draft_choices(target, models)
        self._pane.set_models(drafts, preselected, {str(m.path) for m in drafts if never_faster(target, m)})
        settings = self.settings  # (the pane drops a draft it no longer offers: the settings may have changed)
        if settings.draft_model not in {str(m.path) for m in drafts}:
            head_preselected = bool(preselected) and is_head_folder(preselected)
            wanted = settings.generation.decoding == Decoding.DRAFT_MODEL or head_preselected
            beside = not settings.draft_model or Path(settings.draft_model).parent == Path(preselected).parent
            if preselected and wanted and beside:
                self.apply(replace(settings, draft_model=preselected), announce=False)
            elif settings.draft_is_a_head and settings.generation.decoding != Decoding.DRAFT_MODEL:
                # another model's head: Compare drafts by prompt lookup
                self.apply(replace(settings, draft_model=""), announce=False)
        self.refresh_notices()

    def _target_manifest(self, models: list[ModelManifest]) -> ModelManifest | None:
        """The chosen target's manifest (for the default model not built yet at ``bits``: another copy's, moved to
        the folder it will have, so that the copy itself can draft for it)."""
        picker = self._picker
        manifest = picker.manifest(self.settings.target_model, self.settings.bits)
        if manifest is None and not self.settings.target_model:
            copy = next((m for m in (picker.manifest("", bits) for bits in SUPPORTED_BITS) if m is not None), None)
            manifest = replace(copy, path=default_model_dir(self.settings.bits)) if copy is not None else None
        return manifest

    def choice_for(self, name: str) -> tuple[str, int] | None:
        """The picker's choice ``(target_model, bits)`` for a model's store name; None if it is not installed."""
        for bits in SUPPORTED_BITS:
            if name == default_model_dir(bits).name:
                return ("", bits)
        if any(m.store_name == name for m in _installed_models()):
            return (name, self.settings.bits)
        return None

    def show_models(self) -> None:
        """Open the Models dialog (not modal); the model choices follow what it adds or removes."""
        from .widgets.models_dialog import ModelsDialog

        if self.models_dialog is None:
            self.models_dialog = ModelsDialog(self._parent, in_use=self.models_in_use)
            self.models_dialog.models_changed.connect(self.refresh_models)
            self.models_dialog.pair_installed.connect(self.select_pair)
        self.models_dialog.show()
        self.models_dialog.raise_()
        self.models_dialog.activateWindow()

    def models_in_use(self) -> dict[str, str]:
        """The folders (resolved) of the models chosen or loaded now, with what they are: ``"the model in use"`` (the
        target; none while a remote server answers) or ``"the draft in use"`` (the Models dialog's confirmation
        of their removal says it)."""
        settings, spec = self.settings, self._models.worker.spec
        targets = [] if settings.use_remote else [spec.target_dir] if spec is not None else []
        drafts = [spec.draft_dir] if spec is not None and spec.draft_dir is not None else []
        if not settings.use_remote:
            try:
                targets.append(find_model(settings.target_model) if settings.target_model else default_model_dir(settings.bits))
            except ModelImportError:
                pass  # no longer installed
        if settings.uses_draft_model:
            drafts.append(Path(settings.draft_model))
        in_use = {str(Path(folder).resolve()): "the draft in use" for folder in drafts}
        return in_use | {str(Path(folder).resolve()): "the model in use" for folder in targets}

    def select_pair(self, target: str, draft: str) -> None:
        """Chat with this target and draft (folders in the store): speculative decoding with the draft model."""
        self.refresh_models()
        settings = replace(self.settings, target_model=Path(target).name, draft_model=draft)
        self.apply(settings.with_values(decoding=Decoding.DRAFT_MODEL))
        self.say(f"Chatting with {Path(target).name}, drafted by {Path(draft).name}", 10000)

    # --- targets ----------------------------------------------------------------------------------

    def choose_target(self, target_model: str, bits: int) -> None:
        """Chat with this target from the next reply on (loaded in the background; ``target_model`` "" = the
        default model at ``bits``)."""
        self.apply(replace(self.settings, target_model=target_model, bits=bits, use_remote=False))

    def restore_models(self, loaded: AppSettings) -> None:
        """The fetch of the models chosen was cancelled while those ``loaded`` had been loaded with stay in use:
        choose them again (the picker and the pane show them), saying so."""
        self.apply(replace(
            self.settings, target_model=loaded.target_model, bits=loaded.bits, use_remote=False,
            target_device=loaded.target_device, precision=loaded.precision,
            kv_cache_precision=loaded.kv_cache_precision, draft_model=loaded.draft_model,
            draft_device=loaded.draft_device,
        ))  # fmt: skip
        self.say(f"Cancelled: still chatting with {self._picker.label(loaded.target_model, loaded.bits)}", 10000)

    def choose_remote(self) -> None:
        """Chat with the remote server configured (``remote_url``, ``remote_model``) from the next reply on."""
        if self.settings.remote_model:
            self.apply(replace(self.settings, use_remote=True))
            self._tasks.spawn(self.detect_remote())

    async def remote_dialog(self) -> bool:
        """Ask for a remote server (base URL, API key, model) and chat with it; True when one was chosen (its key
        is stored by ``app.backends.remote_keys``, never in the settings file)."""
        from .widgets.remote_dialog import ask_remote_server

        settings, replies = self.settings, self._replies
        url = settings.remote_target().root

        def stored_key(url: str) -> str:  # the key entered this session for that server, else the one stored
            shown = shown_url(url)
            return replies.remote_keys.get(shown, load_api_key(shown) if shown else "")

        secret_url = replies.secret_url(settings.remote_url) if settings.remote_url else ""
        choice = await ask_remote_server(
            self._parent, self._tasks.spawn, secret_url, settings.remote_model, stored_key(url), stored_key
        )
        if choice is None:
            self._picker.select(self.settings.target_model, self.settings.bits)
            return False
        shown = shown_url(choice.base_url)  # what the settings file keeps; the secrets go where the key goes
        replies.remote_keys[shown] = choice.api_key
        replies.remote_urls[shown] = choice.base_url
        unsaved = ""
        try:
            save_api_key(shown, choice.api_key)
            if shown != choice.base_url:
                save_secret_url(shown, choice.base_url)
        except OSError as error:
            unsaved = f"Could not store the API key ({error}): it is used this session only. "
        if choice.specchat is not None:
            replies.remote_specchat[shown] = choice.specchat
        self.unreachable.pop(shown, None)  # it just answered
        self.apply(replace(settings, remote_url=shown, remote_model=choice.model, use_remote=True))
        self.refresh_models()
        self.update_compare()
        if choice.specchat is None:
            self._tasks.spawn(self.detect_remote())
        self.say(f"{unsaved}Replies now come from {self.settings.target_name}", 15000)
        return True

    async def detect_remote(self) -> None:
        """Ask the remote server configured for its models: whether it answers (the picker marks one that does not)
        and whether it is SpecChat's (Compare follows)."""
        settings = self.settings
        if not settings.remote_model:
            return
        backend = self._replies.remote_backend(replace(settings, use_remote=True))
        root = settings.remote_target().root  # (the URL shown: the backend's holds its secrets)
        try:
            await backend.list_models()
        except RemoteError as error:
            self.unreachable[root] = str(error)
            if self.settings.use_remote:
                self.say(f"Remote server: {error}", 15000)
        else:
            self.unreachable.pop(root, None)
            self._replies.remote_specchat[root] = backend.specchat
        self.refresh_models()
        self.update_compare()

    def _remote_reached(self, root: str, problem: str) -> None:
        """A reply reached the remote server at ``root`` (``problem`` "") or could not connect to it: the picker
        marks it "not reachable" (a trial's reply to a server just killed left it unmarked) or no longer."""
        if self.unreachable.get(root, "") == problem:
            return
        if problem:
            self.unreachable[root] = problem
        else:
            self.unreachable.pop(root, None)
        self.refresh_models()

    def update_compare(self) -> None:
        """Compare is off on a remote server that does not offer both decoding modes (the button says why); its
        menu item and button say what it runs (:func:`compare_words`). The settings pane's fields of this computer's
        models follow where replies come from (``SettingsPane.show_remote``)."""
        settings = self.settings
        specchat = self._replies.remote_specchat.get(settings.remote_target().root, False)
        self._pane.show_remote(specchat if settings.use_remote else None)
        self._composer.set_compare_words(compare_words(settings))
        self.compare_named.emit(compare_words(settings))
        reason = None
        if settings.use_remote and not self._replies.remote_specchat.get(settings.remote_target().root, False):
            reason = (
                f"Compare needs a server that offers plain and speculative decoding (SpecChat's does); "
                f"{settings.remote_target().host} does not say it does"
            )
        self._composer.set_compare_unavailable(reason)
        self.compare_available.emit(reason is None)

    # --- notices ----------------------------------------------------------------------------------

    def reply_measured(self, conversation_id: int, stats: dict, rates) -> None:
        """A reply ended: count how fast its draft model was (``draft_speed.draft_speed_ratio``) in the
        conversation's evidence about that pair of models (a new pair starts afresh), then recompute the notices."""
        ratio = draft_speed_ratio(stats, rates)
        if ratio is not None:
            pair = (self.settings.target_name, self.settings.draft_model)
            evidence, measured_pair = self._slow_drafts.get(conversation_id, (DraftSpeedEvidence(), pair))
            evidence = evidence if measured_pair == pair else DraftSpeedEvidence()
            evidence.add(ratio)
            self._slow_drafts[conversation_id] = (evidence, pair)
        self.refresh_notices()

    def refresh_notices(self) -> None:
        """Show the notice the current state calls for (the conversation shown, the settings, the store), or none."""
        notice = self._missing_target_notice() or self._conversation_notice() or self._slow_draft_notice()
        if notice is None or notice[:2] in self.dismissed:
            self._notice.dismiss()
        else:
            kind, about, text, action, callback = notice
            self._notice.show_notice(kind, text, action, callback, about=about)

    def dismissed_notice(self, kind: str, about: str) -> None:
        """The user closed a notice: it stays closed for what it was about (a notice about the conversation shown,
        until another is shown; a slow draft, for that pair of models)."""
        self.dismissed.add((kind, about))

    def conversation_shown(self, _conversation_id: int | None) -> None:
        """Another conversation is shown: its notices are computed afresh (one dismissed earlier may show again)."""
        self.dismissed = {(kind, about) for kind, about in self.dismissed if kind != "conversation"}
        self.refresh_notices()

    def _missing_target_notice(self):
        """Said while the window chats with the default model because the target chosen is no longer installed
        (:attr:`missing_target`), naming both."""
        if not self.missing_target:
            return None
        default = " · ".join(self._picker.label("", self.settings.bits).split(" · ")[:2])  # name and bit-width
        text = f"{Path(self.missing_target).name} is no longer installed: chatting with the default model, {default}, instead."
        return "missing_target", self.missing_target, text, "", None

    def _conversation_notice(self):
        """Said when the conversation shown was last answered with another model than the one chosen. It names that
        model only (with its bit-width, not its size): the picker beside it shows the one chosen, and the notice
        fits two lines of a 1100 px window."""
        conversation_id = self._view.conversation_id
        messages = self._db.messages(conversation_id) if conversation_id is not None else []
        answered = (answered_with(m.stats) for m in reversed(messages) if m.role == "assistant")
        last = next((name for name in answered if name), "")
        settings = self.settings
        if not last or last == settings.target_name:
            return None
        if settings.use_remote and settings.remote_target().is_label(last):  # (recorded under the model's whole id)
            return None
        about = f"{conversation_id}:{last}:{settings.target_name}"
        choice = self.choice_for(last)
        if choice is None and settings.remote_model and settings.remote_target().is_label(last):
            text = f"This chat was answered by {last}, not the model chosen now."
            return "conversation", about, text, "Switch to it", self.choose_remote
        if choice is None and last.endswith(" (remote)"):  # a server chosen before (the picker keeps one)
            return "conversation", about, f"This chat was answered by {last}, a server no longer chosen.", "", None
        if choice is None:
            return "conversation", about, f"This chat was answered with {last}, which is no longer installed.", "", None
        then = " · ".join(self._picker.label(*choice).split(" · ")[:2])  # the name and bit-width, not the size
        text = f"This chat was answered with {then}, not the model chosen now."
        return "conversation", about, text, "Switch to it", lambda: self.choose_target(*choice)

    def _slow_draft_notice(self):
        """Said while the conversation shown measured the draft model slower than plain decoding over several
        replies (``DraftSpeedEvidence.slow``: never from one) and that draft is still what replies (draft-model
        decoding) or a Compare (plain decoding with a draft head) would use. It suggests only what is not chosen
        already."""
        measured = self._slow_drafts.get(self._view.conversation_id)
        settings = self.settings
        pair = (settings.target_name, settings.draft_model)
        drafts_now = settings.compare_decoding == Decoding.DRAFT_MODEL
        if measured is None or not drafts_now or measured[1] != pair or not measured[0].slow():
            return None
        evidence = measured[0]
        ratio, low, high = evidence.interval()
        measure = (
            f"The draft {'head' if settings.draft_is_a_head else 'model'} made this chat's last "
            f"{len(evidence.ratios)} replies {ratio:.2f}x as fast as plain decoding (95% interval {low:.2f}-"
            f"{high:.2f}; {Path(pair[1]).name} drafting for {pair[0]}): it costs more than it saves here."
        )
        if settings.generation.decoding == Decoding.AUTOREGRESSIVE:  # measured by a Compare: replies are plain already
            advice = "Keep plain decoding, or try Speculative (prompt lookup)."
        else:
            advice = "Try Speculative (prompt lookup), or plain decoding."
        return "slow_draft", f"{pair[0]}:{pair[1]}", f"{measure} {advice}", "Use prompt lookup", self.use_prompt_lookup

    def use_prompt_lookup(self) -> None:
        """Speculative decoding with prompt lookup instead of the draft model."""
        self.apply(self.settings.with_values(decoding=Decoding.PROMPT_LOOKUP))


def _installed_models() -> list[ModelManifest]:
    try:
        return installed_models()
    except OSError:
        return []
