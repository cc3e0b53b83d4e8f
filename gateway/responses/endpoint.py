"""POST /v1/responses, streamed and not; stored (and continued) through stored.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.doors.checks import check_prompt_chars, check_template_kwargs, context_length
from gateway.doors.choice import ChoiceAssembler
from gateway.doors.disconnect import until_disconnected
from gateway.doors.jobs import _pick, encodable
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, outputs, peek_first, submit_all
from gateway.doors.salt import CacheSalts
from gateway.doors.streaming import SSE_HEADERS
from gateway.doors.structured import thinks
from gateway.doors.tenant import tenant_of
from gateway.edge.errors import APIError
from gateway.edge.offload import off_loop
from gateway.images.body import read_image_body
from gateway.images.intake import ImageParts
from gateway.plane.hub import Hub, Stream, Terminal
from gateway.responses.events import ResponseBuilder
from gateway.responses.history import as_input
from gateway.responses.schemas import CreateResponse
from gateway.responses.stored import Conversations, Saver
from gateway.responses.tooltypes import served_tools
from gateway.responses.translate import (
    template_kwargs,
    to_grammar,
    to_messages,
    to_tools,
)
from gateway.served import ServedModel
from protocol.messages import Generate, GrammarSpec, RequestOutput, SamplingParams


def event_bytes(ev: dict[str, Any]) -> bytes:
    """One SSE event whose `event:` line is the payload's type."""
    kind: str = ev["type"]
    return b"event: " + kind.encode() + b"\ndata: " + msgspec.json.encode(ev) + b"\n\n"


def _usage(a: ChoiceAssembler) -> dict[str, Any]:
    return {"input_tokens": a.prompt_tokens,
            "input_tokens_details": {"cached_tokens": a.cached_tokens,
                                     "cache_write_tokens": max(a.prompt_tokens -
                                                               a.cached_tokens, 0)},
            "output_tokens": a.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": a.prompt_tokens + a.completion_tokens}


class ResponsesEndpoint:
    """Validates a Responses request, submits one chat job and relays it as Responses items."""

    def __init__(self, hub: Hub, served: dict[str, ServedModel],
                 conversations: Conversations | None = None,
                 allow_image_urls: bool = False, salts: CacheSalts | None = None) -> None:
        self.hub = hub
        self.served = served
        self.allow_image_urls = allow_image_urls
        self.salts = salts or CacheSalts()
        self.conv = conversations or Conversations(None, keyed=False)

    async def handle(self, request: Request) -> Response:
        """Handle one POST /v1/responses."""
        req, size = await read_image_body(request, CreateResponse)
        images = ImageParts()
        messages, grammar = await off_loop(size, _translate, req, images, size)
        owner = self.conv.owner(request)
        items, weight = await self.conv.items(req, owner, size)  # previous turn + this input
        # WEIGHT: the body's size, or the stored conversation's when larger (it is converted too)
        st = await self.hub.wait_ready(req.model)
        require_kind(st, "generate", "/v1/responses")
        pictures = await images.for_model(req.model, st.facts, self.allow_image_urls)
        served = self.served[req.model]
        d = served.sampling
        params = SamplingParams(
            max_tokens=req.max_output_tokens or 0,
            temperature=_pick(req.temperature, d, "temperature", 1.0),
            top_p=_pick(req.top_p, d, "top_p", 1.0), top_k=max(_pick(None, d, "top_k", 0), 0),
            min_p=_pick(None, d, "min_p", 0.0),
            repetition_penalty=_pick(None, d, "repetition_penalty", 1.0),
            presence_penalty=_pick(None, d, "presence_penalty", 0.0), ignore_eos=req.ignore_eos)
        tools, parse_tools, prefix, forced = await off_loop(size, to_tools, req,
                                                            served.tool_call_parser)
        grammar = forced or grammar  # a forced call comes before any text.format
        if req.previous_response_id is not None:  # the stored turns, then this input
            history = ImageParts()  # the stored turns' images, then this input's, in order
            messages = await off_loop(weight, _continue, req, items, history)
            if history.refs:
                pictures = await history.for_model(req.model, st.facts,
                                                   self.allow_image_urls)
        await off_loop(weight, check_prompt_chars, messages, tools,
                       context_length(st.facts, served.context_length), "input")
        saver = self.conv.saver(req, owner, items, weight)  # after: a prompt too long says so
        if grammar is not None:
            grammar.after_think = thinks(served.reasoning_parser, template_kwargs(req))
        rid = f"resp_{uuid.uuid4().hex}"
        job = Generate(request_id=rid, params=params, messages=messages, tools=tools,
                       chat_template_kwargs=template_kwargs(req), assistant_prefix=prefix,
                       grammar=grammar, images=pictures, cache_salt=self.salts.of(request))
        await off_loop(weight, encodable, job)
        streams = submit_all(self.hub, req.model, [job], tenant_of(request, self.salts.keyed))
        try:
            (first,) = await until_disconnected(request, peek_first(self.hub, streams))
        except BaseException as exc:
            abort_all(self.hub, streams)
            if (isinstance(exc, APIError) and exc.code == "invalid_response_format"
                    and exc.param == "response_format"):
                exc.param = "text.format"  # the worker names chat's parameter
            raise
        asm = ChoiceAssembler(0, tool_parser=served.tool_call_parser,
                              reasoning_parser=served.reasoning_parser, tools=tools,
                              parse_tools=parse_tools, think_opened=first.think_opened,
                              prefix=prefix)
        parallel = req.parallel_tool_calls is not False
        builder = ResponseBuilder(rid, _echo(req, params, saver.store), parallel)
        builder.namespaces = served_tools(req.tools or [], quiet=True)[1]  # to_tools logged
        if req.stream:
            body = self._stream(builder, asm, streams[0], first, saver)
            return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            return await until_disconnected(request,
                                            self._collect(builder, asm, streams[0], first,
                                                          saver))
        finally:
            abort_all(self.hub, streams)

    async def _collect(self, b: ResponseBuilder, asm: ChoiceAssembler, stream: Stream,
                       first: RequestOutput, saver: Saver) -> Response:
        async for item in outputs(stream, first):
            if isinstance(item, Terminal) or item.error is not None:
                raise error_for(item)
            before = asm.completion_tokens
            b.feed(asm.feed(item), asm.completion_tokens - before)
        final = b.finish(asm.finish_reason, _usage(asm))[-1]
        await saver.commit(final["response"])  # committed before the client hears of it
        return JSONResponse(final["response"])

    async def _stream(self, b: ResponseBuilder, asm: ChoiceAssembler, stream: Stream,
                      first: RequestOutput, saver: Saver) -> AsyncIterator[bytes]:
        try:
            for ev in b.start():
                yield event_bytes(ev)
            async for item in outputs(stream, first):
                if isinstance(item, Terminal) or item.error is not None:
                    err = error_for(item)
                    for ev in await saver.failed(b.fail("server_error", err.message)):
                        yield event_bytes(ev)
                    return
                before = asm.completion_tokens
                for ev in b.feed(asm.feed(item), asm.completion_tokens - before):
                    yield event_bytes(ev)
            *events, last = b.finish(asm.finish_reason, _usage(asm))
            for ev in events:
                yield event_bytes(ev)
            yield event_bytes(await saver.final(b, last))  # stored before it is sent
        finally:
            abort_all(self.hub, [stream])


def _translate(req: CreateResponse, images: ImageParts,
               size: int) -> tuple[list[dict[str, Any]], GrammarSpec | None]:
    """The request's own messages (its images recorded in IMAGES) and grammar, checked."""
    messages = to_messages(req, images)  # checks this request's own input items first
    images.check_body(size)
    grammar = to_grammar(req)
    check_template_kwargs(req.chat_template_kwargs)
    return messages, grammar


def _continue(req: CreateResponse, items: list[dict[str, Any]],
              history: ImageParts) -> list[dict[str, Any]]:
    """The stored conversation ITEMS (this input last) as messages, their images in HISTORY."""
    return to_messages(msgspec.structs.replace(req, input=as_input(items)), history)


def _echo(req: CreateResponse, params: SamplingParams, store: bool) -> dict[str, Any]:
    """The request fields the response object repeats (optional ones only when given)."""
    choice: Any = req.tool_choice if isinstance(req.tool_choice, str) or req.tool_choice is None \
        else msgspec.to_builtins(req.tool_choice)
    effort = req.reasoning.effort if req.reasoning else None
    return {"instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
            "model": req.model, "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id, "reasoning": {"effort": effort, "summary": None},
            "store": store, "temperature": params.temperature,
            "text": {"format": {"type": "text"}}, "tool_choice": choice or "auto",
            "tools": [{"type": t.type, "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": t.strict} for t in req.tools or []],
            "top_p": params.top_p,
            "truncation": "disabled", "metadata": req.metadata or {},
            **({"user": req.user} if req.user is not None else {})}  # OpenAI's `user` is never null
