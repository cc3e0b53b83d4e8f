"""GET and DELETE /v1/responses/{response_id}, GET /v1/responses/{response_id}/input_items."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.edge.errors import APIError, bad_request, from_validation
from gateway.edge.offload import LARGE_BODY_BYTES, off_loop
from gateway.responses.stored import Conversations, not_found
from gateway.storage.responses import UnknownItem


class ItemsQuery(msgspec.Struct, kw_only=True):
    """The query of GET /v1/responses/{response_id}/input_items (unknown parameters ignored)."""

    limit: Annotated[int, Meta(ge=1, le=100)] = 20
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None


def _query(request: Request) -> ItemsQuery:
    """The query parameters as ItemsQuery, or a 400 naming the bad one."""
    q = request.query_params
    raw = {k: q[k] for k in ("limit", "order", "after") if k in q}
    try:
        return msgspec.convert(raw, ItemsQuery, strict=False)
    except msgspec.ValidationError as exc:
        raise from_validation(exc) from None


class StoredEndpoints:
    """Reading and deleting stored responses, each visible only to its owner."""

    def __init__(self, conversations: Conversations) -> None:
        self.conv = conversations

    def _rid(self, request: Request) -> tuple[str, str]:
        rid: str = request.path_params["response_id"]
        if self.conv.store is None:
            raise APIError(404, f"Response with id '{rid}' not found: storage is disabled on "
                           "this server (--no-store).", param="response_id")
        return rid, self.conv.owner(request)

    async def get(self, request: Request) -> Response:
        """The stored response object, its JSON as stored."""
        if request.query_params.get("stream", "false").lower() not in ("false", "0", ""):
            raise bad_request("Streaming a stored response again is not supported; retrieve "
                              "it without stream.", param="stream", code="unsupported_parameter")
        rid, owner = self._rid(request)
        assert self.conv.store is not None
        found = await self.conv.store.get_json(rid, owner)  # as stored: decoding and encoding
        if found is None:  # it again cost the event loop ~140 ms for 7 MiB of instructions
            raise not_found(rid)
        return Response(found, media_type="application/json")

    async def delete(self, request: Request) -> Response:
        """Delete a stored response: OpenAI's deleted-object shape."""
        rid, owner = self._rid(request)
        assert self.conv.store is not None
        if not await self.conv.store.delete(rid, owner):
            raise not_found(rid)
        return JSONResponse({"id": rid, "object": "response", "deleted": True})

    async def input_items(self, request: Request) -> Response:
        """One page of the response's input items, in OpenAI's list shape (encoded off the
        event loop)."""
        query = _query(request)
        rid, owner = self._rid(request)
        assert self.conv.store is not None
        try:
            page = await self.conv.store.items(rid, owner, query.limit, query.order, query.after)
        except UnknownItem:
            raise bad_request(f"No input item with id '{query.after}' in response '{rid}'.",
                              param="after", code="invalid_value") from None
        if page is None:
            raise not_found(rid)
        data, more = page
        listing = {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                   "last_id": data[-1]["id"] if data else None, "has_more": more}
        # encoded off the event loop: a page of 100 items may hold tens of MiB (json.dumps took
        # the loop 70-180 ms for 8 MiB at load 6)
        body = await off_loop(LARGE_BODY_BYTES, msgspec.json.encode, listing)
        return Response(body, media_type="application/json")
