"""What POST /v1/responses does with storage: who owns a response, the conversation that
`previous_response_id` continues, and saving a finished response before the client hears of it.

Each stored turn names its whole conversation as input items (the previous turn's items and
output, then its own input), so deleting or pruning an earlier turn never breaks a later one and
continuing needs one read; the store keeps each item's JSON once per owner (gateway/storage), so
a chain's bytes grow with its length.
Failed responses (a stream whose worker died) are stored too, as OpenAI keeps them.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from starlette.requests import Request

from gateway.edge.auth import bearer
from gateway.edge.errors import APIError, bad_request
from gateway.edge.limits import MAX_STORED_CONVERSATION_BYTES, MAX_STORED_ITEMS
from gateway.edge.offload import LARGE_BODY_BYTES, fast_switch, off_loop
from gateway.responses.events import ResponseBuilder
from gateway.responses.history import input_items, replay
from gateway.responses.schemas import CreateResponse
from gateway.storage.responses import ResponseStore

log = logging.getLogger("rapid_mlx.gateway")

PROBABLY_LARGE = LARGE_BODY_BYTES  # a stored conversation's size is known only once read

DISABLED = ("previous_response_id needs stored responses, and storage is disabled on this "
            "server (--no-store); send the whole conversation in input.")


def not_found(rid: str, param: str = "response_id") -> APIError:
    """OpenAI's 404 for a response that is unknown, deleted or another key's."""
    return APIError(404, f"Response with id '{rid}' not found.", param=param, code=None)


class Conversations:
    """Storage as the Responses front door uses it; STORE None means --no-store."""

    def __init__(self, store: ResponseStore | None, keyed: bool) -> None:
        self.store = store
        self.keyed = keyed  # API keys are configured: responses belong to the key

    def owner(self, request: Request) -> str:
        """SHA-256 (hex) of the request's API key when keys are configured, else ''."""
        return hashlib.sha256(bearer(request.headers).encode()).hexdigest() if self.keyed else ""

    def saver(self, req: CreateResponse, owner: str, items: list[dict[str, Any]],
              weight: int = 0) -> Saver:
        """What stores this request's response (ITEMS of WEIGHT bytes): nothing with --no-store
        or `store: false`; a 400 when ITEMS are more than a stored response may hold."""
        keep = self.store is not None and req.store is not False
        if keep and len(items) > MAX_STORED_ITEMS:
            raise bad_request(
                f"This conversation has {len(items)} input items (with those of "
                f"previous_response_id), more than a stored response may hold "
                f"({MAX_STORED_ITEMS}); send fewer items, or set store to false.",
                param="input", code="too_many_items")
        return Saver(self if keep else None, owner, items, weight)

    async def items(self, req: CreateResponse, owner: str,
                    size: int = 0) -> tuple[list[dict[str, Any]], int]:
        """The whole conversation of this turn as stored items (the previous turn's input and
        output when `previous_response_id` names one of OWNER's, then this request's input) and
        its weight: the larger of the body's SIZE and the stored conversation's bytes, which
        decides whether its conversion runs off the event loop (edge/offload.py). A stored
        conversation too large to be stored again is a 400 unless this turn is not stored."""
        if req.previous_response_id is None:
            return await off_loop(size, input_items, req, set()), size
        if self.store is None:
            raise bad_request(DISABLED, param="previous_response_id",
                              code="unsupported_parameter")
        with fast_switch(PROBABLY_LARGE):  # the store thread decodes it: let the loop in often
            found = await self.store.conversation(req.previous_response_id, owner)
        if found is None:  # 400, as OpenAI answers an unknown previous_response_id
            raise bad_request(f"Previous response with id '{req.previous_response_id}' "
                              "not found.", param="previous_response_id",
                              code="previous_response_not_found")
        response, history, stored = found
        if stored > MAX_STORED_CONVERSATION_BYTES and req.store is not False:
            raise bad_request(
                f"The conversation of previous_response_id holds {stored} bytes, more than a "
                f"stored response may continue ({MAX_STORED_CONVERSATION_BYTES}); start a new "
                "one, or set store to false.", param="previous_response_id",
                code="conversation_too_large")
        weight = max(size, stored)
        return await off_loop(weight, _continued, req, response, history), weight

    async def save(self, owner: str, response: dict[str, Any],
                   items: list[dict[str, Any]], weight: int = 0) -> None:
        """Commit RESPONSE (and the conversation ITEMS, of about WEIGHT bytes) before the client
        is told it finished; a failure is a 500 rather than a `completed` the store cannot back.
        One larger than the whole --responses-max-bytes (or --responses-max-bytes-per-key) is
        answered with `store: false` (and not stored)."""
        assert self.store is not None
        try:
            with fast_switch(weight):  # the store thread encodes them
                if not await self.store.put(response["id"], owner, response, items):
                    response["store"] = False
        except Exception as exc:
            log.exception("could not store response %s", response["id"])
            raise APIError(500, f"The response could not be stored: {exc}",
                           type="server_error", code="storage_error") from exc


def _continued(req: CreateResponse, response: dict[str, Any],
               history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """HISTORY, RESPONSE's output replayed, then REQ's input items (ids unique among all)."""
    history += replay(response)
    return history + input_items(req, {it["id"] for it in history})


class Saver:
    """Stores one turn's response before its client is told it finished (CONV None: never)."""

    def __init__(self, conv: Conversations | None, owner: str,
                 items: list[dict[str, Any]], weight: int = 0) -> None:
        self.conv = conv
        self.owner = owner
        self.items = items
        self.weight = weight
        self.store = conv is not None  # what the response object says

    async def commit(self, response: dict[str, Any]) -> None:
        """Store RESPONSE now (a 500 if that fails)."""
        if self.conv is not None:
            await self.conv.save(self.owner, response, self.items, self.weight)

    async def final(self, b: ResponseBuilder, last: dict[str, Any]) -> dict[str, Any]:
        """The stream's last event LAST once its response is stored, or response.failed."""
        try:
            await self.commit(last["response"])
        except APIError as exc:
            return b.fail("server_error", exc.message)[-1]
        return last

    async def failed(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """EVENTS (ending with response.failed), its response stored first when possible."""
        try:
            await self.commit(events[-1]["response"])
        except APIError:
            pass  # logged; the client learns of the failure anyway
        return events
