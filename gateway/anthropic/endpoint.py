"""POST /v1/messages (streamed and not) and /v1/messages/count_tokens."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.anthropic.blocks import BlockBuilder, stop_reason, usage
from gateway.anthropic.errors import envelope
from gateway.anthropic.models import resolve_model
from gateway.anthropic.schemas import CountTokensRequest, MessagesRequest
from gateway.anthropic.stream import event
from gateway.anthropic.translate import chat_messages, chat_tools, sampling, template_kwargs
from gateway.doors.checks import check_prompt_chars, context_length
from gateway.doors.choice import ChoiceAssembler
from gateway.doors.disconnect import until_disconnected
from gateway.doors.jobs import encodable
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, peek_first, submit_all
from gateway.doors.salt import CacheSalts
from gateway.doors.streaming import merged, slim_stream
from gateway.doors.structured import thinks
from gateway.doors.tenant import tenant_of
from gateway.edge.offload import off_loop
from gateway.images.body import read_image_body
from gateway.images.intake import ImageParts
from gateway.plane.hub import Hub, Stream, Terminal
from gateway.served import ServedModel
from protocol.messages import Generate, RequestOutput, SamplingParams

HOLD_S = 1.0  # a stream waits this long for its first output before answering 200 (then pings)
PING_S = 5.0  # seconds between pings while a long prefill runs


class MessagesEndpoint:
    """Translates Messages requests into Generate jobs and their outputs into Anthropic's shape."""

    def __init__(self, hub: Hub, served: dict[str, ServedModel],
                 model_map: list[tuple[str, str]] | None = None,
                 allow_image_urls: bool = False, salts: CacheSalts | None = None) -> None:
        self.hub = hub
        self.served = served
        self.model_map = model_map or []
        self.allow_image_urls = allow_image_urls
        self.salts = salts or CacheSalts()

    async def _submit(self, req: CountTokensRequest, size: int, params: SamplingParams,
                      mid: str, salt: str, tenant: str = "") -> tuple[list[Stream], Callable[[bool], ChoiceAssembler]]:
        images = ImageParts()
        messages = await off_loop(size, _translate, req, images, size)
        alias = resolve_model(req.model, self.served, self.model_map)
        st = await self.hub.wait_ready(alias)
        require_kind(st, "generate", "/v1/messages")
        pictures = await images.for_model(alias, st.facts, self.allow_image_urls)
        served = self.served[alias]
        tools, parse_tools, prefix, grammar = await off_loop(size, chat_tools, req,
                                                             served.tool_call_parser)
        if grammar is not None:
            grammar.after_think = thinks(served.reasoning_parser, template_kwargs(req))
        ctx = context_length(st.facts, served.context_length)
        await off_loop(size, check_prompt_chars, messages, tools, ctx, "messages")
        job = Generate(request_id=mid, params=params, messages=messages, tools=tools,
                       chat_template_kwargs=template_kwargs(req), assistant_prefix=prefix,
                       grammar=grammar, images=pictures, cache_salt=salt)
        await off_loop(size, encodable, job)
        streams = submit_all(self.hub, alias, [job], tenant)

        def assembler(think_opened: bool) -> ChoiceAssembler:
            return ChoiceAssembler(0, tool_parser=served.tool_call_parser,
                                   reasoning_parser=served.reasoning_parser, tools=tools,
                                   parse_tools=parse_tools, think_opened=think_opened,
                                   prefix=prefix)
        return streams, assembler

    async def count_tokens(self, request: Request) -> Response:
        """Handle one POST /v1/messages/count_tokens: render and prefill with max_tokens=1."""
        req, size = await read_image_body(request, CountTokensRequest)
        streams, _ = await self._submit(req, size, SamplingParams(max_tokens=1, temperature=0.0),
                                             f"msgcount-{uuid.uuid4().hex}",
                                             self.salts.of(request),
                                             tenant_of(request, self.salts.keyed))
        try:
            firsts = await until_disconnected(request, peek_first(self.hub, streams))
        finally:
            abort_all(self.hub, streams)
        return JSONResponse({"input_tokens": firsts[0].prompt_tokens})

    async def handle(self, request: Request) -> Response:
        """Handle one POST /v1/messages."""
        req, size = await read_image_body(request, MessagesRequest)
        served = self.served.get(resolve_model(req.model, self.served, self.model_map))
        params = sampling(req, served.sampling if served else None)
        mid = f"msg_{uuid.uuid4().hex[:24]}"
        streams, assembler = await self._submit(req, size, params, mid, self.salts.of(request),
                                                tenant_of(request, self.salts.keyed))
        single = bool(req.tool_choice and req.tool_choice.disable_parallel_tool_use)
        first = asyncio.ensure_future(peek_first(self.hub, streams))
        try:
            await until_disconnected(request, asyncio.wait({first}, timeout=HOLD_S if req.stream
                                                           else None))
            if first.done():
                first.result()  # an error before any output is an HTTP error
        except BaseException:
            first.cancel()
            abort_all(self.hub, streams)
            raise
        if req.stream:
            # the stream keeps the request's scalars, not its body: its charge is given back now
            return slim_stream(request, req,
                               lambda slim: self._stream(mid, slim, assembler, single, streams,
                                                         first),
                               messages=[], system=None, tools=None)
        try:
            return await until_disconnected(
                request, self._collect(mid, req, assembler, single, streams, first.result()))
        finally:
            abort_all(self.hub, streams)

    async def _collect(self, mid: str, req: MessagesRequest,
                       assembler: Callable[[bool], ChoiceAssembler], single: bool,
                       streams: list[Stream], firsts: list[RequestOutput]) -> Response:
        builder = BlockBuilder(single)
        asm = assembler(firsts[0].think_opened)
        seq = None
        async for _, item in merged(streams, firsts):
            if isinstance(item, Terminal) or item.error is not None:
                raise error_for(item)
            builder.feed(asm.feed(item))
            seq = item.stop_sequence or seq
        builder.close()
        return JSONResponse(_message(mid, req, asm, builder.blocks, seq))

    async def _stream(self, mid: str, req: MessagesRequest,
                      assembler: Callable[[bool], ChoiceAssembler], single: bool,
                      streams: list[Stream], first: asyncio.Future[list[RequestOutput]]
                      ) -> AsyncIterator[bytes]:
        builder = BlockBuilder(single)
        asm = assembler(False)
        try:
            if first.done() and not first.cancelled() and first.exception() is None:
                asm.prompt_tokens = first.result()[0].prompt_tokens
                asm.cached_tokens = first.result()[0].cached_tokens
            start = _message(mid, req, asm, [])
            start.update(stop_reason=None, stop_sequence=None)
            yield event("message_start", {"type": "message_start", "message": start})
            while not first.done():
                await asyncio.wait({first}, timeout=PING_S)
                if not first.done():
                    yield event("ping", {"type": "ping"})
            try:
                firsts = first.result()
            except Exception as exc:  # noqa: BLE001 -- an APIError (or a bug): an error event
                yield event("error", _error_body(exc))
                return
            asm, seq = assembler(firsts[0].think_opened), None
            async for _, item in merged(streams, firsts):
                if isinstance(item, Terminal) or item.error is not None:
                    yield event("error", envelope(error_for(item)))
                    return
                for name, data in builder.feed(asm.feed(item)):
                    yield event(name, data)
                seq = item.stop_sequence or seq
            for name, data in builder.close():
                yield event(name, data)
            yield event("message_delta", {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason(asm, builder.blocks, seq),
                          "stop_sequence": seq},
                "usage": usage(asm)})
            yield event("message_stop", {"type": "message_stop"})
        finally:
            first.cancel()
            abort_all(self.hub, streams)


def _translate(req: CountTokensRequest, images: ImageParts, size: int) -> list[dict[str, Any]]:
    """The request's messages (its images recorded in IMAGES), checked."""
    messages = chat_messages(req, images)
    images.check_body(size)
    return messages


def _message(mid: str, req: MessagesRequest, asm: ChoiceAssembler,
             blocks: list[dict[str, Any]], seq: str | None = None) -> dict[str, Any]:
    return {"id": mid, "type": "message", "role": "assistant", "content": blocks,
            "model": req.model, "stop_reason": stop_reason(asm, blocks, seq),
            "stop_sequence": seq, "usage": usage(asm)}


def _error_body(exc: BaseException) -> dict[str, Any]:
    from gateway.edge.errors import APIError

    err = exc if isinstance(exc, APIError) else APIError(500, f"internal error: {exc}")
    return envelope(err)
