"""One assistant reply while it streams: its text, accepted-draft spans and statistics, saved as it grows.

The reply's database row is created (empty, state ``streaming``) before generation starts and rewritten at
least every ``save_interval_s`` (0.5 s) while text arrives, so a killed process loses at most the last half
second of the reply. A comparison records both runs: the autoregressive one first, then the speculative one,
whose text becomes the message content (the conversation continues from it).

A save that fails (``sqlite3.Error``: the disk is full, another program holds the database past the busy timeout)
loses nothing: the reply stays in memory and on screen, :attr:`ReplyRecorder.save_error` says why, and the next
save (at the next interval, at the end, or :meth:`ReplyRecorder.save` called again later) writes it whole.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Callable

from inference.events import ContextRolled, Finished, PromptOverflow, PromptProgress, StepStats, TextDelta

from ..counts import CUT_CAUSES, cut_cause, kept_parts, tokens_text
from .history_db import HistoryDB
from .history_rows import ROOT, Message
from .reply_format import MODE_NAMES, progress_dict, stats_dict

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5


class ReplyRecorder:
    """Accumulates the events of one reply and keeps its message row up to date.

    Args:
        db: the history database.
        message: the (empty, ``streaming``) assistant message created for the reply.
        compare: record an autoregressive run followed by a speculative one.
        extra: statistics stored with each run (model, device, seed...).
        save_interval_s: longest time between two saves while text arrives.
        clock: monotonic clock (for tests).
        resume: continue ``message`` (Continue after the length limit): its text and draft spans are kept and the
            new text follows; its statistics count every token of the reply and how many times it was continued.
        compare_mode: the ``Decoding.mode`` of a comparison's second run (``auto`` or ``spec``), stored as
            ``spec_mode`` so that its column is named before it starts.
    """

    def __init__(
        self,
        db: HistoryDB,
        message: Message,
        compare: bool = False,
        extra: dict | None = None,
        save_interval_s: float = SAVE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        resume: bool = False,
        compare_mode: str = "spec",
    ):
        self.db = db
        self.message = message
        self.compare = compare
        self.extra = dict(extra or {})
        self.save_interval_s = save_interval_s
        self._clock = clock
        self.text = message.content if resume else ""
        self.draft_spans: list[list[int]] = [list(span) for span in message.draft_spans] if resume else []
        self._resumed = dict(message.stats) if resume else None
        self.state = "streaming"
        self.stats: dict = {}
        self.phase: str | None = None
        self.mode: str | None = None  # the running phase's Decoding.mode (what its live line calls it)
        self._phase_extra: dict = {}
        self._ar_text = ""
        self.ar_token_ids: list[int] = []
        self.spec_token_ids: list[int] = []
        self.compare_data: dict = (
            {"ar": {}, "spec": {}, "spec_mode": compare_mode, "speedup": None, "identical": None} if compare else {}
        )
        self.last_step: StepStats | None = None
        self._first_step: StepStats | None = None  # the run's first decode step: the live rate counts from it
        self.overflow: PromptOverflow | None = None  # the run's prompt is longer than n_ctx (said while it prefills)
        self._earlier_turns = True  # the chat has turns before the message answered (a new chat could leave them out)
        self._long_system_prompt = False  # a first message shorter than the chat's system prompt (``_cut_cause``)
        self.progress: PromptProgress | None = None  # how much of the prompt the run has read, until its first token
        self.rolls = 0
        self._reply_rolls: list[int] = []  # tokens each roll after the run's first token dropped (not the prompt's)
        self._replying = False  # the run's first token came: its rolls since are the reply's, not the prompt's
        self.saves = 0
        self._last_save = clock()
        self._dirty = False
        self.save_error: sqlite3.Error | None = None

    @property
    def message_id(self) -> int:
        """Id of the reply's row."""
        return self.message.id

    @property
    def unsaved(self) -> bool:
        """True while the database lacks part of the reply (the last save failed, or text arrived since)."""
        return self._dirty or self.save_error is not None

    @property
    def has_text(self) -> bool:
        """True once any text (of either run) arrived."""
        return bool(self.text or self._ar_text)

    def begin_phase(self, run: str, mode: str | None = None, **extra) -> None:
        """Start a run: ``run`` is ``ar`` (plain decoding) or ``spec`` (a speculative decoding, Auto included: a
        comparison's second column); ``mode`` is its decoding's ``Decoding.mode`` (``auto``, ``spec``, ``ar``;
        None: ``run``); ``extra`` (drafter, K...) is stored with its statistics."""
        self.phase = run
        self.mode = mode or run
        self._phase_extra = extra
        self.last_step = self._first_step = None
        self.overflow = None
        self.progress = None
        self._reply_rolls = []
        self._replying = False
        if self.compare:
            self.compare_data[run] = {"mode": mode or run, **extra, "text": ""}

    def add(self, events) -> None:
        """Record engine events; saves the row when ``save_interval_s`` has passed since the last save."""
        for event in events:
            if isinstance(event, (TextDelta, StepStats)):
                self.progress = None  # the prompt is read: the reply has begun
                self._replying = True
            if isinstance(event, TextDelta):
                if not event.text:
                    continue
                if self.compare and self.phase == "ar":
                    self._ar_text += event.text
                    self.compare_data["ar"]["text"] = self._ar_text
                else:
                    start = len(self.text)
                    self.text += event.text
                    if event.from_draft:
                        if self.draft_spans and self.draft_spans[-1][1] == start:
                            self.draft_spans[-1][1] = len(self.text)
                        else:
                            self.draft_spans.append([start, len(self.text)])
                self._dirty = True
            elif isinstance(event, StepStats):
                self.last_step = event
                self._first_step = self._first_step or event
            elif isinstance(event, ContextRolled):
                self.rolls += 1
                if self._replying:
                    self._reply_rolls.append(event.discarded_tokens)
            elif isinstance(event, PromptOverflow):
                self.overflow = event
                self._earlier_turns = self._follows_earlier_turns()
                self._long_system_prompt = not self._earlier_turns and self._system_prompt_outweighs_message()
            elif isinstance(event, PromptProgress):
                self.progress = event
            elif isinstance(event, Finished):
                self._finished(event)
        if self._dirty and self._clock() - self._last_save >= self.save_interval_s:
            self.save()

    def _finished(self, event: Finished) -> None:
        stats = stats_dict(event.stats, **self.extra, **self._phase_extra)
        if self.overflow is not None:  # the prompt was cut to fit: what the model read, and the reply's own rolls
            overflow = self.overflow
            stats["prompt_kept_first"] = overflow.head_tokens + overflow.message_tokens
            stats["prompt_kept_last"] = overflow.tail_tokens
            # (what the kept head is: the system prompt, then the message's first tokens; reply_format.cut_text)
            stats["prompt_kept_message"] = overflow.message_tokens
            stats["system_prompt_tokens"] = event.stats.system_prompt_tokens
            stats["reply_rolls"], stats["reply_discarded_tokens"] = len(self._reply_rolls), sum(self._reply_rolls)
            stats["prompt_cut"] = self._cut_cause()
        n_ctx = self.overflow.n_ctx if self.overflow is not None else getattr(self.last_step, "n_ctx", 0)
        if n_ctx and (stats.get("system_prompt_dropped") or self.overflow is not None):  # (what keeps the system
            # prompt whole: a larger context length, or Always kept where this one is twice its length already)
            stats["n_ctx"] = n_ctx
        if self._resumed is not None:  # the whole reply's tokens (those before this part too), one more continuation
            stats["earlier_tokens"] = int(self._resumed.get("new_tokens") or 0)
            stats["new_tokens"] += stats["earlier_tokens"]
            stats["continued"] = int(self._resumed.get("continued") or 0) + 1
        if not self.compare:
            self.stats = stats
            return
        phase = self.phase or ("ar" if event.stats.mode == "ar" else "spec")
        text = self._ar_text if phase == "ar" else self.text
        self.compare_data[phase] = {**stats, "text": text}
        if event.stats.stop_reason == "cancelled":  # Stop cut this run off: no speed or identity to compare
            self.compare_data["stopped"] = True
        if phase == "ar":
            self.ar_token_ids = list(event.stats.token_ids)
        elif not self.compare_data.get("stopped"):
            self.spec_token_ids = list(event.stats.token_ids)
            ar = self.compare_data["ar"]
            # a speed needs two tokens (one has no interval between tokens to measure it over: it stores 0 tokens/s)
            if min(ar.get("new_tokens") or 0, stats["new_tokens"]) >= 2 and ar.get("tokens_per_s"):
                self.compare_data["speedup"] = round(stats["tokens_per_s"] / ar["tokens_per_s"], 3)
            if self.ar_token_ids or self.spec_token_ids:
                self.compare_data["identical"] = self.ar_token_ids == self.spec_token_ids
            else:  # a remote server sends text, not token ids
                self.compare_data["identical"] = self._ar_text == self.text
        self._dirty = True

    def set_difference(self, first_difference: dict | None, sampled: bool) -> None:
        """Record why a comparison's texts differ: ``sampled`` (by design), or the greedy ``first_difference``
        (``FirstDifference.as_dict()``: token, top2_gap, noise_bound, near_tie)."""
        self.compare_data["sampled"] = sampled
        self.compare_data["first_difference"] = first_difference
        self._dirty = True

    def live_text(self) -> str:
        """Progress line for the footer while streaming: tokens so far, tokens/s, acceptance rate (before the first
        token, what the run does: reading the prompt, and what the context length makes it skip)."""
        step = self.last_step
        if step is None:
            text = "Generating…" if self.phase is None or not self.compare else f"{MODE_NAMES.get(self.mode, '')}: starting…"
            if self.progress is not None:  # (the bubble's bar says how far: the footer only what it skips)
                text = (f"{MODE_NAMES.get(self.mode, '')}: " if self.compare else "") + "Reading your message…"
            if self.overflow is not None:
                overflow = self.overflow
                if overflow.max_n_ctx is None or overflow.prompt_tokens < overflow.max_n_ctx:
                    advice = "raise Context length in the settings to keep them"
                else:  # no setting keeps them all (nor a new chat, for a chat's first message: a trial's paste)
                    advice = (f"this model reads at most {overflow.max_n_ctx:,} tokens: shorten the message"
                              f"{' or start a new chat' if self._earlier_turns else ''} to keep it whole")
                # a sentence of its own, capitalised: the footer puts each part after " · " on a line of its own
                # where it wraps (a trial read "Generating…" then "the conversation is 9,816 tokens…")
                # (what made it too long first, in the footer's words: counts.CUT_CAUSES)
                cause = CUT_CAUSES[self._cut_cause()]
                skipped = (
                    f"{cause[0].upper()}{cause[1:]}: the conversation is {overflow.prompt_tokens:,} tokens, more than "
                    f"the context length ({overflow.n_ctx:,}), so the model {kept_words(overflow)} ({advice})"
                )
                alone = self.progress is not None and not self.compare
                text = skipped if alone else f"{text} · {skipped}"
            return text
        # the decode rate since the first step, as the finished reply's footer counts it (from the start of the
        # reply, a 40 s prompt read made it "0.5 tokens/s" beside a graph at 5.4: newcomer trial)
        first = self._first_step
        parts = [tokens_text(step.generated)]
        if first is not None and step.elapsed_s > first.elapsed_s:
            parts.append(f"{(step.generated - first.generated) / (step.elapsed_s - first.elapsed_s):.1f} tokens/s")
        if self.phase == "spec" and step.drafted:
            parts.append(f"K {step.k}")
        prefix = f"{MODE_NAMES.get(self.mode, '')}: " if self.compare else "Generating · "
        return prefix + " · ".join(parts)

    def _stats_for_storage(self) -> dict:
        """The statistics to store, with, while streaming, the footer's ``live`` line and (until the first token)
        the prompt's reading ``prefill`` (``reply_format.progress_dict``), which ``save`` leaves out."""
        prefill = {}
        if self.state == "streaming" and self.progress:
            prefill = {"prefill": progress_dict(self.progress, self._kept_in_memory())}
        if not self.compare:
            stats = dict(self.stats)
            if self.state == "streaming":
                stats["live"] = self.live_text()
            return {**stats, **prefill}
        compare = {key: (dict(value) if isinstance(value, dict) else value) for key, value in self.compare_data.items()}
        if self.state == "streaming" and self.phase in ("ar", "spec"):
            compare[self.phase]["live"] = self.live_text()
        return {"compare": compare, **({"error": self.stats["error"]} if "error" in self.stats else {}), **prefill}

    def _cut_cause(self) -> str:
        """Why the prompt was cut to fit (``overflow``), a key of ``counts.CUT_CAUSES``, as the command line says it
        too (``counts.cut_cause``): the message answered, its turns before it on its branch, its system prompt."""
        message_tokens = self.overflow.message_tokens if self.overflow is not None else 0
        return cut_cause(message_tokens, self._earlier_turns, self._long_system_prompt)

    def _system_prompt_outweighs_message(self) -> bool:
        """Whether the conversation's system prompt is longer (in characters) than the message this reply answers
        (False where the history does not say)."""
        try:
            asked = self.db.message(self.message.parent_id) if self.message.parent_id else None
            conversation = self.db.conversation(self.message.conversation_id)
        except sqlite3.Error:  # (the advice is not worth a failed read)
            return False
        system = (conversation.system_prompt or "") if conversation is not None else ""
        return asked is not None and asked.role == "user" and len(system) > len(asked.content)

    def _follows_earlier_turns(self) -> bool:
        """Whether the message this reply answers has turns before it on its branch (True where the history does not
        say: a reply without a user message before it, a row older than branches)."""
        try:
            asked = self.db.message(self.message.parent_id) if self.message.parent_id else None
        except sqlite3.Error:  # (the advice is not worth a failed read)
            return True
        return asked is None or asked.role != "user" or asked.parent_id != ROOT

    def _kept_in_memory(self) -> int:
        """Tokens of the prompt kept after a context-length cut (``PromptOverflow``) that the prefill does not read,
        the model holding them from an earlier reply: the kept tokens less those it reads; 0 without a cut (the
        window then knows only the tokens read) or where it rolls the prompt instead."""
        if self.overflow is None or self.progress is None:
            return 0
        return max(0, self.overflow.prompt_tokens - self.overflow.discarded_tokens - self.progress.total)

    def snapshot(self) -> Message:
        """The reply as it stands, as a Message (for the chat view)."""
        return Message(
            id=self.message.id,
            conversation_id=self.message.conversation_id,
            position=self.message.position,
            role="assistant",
            content=self.text,
            created_at=self.message.created_at,
            state=self.state,
            stats=self._stats_for_storage(),
            draft_spans=[list(span) for span in self.draft_spans],
            parent_id=self.message.parent_id,
            versions=list(self.message.versions),
        )

    def save(self) -> bool:
        """Write the reply's current text, state and statistics to its row (one commit); returns False when the
        database refused the write (``save_error`` says why; the reply is kept here for the next save)."""
        stats = self._stats_for_storage()
        stats.pop("live", None)
        stats.pop("prefill", None)
        if self.state == "streaming" and not self.compare:
            stats.update(self._tokens_so_far())
        self._last_save = self._clock()
        try:
            self.db.update_message(
                self.message.id, content=self.text, state=self.state, stats=stats, draft_spans=self.draft_spans
            )
        except sqlite3.Error as error:
            logger.warning("could not save reply %s: %s", self.message.id, error)
            self.save_error = error
            return False
        self.saves += 1
        self._dirty = False
        self.save_error = None
        return True

    def _tokens_so_far(self) -> dict:
        """The reply's tokens while it streams, as ``_finished`` would count them (``new_tokens``, and for a
        continuation ``earlier_tokens`` and ``continued``), so that Continue after a crash counts the tokens written
        before it (a newcomer's said "200 tokens in all" for 71 + 200)."""
        generated = self.last_step.generated if self.last_step is not None else 0
        if self._resumed is None:
            return {"new_tokens": generated}
        earlier = int(self._resumed.get("new_tokens") or 0)
        return {"new_tokens": earlier + generated, "earlier_tokens": earlier,
                "continued": int(self._resumed.get("continued") or 0) + 1}

    def finish_before_first_token(self) -> Message:
        """The reply ended before its first token without its engine's last word (the window closed while the
        prompt was read): save it stopped with no tokens, as Stop during the prompt leaves it, and return it."""
        if not self.compare:
            self.stats = {**self.stats, "new_tokens": 0}
        return self.finish("stopped")

    def finish(self, state: str, error: str | None = None) -> Message:
        """The reply ended (``complete``, ``stopped`` or ``error``): save it one last time and return it (even when
        that save failed: see ``save_error``)."""
        self.state = state
        if error:
            self.stats["error"] = error
        self.save()
        return self.snapshot()


def kept_words(overflow: PromptOverflow) -> str:
    """What the model reads of a prompt longer than the context length, in numbers that add up to the prompt's and
    in the footer's words (``counts.kept_parts``): "keeps the system prompt's 24 tokens, your message's first 256 and
    the last 3,304, and skips 5,194 in the middle" (a trial read "the first 280 tokens (your message's first 256
    among them)" here and the system prompt named in the footer)."""
    first = overflow.head_tokens + overflow.message_tokens
    if overflow.system_prompt_tokens > 0 and overflow.head_tokens == overflow.system_prompt_tokens:
        kept = kept_parts(first, overflow.tail_tokens, overflow.system_prompt_tokens, overflow.message_tokens)
        return f"keeps {kept}, and skips {overflow.discarded_tokens:,} in the middle"
    among = f" (your message's first {overflow.message_tokens:,} among them)" if overflow.message_tokens else ""
    return (f"keeps the first {first:,} tokens{among} and the last {overflow.tail_tokens:,}, and skips "
            f"{overflow.discarded_tokens:,} in the middle")
