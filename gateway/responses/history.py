"""A conversation as stored items: the request's input items with ids, and a stored turn's
output replayed as the input of the next (`previous_response_id`)."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from gateway.responses.schemas import CreateResponse, InputItem

PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco",
          "reasoning": "rs"}
REPLAYED = ("message", "function_call", "reasoning")  # output items that become input


def _parts(content: Any, role: str | None) -> Any:
    """String content as one text part, as OpenAI lists input items."""
    if not isinstance(content, str):
        return content
    kind = "output_text" if role == "assistant" else "input_text"
    return [{"type": kind, "text": content}]


def input_items(req: CreateResponse, taken: set[str]) -> list[dict[str, Any]]:
    """The request's input as stored items, each with an id unique among TAKEN (updated)."""
    raw = [InputItem(role="user", content=req.input)] if isinstance(req.input, str) \
        else req.input
    out = []
    for it in raw:
        item: dict[str, Any] = msgspec.to_builtins(it)
        kind = item.setdefault("type", "message")
        if kind == "message":
            item["content"] = _parts(item.get("content", ""), item.get("role"))
        if not item.get("id") or item["id"] in taken:
            item["id"] = f"{PREFIX.get(kind, 'item')}_{uuid.uuid4().hex}"
        taken.add(item["id"])
        out.append(item)
    return out


def replay(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored response's output items, as input items of the next turn."""
    return [dict(it) for it in response.get("output") or [] if it.get("type") in REPLAYED]


CHUNK = 1024  # items per conversion call: each call holds the GIL throughout


def as_input(items: list[dict[str, Any]]) -> list[InputItem]:
    """Stored items as request input items (for translate.to_messages), converted a chunk at a
    time so that, off the event loop, the loop gets the GIL between chunks."""
    out: list[InputItem] = []
    try:
        for i in range(0, len(items), CHUNK):
            out += msgspec.convert(items[i:i + CHUNK], list[InputItem])
    except msgspec.ValidationError:
        return msgspec.convert(items, list[InputItem])  # its error names the item's index
    return out
