"""The tool-call rules of a conversation, one checker (:class:`ToolTurns`) for both routes that take tool calls and
their results: a chat completion's messages (``chat_request``) and a Responses request's input items
(``responses``). Each route reports where each message or item stands and words the refusals in its own fields
(:class:`TurnWords`: ``messages[3].tool_call_id``, ``input[2].call_id``); the rules themselves, as OpenAI's, live
here only:

- a call needs its id (a non-empty string), and a second call of one turn may not repeat an id of the first;
- a result names the id of a call of the turn right before it (the assistant message with calls that its run of
  results follows), and answers it once;
- every call of a turn is answered before the next message, and a conversation may not end with calls left without
  their results.

A turn is the message that opens it (one that is not a result) and the results after it; its calls are those the
message made. A location (``where``) is whatever the route names a message, item or call by: the checker only hands
it back to the route's words.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import APIError


@dataclass
class Turn:
    """A turn: ``owner``, where the message that opened it stands (None: a conversation kept from before the
    request, or none yet); ``calls``: each call's id and where it stands, in order; ``results``: each id answered so
    far and where its result stands."""

    owner: Any = None
    calls: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)


class TurnWords(ABC):
    """A route's refusals of the rules :class:`ToolTurns` checks, one method a rule: each returns the 400 to
    answer, naming the route's own fields."""

    @abstractmethod
    def call_id_missing(self, where: Any) -> APIError:
        """A call at ``where`` without its id (missing or empty)."""

    @abstractmethod
    def call_id_type(self, where: Any, value: Any) -> APIError:
        """A call at ``where`` whose id ``value`` is not a string."""

    @abstractmethod
    def call_twice(self, where: Any, call_id: str, twin: Any) -> APIError:
        """A call at ``where`` with the id of ``twin``, an earlier call of its turn."""

    @abstractmethod
    def result_id_missing(self, where: Any, turn: Turn) -> APIError:
        """A result at ``where`` that names no call id (``turn``: the turn it follows)."""

    @abstractmethod
    def result_id_type(self, where: Any, value: Any, turn: Turn) -> APIError:
        """A result at ``where`` whose call id ``value`` is not a string."""

    @abstractmethod
    def result_unknown(self, where: Any, call_id: str, turn: Turn) -> APIError:
        """A result at ``where`` answering ``call_id``, which no call before it had."""

    @abstractmethod
    def result_elsewhere(self, where: Any, call_id: str, turn: Turn, owner: Any) -> APIError:
        """A result at ``where`` answering ``call_id``, a call of the message at ``owner``, not of ``turn``."""

    @abstractmethod
    def result_twice(self, where: Any, call_id: str, turn: Turn) -> APIError:
        """A second result of ``call_id``, at ``where`` (``turn.results[call_id]``: the first)."""

    @abstractmethod
    def results_missing(self, turn: Turn, missing: list[str], after: Any) -> APIError:
        """``turn``'s calls ``missing`` left without results before the message at ``after`` (None: the
        conversation ends with them)."""


class ToolTurns:
    """The tool-call rules checked along a conversation, message by message: :meth:`open` for each message that is
    not a result, :meth:`call` for each call it makes, :meth:`result` for each result, :meth:`finish` at the end.
    A broken rule raises the 400 ``words`` give it at once, but for calls left without their results: the first
    such turn is refused at :meth:`finish`, after what the rest of the conversation breaks.

    ``pending``: the calls (ids) a conversation kept from before the request ends with, which the request answers
    first; ``known``: the ids of every call of that conversation.
    """

    def __init__(self, words: TurnWords, pending: Iterable[str] = (), known: Iterable[str] = ()):
        self.words = words
        self.turn = Turn(None, dict.fromkeys(pending))
        self.owners: dict[str, Any] = dict.fromkeys([*known, *self.turn.calls])  # each call's id: its turn's owner
        self.unanswered: APIError | None = None

    def open(self, where: Any) -> None:
        """The message at ``where`` (not a result) ends the turn at hand and opens its own."""
        self._close(where)
        self.turn = Turn(where)

    def call(self, call_id: Any, where: Any) -> str:
        """A call of the turn at hand, at ``where``, with id ``call_id``: returns the id.

        Raises:
            APIError: the id is missing, empty, not a string, or that of an earlier call of the turn.
        """
        if call_id is None or call_id == "":
            raise self.words.call_id_missing(where)
        if not isinstance(call_id, str):
            raise self.words.call_id_type(where, call_id)
        if call_id in self.turn.calls:
            raise self.words.call_twice(where, call_id, self.turn.calls[call_id])
        self.turn.calls[call_id] = where
        self.owners[call_id] = self.turn.owner
        return call_id

    def result(self, call_id: Any, where: Any) -> str:
        """A result at ``where`` answering ``call_id``: returns the id.

        Raises:
            APIError: the id is missing or not a string, no call before it had it, its call is not of the turn
                right before it, or a result before it answered that call.
        """
        turn = self.turn
        if call_id is None:
            raise self.words.result_id_missing(where, turn)
        if not isinstance(call_id, str):
            raise self.words.result_id_type(where, call_id, turn)
        if call_id not in turn.calls:
            if call_id in self.owners:
                raise self.words.result_elsewhere(where, call_id, turn, self.owners[call_id])
            raise self.words.result_unknown(where, call_id, turn)
        if call_id in turn.results:
            raise self.words.result_twice(where, call_id, turn)
        turn.results[call_id] = where
        return call_id

    def finish(self) -> None:
        """The end of the conversation.

        Raises:
            APIError: the first turn with calls left without their results (the last turn's included).
        """
        self._close(None)
        if self.unanswered is not None:
            raise self.unanswered

    def _close(self, after: Any) -> None:
        """Ends the turn at hand before the message at ``after`` (None: the end), keeping the refusal of its calls
        left without results if it is the first such turn."""
        missing = [call_id for call_id in self.turn.calls if call_id not in self.turn.results]
        if missing and self.unanswered is None:
            self.unanswered = self.words.results_missing(self.turn, missing, after)
