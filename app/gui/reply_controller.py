"""Replies of the window: sending, regenerating, re-sending an edited message, comparing, stopping.

Rules:
- At most one reply is generated at a time (:attr:`ReplyController.active`); a request while one streams is
  refused with a reason (:meth:`ReplyController.refusal`).
- The user message is saved before generation starts, and the reply's row is created (empty, ``streaming``)
  before the first token and kept up to date by a :class:`~app.gui.reply_recorder.ReplyRecorder`, so a crash
  loses at most half a second of it.
- A comparison generates the reply twice with the user's seed (unseeded if none: see ``start_reply``), plain then
  Auto (or the speculative decoding chosen), each from an empty KV cache, and says why greedy texts differ.
- The controller owns the data (history rows, the recorder, the worker's stream); the window owns the widgets
  and follows the signals.
- With a remote target (``AppSettings.use_remote``) replies stream from that server through
  :class:`~app.backends.remote.RemoteBackend` instead of the inference worker, into the same rows; a
  :class:`~app.backends.remote_errors.RemoteError` after text arrived (a stream cut mid-reply, a server that stops
  sending) keeps the partial reply, saved as ``stopped`` with the error in its statistics. A comparison on a remote
  server compares texts (the API sends no token ids) and cannot explain where they part.
- A reply the database refuses to save (full disk, locked) keeps streaming and is shown whole; ``save_failed``
  says why, and it is saved again at each later save and by :meth:`ReplyController.retry_unsaved` once it ended.
  Requests that write (start a reply, regenerate, rewrite) raise ``sqlite3.Error`` before changing anything shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QObject, Signal

from inference.constraints import json_object_grammar
from inference.model import ModelLoadError
from inference.models.errors import ModelImportError
from inference.models.store import find_model, readable_name
from inference.rope import RopeUnsupportedError
from inference.settings import Decoding, SettingError

from ..backends.protocol import GenerationRequest, ReplySource
from ..backends.remote import READ_TIMEOUT_S, RemoteBackend
from ..backends.remote_errors import RemoteError
from ..backends.remote_keys import load_api_key, load_secret_url
from ..backends.remote_stream import REMOTE_MODE
from ..backends.worker import InferenceWorker
from ..background import TaskSet
from .chat_titles import title_from
from .history_db import HistoryDB, write_error_text
from .history_rows import ROOT, Message
from .model_loader import ModelLoader
from .reply_format import answered_with_label, can_continue
from .reply_recorder import ReplyRecorder
from .settings_store import AppSettings
from .store_words import MAIN_WINDOW_ADVICE, window_words

logger = logging.getLogger(__name__)

#: Errors of one reply that are shown in place (the conversation stays as it was saved).
GENERATION_ERRORS = (ValueError, RuntimeError, RopeUnsupportedError, ModelLoadError)


@dataclass
class ActiveReply:
    """The reply being generated (at most one at a time).

    Attributes:
        conversation_id: its conversation; recorder: its text and statistics; compare: two runs; continued: the
        text of the reply being continued ("" for a new reply);
        cancel: set to stop it; task: the coroutine generating it; closed: the window closed (nothing more is
        shown or recorded).
    """

    conversation_id: int
    recorder: ReplyRecorder
    compare: bool
    continued: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task | None = None
    closed: bool = False


class ReplyController(QObject):
    """Generates replies into the history (see the module doc).

    Args:
        db: the chat history; worker: the inference thread; models: the window's model loader;
        tasks: where its coroutines run; settings: returns the window's current settings.

    Signals:
        started(Message): a reply started (its empty, streaming row).
        updated(Message, text): the reply as it stands (``stats["live"]`` says what happens now) and its text so
            far (the autoregressive run's during a comparison's first run).
        run_started(mode, keep_previous): one run of the reply begins (``ar`` or ``spec``; ``REMOTE_MODE`` on a
            server not SpecChat's; a comparison's second run keeps the first one's graph); events(list[Event]): a
            batch of its engine events; run_finished().
        failed(conversation_id, message_id, error, setting, server_stopped): nothing was generated; the reply's row
            was deleted. ``setting`` is the flat name of the setting the error concerns (``SettingError.field``; ""
            if none); ``server_stopped``: the remote server said it is stopping (``RemoteError.server_stopped``).
        finished(Message | None): the reply ended (complete, stopped or error); None after ``failed``.
        remote_reached(base_url, problem): a remote reply reached its server (``problem`` "": it answered) or could
            not connect to it (``problem``: why); ``base_url`` as the settings show it. Not sent when neither is known
            (stopped before the server answered, a TLS error).
        save_failed(text): a reply could not be saved (``write_error_text``: what happened, what to do); it is kept
            on screen and saved again later. saved_again(): every reply that had failed to save is now saved.

    Attributes:
        unsaved: recorders of replies that ended while the database refused them (retried by ``retry_unsaved``).
        remote_specchat: per remote base URL, whether it is a SpecChat server (found by the window with
            ``RemoteBackend.list_models``): its replies then request the decoding mode and report acceptance.
        remote_read_timeout_s: how long a remote server may stay silent before its reply is given up.
        remote_keys: API keys entered this session, per base URL (used before ``app.backends.remote_keys``' stored ones, so
            that a key the keyring or the file refused still works until SpecChat quits).
        remote_urls: base URLs with secrets in their query entered this session, per base URL as shown (the
            settings' ``remote_url``, its secrets ``***``), used before those ``app.backends.remote_keys`` keeps.
    """

    started = Signal(object)
    updated = Signal(object, str)
    run_started = Signal(str, bool)
    events = Signal(object)
    run_finished = Signal()
    failed = Signal(int, int, str, str, bool)
    finished = Signal(object)
    remote_reached = Signal(str, str)
    save_failed = Signal(str)
    saved_again = Signal()

    def __init__(
        self,
        db: HistoryDB,
        worker: InferenceWorker,
        models: ModelLoader,
        tasks: TaskSet,
        settings: Callable[[], AppSettings],
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.db = db
        self.worker = worker
        self.models = models
        self._tasks = tasks
        self._settings = settings
        self.active: ActiveReply | None = None
        self.unsaved: list[ReplyRecorder] = []
        self.remote_specchat: dict[str, bool] = {}
        self.remote_keys: dict[str, str] = {}
        self.remote_urls: dict[str, str] = {}
        self.remote_read_timeout_s = READ_TIMEOUT_S
        self._reported_save_error: str | None = None

    # --- requests ---------------------------------------------------------------------------------

    def refusal(self, text: str) -> str | None:
        """Why a message ``text`` cannot be sent now (a reply streams, it is empty), or None."""
        if self.active is not None:
            return "A reply is being generated: wait for it, or press Stop (Esc)."
        if not text.strip():
            return "Type a message first."
        return None

    def new_conversation(self, text: str, system_prompt: str, json_output: bool = False) -> int:
        """Create the conversation a first message ``text`` starts (titled after it); returns its id."""
        return self.db.create_conversation(title_from(text), system_prompt, json_output)

    def add_user_message(self, conversation_id: int, text: str) -> Message:
        """Save a user message (before its reply is generated); returns it."""
        return self.db.message(self.db.add_message(conversation_id, "user", text))

    def unanswered(self, conversation_id: int, text: str) -> Message | None:
        """The conversation's last message if it is a user message with exactly ``text`` and no reply after it (its
        reply failed to start): sending the same text again retries it instead of saving it a second time."""
        messages = self.db.messages(conversation_id)
        last = messages[-1] if messages else None
        return last if last is not None and last.role == "user" and last.content == text else None

    def retry_unsaved(self) -> bool:
        """Save again the replies that ended while the database refused them; True when none is left unsaved."""
        self.unsaved = [recorder for recorder in self.unsaved if not recorder.save()]
        self._say_if_saved_again()
        return not self.unsaved

    def _say_if_saved_again(self) -> None:
        if not self.unsaved and self._reported_save_error is not None and self.active is None:
            self._reported_save_error = None
            self.saved_again.emit()

    def _check_saved(self, recorder: ReplyRecorder) -> None:
        """Say once per distinct error that a reply could not be saved (and when all are saved again)."""
        error = recorder.save_error or next((r.save_error for r in self.unsaved if r.save_error), None)
        if error is not None and str(error) != self._reported_save_error:
            self._reported_save_error = str(error)
            self.save_failed.emit(
                f"The reply could not be saved ({write_error_text(error)}). It is kept on screen, and saved as soon "
                "as the database accepts it."
            )

    def regenerate(self, message_id: int) -> int | None:
        """Generate a new version of a reply (the earlier one is kept as another version; a comparison is compared
        again); returns its conversation id, or None when nothing was started (no such message, or a reply
        streams)."""
        message = self.db.message(message_id)
        if message is None or self.active is not None:
            return None
        self.start_reply(message.conversation_id, "compare" in message.stats, replaces=message_id)
        return message.conversation_id

    def rewrite(self, message_id: int, text: str) -> int | None:
        """Save ``text`` as a new version of a user message (the earlier one, and what followed it, are kept as
        another branch); returns its conversation id, or None when nothing was changed (no such message, or a reply
        streams). A chat still titled after its first message (not renamed by the user) is titled after the new
        version when that message is the one edited."""
        message = self.db.message(message_id)
        if message is None or self.active is not None:
            return None
        conversation = self.db.conversation(message.conversation_id)
        with self.db.transaction():
            self.db.add_message(message.conversation_id, "user", text, replaces=message_id)
            first = message.parent_id == ROOT
            if first and conversation is not None and conversation.title == title_from(message.content):
                self.db.rename_conversation(message.conversation_id, title_from(text))
        return message.conversation_id

    def continue_reply(self, message_id: int) -> str | None:
        """Write more of a reply that stopped at its length limit, was interrupted by a crash or was stopped by the
        user (``reply_format.can_continue``), into the same message; returns why it cannot be continued, or None when it
        started."""
        if self.active is not None:
            return "A reply is being generated: wait for it, or press Stop (Esc)."
        message = self.db.message(message_id)
        if message is None or not can_continue(message.stats, message.state):
            return "Only a reply that stopped at its length limit, was interrupted or was stopped can be continued."
        settings = self._settings()
        if settings.use_remote:
            label = answered_with_label(message.stats)
            writer = f"the local model {label}" if label else "a model on this computer"
            return (
                f"This reply was written by {writer}: choose a model on "
                "this computer in the model picker (Ctrl+L) to continue it (a remote server cannot continue a reply; "
                "Regenerate asks it for a new one)."
            )
        conversation = self.db.conversation(message.conversation_id)
        if conversation is not None and conversation.json_output:  # its grammar would start a second object
            return (
                "A JSON output reply cannot be continued: raise Longest reply in the settings and press Regenerate "
                "(or uncheck JSON output to continue it as text)."
            )
        extra = {"model": self.worker.describe_answer(), "target_model": settings.target_name}
        extra["target_label"] = self._target_label(settings)
        recorder = ReplyRecorder(self.db, message, extra=extra, resume=True)
        self.active = ActiveReply(message.conversation_id, recorder, False, continued=message.content)
        self.started.emit(recorder.snapshot())
        self.active.task = self._tasks.spawn(self._generate(self.active, settings, settings.generation.sampling.seed))
        return None

    def _target_label(self, settings: AppSettings) -> str:
        """The target's name as the model picker says it (``SmolLM2-135M-Instruct · 4-bit``; a remote model's
        label as it is)."""
        if settings.use_remote:
            return settings.target_name
        try:
            return readable_name(find_model(settings.target_name))
        except ModelImportError:  # removed meanwhile: still loaded, it writes the reply, named as when it was loaded
            spec = self.worker.spec
            if spec is not None and spec.target_dir.name == settings.target_name:
                return self.models.name_of(spec.target_dir)
            return settings.target_name  # (not loaded: the reply fails to load it and says so)

    def choose_version(self, message_id: int) -> int | None:
        """Show this version of a message and its latest continuation; returns its conversation id, or None when
        nothing changed (no such message, or a reply streams)."""
        if self.active is not None:
            return None
        return self.db.select_version(message_id)

    def start_reply(self, conversation_id: int, compare: bool = False, replaces: int | None = None) -> None:
        """Generate a reply to the conversation as it is saved (``compare``: plain, then speculative decoding;
        ``replaces``: a reply this one is a new version of)."""
        settings = self._settings()
        seed = settings.generation.sampling.seed
        # A local comparison's runs take the user's seed, or none, as a chat reply does: a seeded sampled Auto reply
        # plans from preset costs (inference.auto_decoding), so a seed drawn here showed another Auto than the chat's
        # (plain throughout at the chat defaults, where the chat's measured costs draft). A remote server's runs
        # share one drawn seed: a server not SpecChat's gets the same request twice, which the seed makes write the
        # same text, so their speeds compare like for like.
        if compare and seed is None and settings.use_remote:
            seed = random.randrange(2**31)
        if settings.use_remote:
            extra = {"model": settings.remote_target().describe(), "seed": seed}
        else:
            extra = {"model": self.worker.spec.describe() if self.worker.spec else "", "seed": seed}
        extra["target_model"] = settings.target_name  # the store name: each conversation remembers its model
        extra["target_label"] = self._target_label(settings)  # the picker's name for it: the footer says that
        message_id = self.db.add_message(conversation_id, "assistant", "", state="streaming", replaces=replaces)
        recorder = ReplyRecorder(
            self.db, self.db.message(message_id), compare=compare, extra=extra, compare_mode=settings.compare_decoding.mode
        )
        self.active = ActiveReply(conversation_id, recorder, compare)
        self.started.emit(recorder.snapshot())
        self.active.task = self._tasks.spawn(self._generate(self.active, settings, seed))

    def stop(self) -> bool:
        """Stop the reply being generated (its text so far is kept); False if none streams."""
        if self.active is None:
            return False
        self.active.cancel.set()
        return True

    async def stop_in(self, conversation_id: int) -> None:
        """Stop the reply streaming in this conversation, if any, and wait until it has ended."""
        active = self.active
        if active and active.conversation_id == conversation_id:
            active.cancel.set()
            if active.task is not None:
                await asyncio.wait([active.task])

    def close(self) -> None:
        """The window closes: save the streaming reply as it stands, left ``streaming`` as a crash leaves it, so
        that it opens again as interrupted, with Continue; one with no text yet (its prompt still read) as stopped
        before its first token, as Stop leaves it. Nothing more is shown or emitted for it. (Saved as stopped, with
        no statistics yet, a newcomer's reply quit mid-way showed "Stopped" with no numbers and a graph that said
        it was stopped before its first token.)"""
        if self.active is not None:
            active, self.active = self.active, None
            active.closed = True
            active.cancel.set()
            if active.recorder.has_text:
                active.recorder.save()
            else:
                active.recorder.finish_before_first_token()
        self.retry_unsaved()

    # --- generating -------------------------------------------------------------------------------

    def remote_backend(self, settings: AppSettings) -> RemoteBackend | None:
        """The backend of the remote target ``settings`` choose (its key from :attr:`remote_keys`, else from
        ``app.backends.remote_keys``), or None for the local model."""
        if not settings.use_remote:
            return None
        url = settings.remote_target().root
        target = settings.remote_target(self.remote_keys[url] if url in self.remote_keys else load_api_key(url))
        target = replace(target, base_url=self.secret_url(url))
        specchat = self.remote_specchat.get(url, False)
        return RemoteBackend(target, read_timeout_s=self.remote_read_timeout_s, specchat=specchat)

    def secret_url(self, shown: str) -> str:
        """The base URL requests go to for the base URL ``shown`` (``AppSettings.remote_url``, its secrets ``***``):
        the one entered this session (:attr:`remote_urls`), else the one ``app.backends.remote_keys`` keeps."""
        return self.remote_urls[shown] if shown in self.remote_urls else load_secret_url(shown)

    def _history(self, conversation_id: int, exclude: int) -> list[dict]:
        """Messages to send to the model: everything before the new reply, minus empty and unreadable ones."""
        return [
            {"role": m.role, "content": m.content}
            for m in self.db.messages(conversation_id)
            if m.id != exclude and not m.unreadable and (m.role == "user" or m.content)
        ]

    async def _generate(self, active: ActiveReply, settings: AppSettings, seed: int | None) -> None:
        recorder = active.recorder
        conversation = self.db.conversation(active.conversation_id)
        history = self._history(active.conversation_id, recorder.message_id)
        if active.compare:
            runs = [Decoding.AUTOREGRESSIVE, settings.compare_decoding]
        else:
            runs = [settings.generation.decoding]
        state, error_text, setting, server_stopped = "complete", None, "", False
        remote = self.remote_backend(settings)
        reached: str | None = None  # for a remote reply: "" the server answered, else why it could not be reached
        source: ReplySource = remote or self.worker
        try:
            if remote is None and not self.models.is_ready_for(settings):
                self._update_live(active, "Waiting for the model to load…")
            if remote is None:
                await self.models.wait()
                # (a reload asked for before may have run; a draft loaded for Compare only did not write this reply)
                drafts = Decoding.DRAFT_MODEL in runs or Decoding.AUTO in runs  # Auto drafts with the loaded draft too
                recorder.extra["model"] = self.worker.describe_answer(with_draft=drafts)
            with contextlib.nullcontext() if remote else self.models.in_use():  # one model for all the runs
                for index, decoding in enumerate(runs):
                    if active.cancel.is_set():
                        break
                    k = settings.generation.speculative.k
                    drafter = "head" if decoding == Decoding.DRAFT_MODEL and settings.draft_is_a_head else decoding.drafter
                    # Auto's statistics say which drafters it used and at what K (its own "drafter", "drafters")
                    fixed = decoding.speculative and decoding is not Decoding.AUTO
                    # a server not SpecChat's is sent no decoding: it neither drafts with K nor says how it decoded
                    chosen_here = remote is None or remote.specchat
                    generation = settings.generation_settings(decoding, seed=seed)
                    # the K the run drafts, where it drafts the box's (Adaptive, a remote Compare's too, picks its own);
                    # a remote run's drafter and K are the server's to report (a trial's footer read this window's
                    # "K 4" under a SpecChat server's reply, which the server never reported)
                    drafted_k = {"k": k} if generation.uses_fixed_k else {}
                    phase_extra = {"drafter": drafter, **drafted_k} if fixed and remote is None else {}
                    recorder.begin_phase("spec" if decoding.speculative else "ar", decoding.mode, **phase_extra)
                    self.run_started.emit(decoding.mode if chosen_here else REMOTE_MODE, index > 0)
                    if conversation is not None and conversation.json_output:  # replies are JSON objects
                        generation = replace(generation, output=replace(generation.output, grammar=json_object_grammar()))
                    request = GenerationRequest(
                        messages=history,
                        system_prompt=conversation.system_prompt if conversation else "",
                        settings=generation,
                        fresh_cache=active.compare,
                        continue_text=active.continued,
                    )
                    try:
                        async for events in source.generate(request, active.cancel):
                            if active.closed:
                                return
                            if remote is not None:  # the server's word for it, in the footer too
                                recorder.extra["model"] = recorder.extra["target_label"] = source.describe_answer()
                                reached = ""
                            recorder.add(events)
                            self._check_saved(recorder)
                            self.events.emit(events)
                            self._update_live(active)
                    finally:
                        self.run_finished.emit()
                if active.compare and not active.cancel.is_set():
                    await self._explain_compare(active, request, settings, remote is not None)
            if active.cancel.is_set():
                state = "stopped"
        except RemoteError as error:  # after text arrived, the partial reply is kept like a stopped one
            state, error_text = ("stopped" if recorder.has_text else "error"), str(error)
            server_stopped = error.server_stopped
            if error.unreachable:
                reached = str(error)
            elif error.status is not None:  # the server answered, refusing
                reached = ""
        except GENERATION_ERRORS as error:  # the engine's advice in the window's words (a model that cannot roll)
            state, error_text = "error", window_words(error, MAIN_WINDOW_ADVICE)
            setting = error.field if isinstance(error, SettingError) else ""
        except asyncio.CancelledError:
            state = "stopped"
        except Exception as error:  # noqa: BLE001 - a bug must not lose the reply or the window
            logger.exception("reply failed")
            state, error_text = "error", f"internal error: {type(error).__name__}: {error}"
        finally:
            if not active.closed:
                if reached is not None:
                    self.remote_reached.emit(settings.remote_target().root, reached)
                self._ended(active, state, error_text, setting, server_stopped)

    async def _explain_compare(
        self, active: ActiveReply, request: GenerationRequest, settings: AppSettings, remote: bool
    ) -> None:
        """Say why a comparison's texts differ: by design when sampling, else where and whether it is a near-tie
        (not on a remote server: that needs the model here)."""
        recorder = active.recorder
        if settings.generation.sampling.temperature > 0:  # the compare measures speed only, identical texts or not
            recorder.set_difference(None, sampled=True)
            return
        if recorder.compare_data.get("identical") is not False:
            return
        if remote:
            recorder.set_difference(None, sampled=False)
            return
        self._update_live(active, "Texts differ: measuring the numerical noise where they part…")
        k_steps = recorder.compare_data.get("spec", {}).get("k_steps") or {}  # Auto's K varies: the largest it used
        k = max((int(key) for key in k_steps if str(key).isdigit()), default=0) or None
        difference = await self.worker.explain_difference(request, recorder.ar_token_ids, recorder.spec_token_ids, k)
        recorder.set_difference(difference.as_dict() if difference else None, sampled=False)

    def _update_live(self, active: ActiveReply, note: str | None = None) -> None:
        recorder = active.recorder
        snapshot = recorder.snapshot()
        if note:
            snapshot.stats = {**snapshot.stats, "live": note}
        self.updated.emit(snapshot, recorder.text or recorder.compare_data.get("ar", {}).get("text", ""))

    def _ended(self, active: ActiveReply, state: str, error: str | None, setting: str, server_stopped: bool) -> None:
        recorder = active.recorder
        self.active = None
        final = None
        try:
            if state == "error" and not recorder.has_text:
                try:
                    self.db.delete_message(recorder.message_id)  # nothing to keep; the user message stays saved
                except sqlite3.Error as delete_error:  # the empty row stays: shown as an empty failed reply
                    logger.warning("could not delete the failed reply %s: %s", recorder.message_id, delete_error)
                self.failed.emit(active.conversation_id, recorder.message_id, error or "", setting, server_stopped)
            else:
                final = recorder.finish(state, error)
                if recorder.unsaved:
                    self.unsaved.append(recorder)
                self._check_saved(recorder)
                self._say_if_saved_again()
        finally:
            self.finished.emit(final)

