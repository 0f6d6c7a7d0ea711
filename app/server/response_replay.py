"""A stored response replayed as the server-sent events of its streaming create (``GET /v1/responses/{id}?stream=true``,
``client.responses.retrieve(id, stream=True)``), as OpenAI replays one: ``response.created`` and
``response.in_progress`` with the response as it began, each output item opened with its text or arguments in one
delta, every item's done events, then ``response.completed`` (or ``response.incomplete``) with the response as
stored. The events have the shapes :class:`~app.server.responses.ResponseBuilder` streams; a reply streamed with
each item in one delta is replayed byte for byte. ``starting_after`` (a sequence number) skips the events up to it.
"""

from __future__ import annotations

from .errors import APIError
from .response_store import in_progress

#: Query values read as true and as false (as ``stream`` is sent: the ``openai`` client sends "true").
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def wants_stream(value: str | None) -> bool:
    """A retrieval's ``stream`` query parameter: True for true or 1, False for false, 0 or none.

    Raises:
        APIError: 400 naming ``stream``: another value.
    """
    if value is None or value.lower() in _FALSE:
        return False
    if value.lower() in _TRUE:
        return True
    raise APIError(400, f"stream must be true or false, got {value!r}", param="stream", code="invalid_value")


def replayed_events(response: dict, starting_after: str | None = None) -> list[dict]:
    """The events of a stored ``response`` (a Response object as created), those after sequence number
    ``starting_after`` (None: all).

    Raises:
        APIError: 400 naming ``starting_after``: not an integer of at least -1; 409 ``response_in_progress``: the
            response's stream still runs.
    """
    if response["status"] == "in_progress":
        raise in_progress(response["id"], "retrieve it without stream (in_progress, its output so far), or with "
                          "stream once its stream ended")
    events: list[dict] = []

    def event(kind: str, **fields) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    began = {**response, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    began.pop("specchat", None)
    event("response.created", response=began)
    event("response.in_progress", response=began)
    items = response["output"]
    for index, item in enumerate(items):
        if item["type"] == "message":
            event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
            part = item["content"][0]
            event("response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
                  part={**part, "text": ""})
            event("response.output_text.delta", item_id=item["id"], output_index=index, content_index=0,
                  delta=part["text"], logprobs=[])
        else:
            event("response.output_item.added", output_index=index, item={**item, "arguments": "", "status": "in_progress"})
            event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                  delta=item["arguments"])
    for index, item in enumerate(items):
        if item["type"] == "message":
            part = item["content"][0]
            event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                  text=part["text"], logprobs=[])
            event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part)
        else:
            event("response.function_call_arguments.done", item_id=item["id"], output_index=index, name=item["name"],
                  arguments=item["arguments"])
        event("response.output_item.done", output_index=index, item=item)
    event("response.incomplete" if response["status"] == "incomplete" else "response.completed", response=response)
    if starting_after is None:
        return events
    try:
        after = int(starting_after)
    except ValueError:
        after = -2
    if after < -1:
        raise APIError(400, f"starting_after must be an event's sequence number (an integer from 0), got "
                       f"{starting_after!r}", param="starting_after", code="invalid_value")
    return events[after + 1:]
