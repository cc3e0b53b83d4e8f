"""POST /v1/embeddings: one Embed job per request; the worker batches inputs across requests."""

from __future__ import annotations

import base64
import uuid
from array import array
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from gateway.doors.checks import check_chars, context_length, one_kind, vocab_size
from gateway.doors.disconnect import until_disconnected
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, peek_first, submit_all
from gateway.edge.errors import APIError, bad_request, decode_body, read_raw
from gateway.edge.offload import off_loop
from gateway.openai.embedding_schemas import (
    MAX_INPUTS,
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
)
from gateway.plane.hub import Hub
from protocol.messages import Embed, RequestOutput


def split_inputs(value: str | list[Any], vocab: int, ctx: int,
                 truncate: bool) -> list[str | list[int]]:
    """The request's inputs as strings or token-id lists (one kind), checked against the model."""
    inputs = one_kind(value, "input")
    if len(inputs) > MAX_INPUTS:
        raise bad_request(f"input has {len(inputs)} items; at most {MAX_INPUTS} inputs per "
                          "request.", param="input", code="invalid_value")
    for i, v in enumerate(inputs):
        if not v:
            raise bad_request(f"input[{i}] is empty; every input needs at least one token.",
                              param="input", code="invalid_value")
        if isinstance(v, str):
            if not truncate:
                check_chars(len(v), ctx, "input")
            continue
        bad = next((t for t in v if t >= vocab), None) if max(v) >= vocab else None  # the
        # schema refused t < 0; max() walks at C speed (the body may hold millions of ids)
        if bad is not None:
            raise bad_request(f"input[{i}] holds token id {bad}, outside the model's vocabulary "
                              f"of {vocab} tokens (ids are 0 to {vocab - 1}).", param="input",
                              code="invalid_value")
        if 0 < ctx < len(v) and not truncate:
            raise bad_request(f"input[{i}] is {len(v)} tokens; this model takes at most {ctx} "
                              "tokens per input. Shorten it, or set \"truncate\": true to cut it "
                              "to the limit.", param="input", code="context_length_exceeded")
    return inputs


def encode_vector(raw: bytes, fmt: str) -> list[float] | str:
    """One little-endian float32 vector as OpenAI sends it: floats, or base64 of the bytes."""
    if fmt == "base64":
        return base64.b64encode(raw).decode("ascii")
    vec = array("f")
    vec.frombytes(raw)  # every platform MLX runs on is little-endian
    return vec.tolist()


class EmbeddingsEndpoint:
    """Validates an embeddings request, sends it as one job, answers in OpenAI's shape."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def handle(self, request: Request) -> Response:
        """Handle one POST /v1/embeddings."""
        try:
            raw = await read_raw(request)
            size = len(raw)  # a large body is decoded and checked off the event loop
            req = await off_loop(size, decode_body, raw, EmbeddingRequest)
        except APIError as exc:  # name the field, as OpenAI does, not the path inside it
            if exc.param and exc.param.startswith("input["):
                exc.param = "input"
            raise
        st = await self.hub.wait_ready(req.model)
        require_kind(st, "embed", "/v1/embeddings")
        facts = st.facts
        if req.dimensions and facts is not None and "dimensions" not in facts.capabilities:
            raise bad_request(f"The model '{req.model}' does not support dimensions: it was not "
                              "trained for truncated embeddings.", param="dimensions",
                              code="invalid_value")
        inputs = await off_loop(size, split_inputs, req.input, vocab_size(facts),
                                context_length(facts, None), req.truncate)
        job = Embed(request_id=f"embd-{uuid.uuid4().hex}", inputs=inputs,
                    dimensions=req.dimensions or 0, truncate=req.truncate)
        streams = submit_all(self.hub, req.model, [job])
        try:
            first = (await until_disconnected(request, peek_first(self.hub, streams)))[0]
        finally:
            abort_all(self.hub, streams)
        vectors = sum(len(v) for v in first.embeddings)  # 2048 x 1024 floats: ~0.2 s to format
        return await off_loop(vectors, self._respond, req, first, len(inputs))

    def _respond(self, req: EmbeddingRequest, out: RequestOutput, count: int) -> Response:
        if out.error is not None:
            raise error_for(out)
        if len(out.embeddings) != count:
            raise APIError(500, f"the worker returned {len(out.embeddings)} embeddings for "
                           f"{count} inputs", type="server_error", code="internal_error")
        body = EmbeddingList(
            data=[Embedding(index=i, embedding=encode_vector(v, req.encoding_format))
                  for i, v in enumerate(out.embeddings)],
            model=req.model,
            usage=EmbeddingUsage(prompt_tokens=out.prompt_tokens, total_tokens=out.prompt_tokens))
        return Response(msgspec.json.encode(body), media_type="application/json")
