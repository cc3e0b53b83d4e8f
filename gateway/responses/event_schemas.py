"""The server-sent events of POST /v1/responses with `stream: true` as msgspec structs (they
document /openapi.json; tests check the wire against them). Each frame is `event: TYPE` then
`data: {...}` with the same `type`; sequence_number counts the events from 0."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.responses.objects import OutputContent, OutputItem, ResponseObject


class _Event(msgspec.Struct, kw_only=True, tag_field="type"):
    sequence_number: int


class _ResponseEvent(_Event):
    response: ResponseObject


class ResponseCreatedEvent(_ResponseEvent, tag="response.created"):
    """The response exists (status in_progress, no output yet)."""


class ResponseInProgressEvent(_ResponseEvent, tag="response.in_progress"):
    """The response is being generated."""


class ResponseCompletedEvent(_ResponseEvent, tag="response.completed"):
    """The last event of a finished response: the whole response object."""


class ResponseIncompleteEvent(_ResponseEvent, tag="response.incomplete"):
    """The last event of a response cut by max_output_tokens."""


class ResponseFailedEvent(_ResponseEvent, tag="response.failed"):
    """The last event of a response that failed after the stream started (see `error`)."""


class ResponseOutputItemAddedEvent(_Event, tag="response.output_item.added"):
    """An output item (message, reasoning or function_call) starts."""

    output_index: int
    item: OutputItem


class ResponseOutputItemDoneEvent(_Event, tag="response.output_item.done"):
    """An output item is complete."""

    output_index: int
    item: OutputItem


class _PartEvent(_Event):
    item_id: str
    output_index: int
    content_index: int


class ResponseContentPartAddedEvent(_PartEvent, tag="response.content_part.added"):
    """A content part of a message or reasoning item starts."""

    part: OutputContent


class ResponseContentPartDoneEvent(_PartEvent, tag="response.content_part.done"):
    """A content part is complete."""

    part: OutputContent


class ResponseOutputTextDeltaEvent(_PartEvent, tag="response.output_text.delta"):
    """Text added to a message's output_text part."""

    delta: str
    logprobs: list[Any]


class ResponseOutputTextDoneEvent(_PartEvent, tag="response.output_text.done"):
    """A message's whole output_text."""

    text: str
    logprobs: list[Any]


class ResponseReasoningTextDeltaEvent(_PartEvent, tag="response.reasoning_text.delta"):
    """Text added to a reasoning item."""

    delta: str


class ResponseReasoningTextDoneEvent(_PartEvent, tag="response.reasoning_text.done"):
    """A reasoning item's whole text."""

    text: str


class ResponseFunctionCallArgumentsDeltaEvent(_Event,
                                              tag="response.function_call_arguments.delta"):
    """Arguments JSON added to a function_call item."""

    item_id: str
    output_index: int
    delta: str


class ResponseFunctionCallArgumentsDoneEvent(_Event, tag="response.function_call_arguments.done"):
    """A function_call item's whole arguments JSON."""

    item_id: str
    name: str
    output_index: int
    arguments: str


RESPONSE_EVENTS: tuple[type, ...] = (
    ResponseCreatedEvent, ResponseInProgressEvent, ResponseOutputItemAddedEvent,
    ResponseContentPartAddedEvent, ResponseOutputTextDeltaEvent, ResponseReasoningTextDeltaEvent,
    ResponseFunctionCallArgumentsDeltaEvent, ResponseOutputTextDoneEvent,
    ResponseReasoningTextDoneEvent, ResponseFunctionCallArgumentsDoneEvent,
    ResponseContentPartDoneEvent, ResponseOutputItemDoneEvent, ResponseCompletedEvent,
    ResponseIncompleteEvent, ResponseFailedEvent)
