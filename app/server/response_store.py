"""The responses the server keeps (:class:`ResponseStore`): ``previous_response_id`` continues a conversation it
still holds; it holds the conversations of the most recent responses (``store`` left true) in memory for the
server's lifetime, bounded in number and in characters, least recently used dropped first; an id it does not hold is
a 400 naming it. It keeps each response object too, as created, for ``GET /v1/responses/{id}``
(:meth:`ResponseStore.response`) with its input items (``GET /v1/responses/{id}/input_items``,
:meth:`ResponseStore.input_items`), and ``DELETE /v1/responses/{id}`` drops one (:meth:`ResponseStore.delete`); an id
it does not hold is then a 404.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import NamedTuple, Protocol

from .errors import APIError

#: Responses kept for ``previous_response_id``, at most, and the characters of their conversations, all together.
MAX_KEPT_RESPONSES = 256
MAX_KEPT_CHARS = 32 * 1024 * 1024
#: Ids of responses created with ``store`` false remembered, at most (to say why one is not kept).
MAX_UNSTORED_IDS = 1024


class _Kept(NamedTuple):
    """One response kept: its conversation, its Response object (None: not retrievable), its input items, and the
    characters of all three as compact JSON."""

    conversation: list[dict]
    response: dict | None
    inputs: list[dict]
    size: int


class Streaming(Protocol):
    """A response whose stream still runs (a ``responses.ResponseBuilder``): the object as it stands, its input
    items."""

    inputs: list[dict]

    def response(self) -> dict:
        """The Response object as it stands (``in_progress``, its output so far)."""


class ResponseStore:
    """The conversations of recent responses, by response id, for ``previous_response_id``, with their Response
    objects as created (``GET /v1/responses/{id}``) and their input items (``GET /v1/responses/{id}/input_items``):
    at most ``max_responses`` of at most ``max_chars`` characters together (all as compact JSON), the least recently
    used dropped first. A conversation is a list of chat messages (``{"role", "content", "tool_calls"?,
    "tool_call_id"?}``), the response's reply last, without its ``instructions``. The ids of the last
    :data:`MAX_UNSTORED_IDS` responses created with ``store`` false are remembered (:meth:`not_stored`), so that
    naming one says why it is not kept. A stored response whose stream still runs is held apart
    (:meth:`streaming`), retrieved ``in_progress`` with its output so far, as OpenAI answers one; what needs it
    whole (a continuation, a delete) is a 409 ``response_in_progress``."""

    def __init__(self, max_responses: int = MAX_KEPT_RESPONSES, max_chars: int = MAX_KEPT_CHARS):
        self.max_responses, self.max_chars = max_responses, max_chars
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._chars = 0
        self._unstored: OrderedDict[str, None] = OrderedDict()
        self._streaming: dict[str, Streaming] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, response_id: str) -> list[dict]:
        """The conversation up to and with response ``response_id``'s reply.

        Raises:
            APIError: 400 ``previous_response_not_found``: the id was never kept, or was dropped, or its response
                was created with ``store`` false (the message says so).
        """
        if response_id in self._streaming:
            raise in_progress(response_id, "continue it once its stream ended", param="previous_response_id")
        if response_id in self._unstored:
            raise APIError(
                400, f"previous_response_id {response_id!r} was created with store false, so this server did not keep "
                "it: send the whole conversation in input instead, or create responses with store true (the default) "
                "to continue them", param="previous_response_id", code="previous_response_not_found",
            )  # fmt: skip
        if response_id not in self._kept:
            raise APIError(
                400, f"previous_response_id {response_id!r} is not kept by this server (it keeps the last "
                f"{self.max_responses} responses stored since it started, in memory): send the whole conversation in "
                "input instead", param="previous_response_id", code="previous_response_not_found",
            )  # fmt: skip
        self._kept.move_to_end(response_id)
        return list(self._kept[response_id].conversation)

    def response(self, response_id: str) -> dict:
        """Response ``response_id``'s object, as its create call returned it (``GET /v1/responses/{id}``).

        Raises:
            APIError: 404 ``response_not_found`` naming the id (and why: never kept, dropped, deleted, or created
                with ``store`` false).
        """
        if response_id in self._streaming:
            return self._streaming[response_id].response()
        return self._retrievable(response_id).response

    def input_items(self, response_id: str) -> list[dict]:
        """Response ``response_id``'s input items, in the order its request sent them
        (``GET /v1/responses/{id}/input_items``).

        Raises:
            APIError: 404 ``response_not_found`` naming the id, as :meth:`response`.
        """
        if response_id in self._streaming:
            return list(self._streaming[response_id].inputs)
        return list(self._retrievable(response_id).inputs)

    def _retrievable(self, response_id: str) -> _Kept:
        """Response ``response_id`` kept with its object, now the most recently used; else a 404 naming it."""
        kept = self._kept.get(response_id)
        if kept is None or kept.response is None:
            raise self._not_found(response_id)
        self._kept.move_to_end(response_id)
        return kept

    def delete(self, response_id: str) -> dict:
        """Drop response ``response_id`` (``DELETE /v1/responses/{id}``): OpenAI's ``response.deleted`` object.

        Raises:
            APIError: 404 ``response_not_found`` naming the id, as :meth:`response`.
        """
        if response_id in self._streaming:
            raise in_progress(response_id, "delete it once its stream ended")
        if response_id not in self._kept:
            raise self._not_found(response_id)
        self._chars -= self._kept.pop(response_id).size
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    def _not_found(self, response_id: str) -> APIError:
        why = ("it was created with store false, so this server did not keep it" if response_id in self._unstored else
               f"it is not kept by this server (it keeps the last {self.max_responses} responses stored since it "
               "started, in memory, until deleted)")
        return APIError(404, f"Response with id {response_id!r} not found: {why}", type="not_found_error",
                        param="response_id", code="response_not_found")

    def streaming(self, response_id: str, response: Streaming | None) -> None:
        """Hold ``response`` (None: drop it) as response ``response_id`` whose stream runs, until its stream ended
        (kept by then with :meth:`put` if it completed)."""
        if response is None:
            self._streaming.pop(response_id, None)
        else:
            self._streaming[response_id] = response

    def not_stored(self, response_id: str) -> None:
        """Remember that response ``response_id`` was created with ``store`` false (the last
        :data:`MAX_UNSTORED_IDS` such ids)."""
        self._unstored[response_id] = None
        if len(self._unstored) > MAX_UNSTORED_IDS:
            self._unstored.popitem(last=False)

    def put(self, response_id: str, conversation: list[dict], response: dict | None = None,
            inputs: list[dict] = ()) -> None:
        """Keep ``conversation``, ``response`` (the Response object as created; None: not retrievable) and ``inputs``
        (its request's input items, ``input_items.input_items``) under ``response_id``, dropping the least recently
        used past the bounds (one larger than ``max_chars`` alone is not kept)."""
        size = sum(len(json.dumps(value, separators=(",", ":"))) for value in (conversation, response, inputs) if value)
        if size > self.max_chars:
            return
        self._kept[response_id] = _Kept(conversation, response, list(inputs), size)
        self._chars += size
        while len(self._kept) > self.max_responses or self._chars > self.max_chars:
            self._chars -= self._kept.popitem(last=False)[1].size


def in_progress(response_id: str, advice: str, param: str | None = None) -> APIError:
    """A 409 ``response_in_progress``: response ``response_id`` is still being generated, and ``advice`` says when
    to ask again."""
    return APIError(409, f"Response {response_id!r} is still being generated: {advice}", param=param,
                    code="response_in_progress")
