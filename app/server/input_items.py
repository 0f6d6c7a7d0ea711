"""The input items of a Responses request as OpenAI lists them (``GET /v1/responses/{id}/input_items``): each item of
its ``input`` as an item object with an id (:func:`input_items`), and a page of them as OpenAI's list object
(:func:`item_page`).

Shapes follow OpenAI's API reference (https://platform.openai.com/docs/api-reference/responses/input-items) as the
``openai`` client reads them (``client.responses.input_items.list``): a message's text as ``input_text`` parts (an
assistant's as ``output_text``), ``function_call`` and ``function_call_output`` items as sent, each ``completed``;
an item keeps the id it was sent with, else gets one (``msg_``, ``fc_``, ``fco_``). Only this request's ``input``
is listed, not that of the response ``previous_response_id`` names, nor ``instructions``.
"""

from __future__ import annotations

import uuid
from typing import Any

from .errors import APIError

#: The most items one page lists, and the number listed when ``limit`` is left out (OpenAI's).
MAX_LIMIT = 100
DEFAULT_LIMIT = 20
#: Each item type's id prefix, for an item sent without an id.
_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def input_items(value: str | list[Any]) -> list[dict]:
    """A request's ``input`` (already checked by ``responses.input_messages``) as OpenAI's input item objects, in
    order: a string is one user message."""
    items = [{"role": "user", "content": value}] if isinstance(value, str) else value
    return [_item(item) for item in items]


def _item(item: dict) -> dict:
    """One input item as its item object."""
    kind = item.get("type", "message")
    fields = {"id": item.get("id") if isinstance(item.get("id"), str) else f"{_PREFIXES[kind]}_{uuid.uuid4().hex}",
              "type": kind, "status": "completed"}
    if kind == "function_call":
        return {**fields, "call_id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
    if kind == "function_call_output":
        return {**fields, "call_id": item["call_id"], "output": _joined(item["output"])}
    part = {"type": "output_text", "annotations": []} if item["role"] == "assistant" else {"type": "input_text"}
    content = item["content"]
    texts = [content] if isinstance(content, str) else [text_part["text"] for text_part in content]
    return {**fields, "role": item["role"], "content": [{**part, "text": text} for text in texts]}


def _joined(output: str | list[dict]) -> str:
    """A function_call_output's output as one string (its text parts joined)."""
    return output if isinstance(output, str) else "".join(part["text"] for part in output)


def item_page(response_id: str, items: list[dict], order: str, limit: str, after: str | None) -> dict:
    """A page of response ``response_id``'s ``items`` as OpenAI's list object (``data``, ``first_id``,
    ``last_id``, ``has_more``): in ``order`` (``desc``: the last sent first, OpenAI's default; ``asc``), at most
    ``limit`` (1 to :data:`MAX_LIMIT`) items, those after the item whose id is ``after``.

    Raises:
        APIError: 400 naming the parameter: an ``order`` other than asc or desc, a ``limit`` out of range, an
            ``after`` that is no item's id.
    """
    if order not in ("asc", "desc"):
        raise APIError(400, f"order must be asc or desc, got {order!r}", param="order", code="invalid_value")
    if not (limit.isdigit() and 1 <= int(limit) <= MAX_LIMIT):
        raise APIError(400, f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}", param="limit",
                       code="invalid_value")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise APIError(400, f"after is {after!r}, which is not an input item of response {response_id!r}: give the "
                           "id of an item a page listed (its last_id)", param="after", code="invalid_value")
        start = ids.index(after) + 1
    page = ordered[start:start + int(limit)]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": start + len(page) < len(ordered)}
