"""POST /v1/chat/completions, streamed and not."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.doors.checks import (
    check_fanout,
    check_prompt_chars,
    check_template_kwargs,
    context_length,
    vocab_size,
)
from gateway.doors.choice import ChoiceAssembler
from gateway.doors.disconnect import until_disconnected
from gateway.doors.jobs import chat_params, encodable
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, peek_first, submit_spaced
from gateway.doors.response_size import Tally, build, check_upfront
from gateway.doors.salt import CacheSalts
from gateway.doors.streaming import DONE, merged, slim_stream, sse
from gateway.doors.structured import grammar_for, thinks
from gateway.doors.tenant import tenant_of
from gateway.edge.offload import off_loop
from gateway.images.body import read_image_body
from gateway.images.intake import ImageParts
from gateway.openai.chat_input import chat_messages, chat_tools
from gateway.openai.logprobs import chat_logprobs
from gateway.openai.logprobs_json import chat_logprobs_raw
from gateway.openai.schemas import ChatCompletionRequest
from gateway.plane.hub import Hub, Terminal
from gateway.served import ServedModel
from protocol.messages import Generate, GrammarSpec


class ChatEndpoint:
    """Validates a chat request, submits one job per choice and relays the outputs."""

    def __init__(self, hub: Hub, served: dict[str, ServedModel],
                 allow_image_urls: bool = False, salts: CacheSalts | None = None) -> None:
        self.hub = hub
        self.served = served
        self.allow_image_urls = allow_image_urls
        self.salts = salts or CacheSalts()

    async def handle(self, request: Request) -> Response:
        """Handle one POST /v1/chat/completions."""
        req, size = await read_image_body(request, ChatCompletionRequest)
        images = ImageParts()
        messages, grammar = await off_loop(size, _translate, req, images, size)
        st = await self.hub.wait_ready(req.model)
        require_kind(st, "generate", "/v1/chat/completions")
        pictures = await images.for_model(req.model, st.facts, self.allow_image_urls)
        served = self.served[req.model]
        params = chat_params(req, served.sampling, vocab_size(st.facts))
        if req.logprobs and not req.stream:
            check_upfront(req.n, params.max_tokens, req.top_logprobs or 0, "top_logprobs")
        tools, parse_tools, prefix, forced = await off_loop(size, chat_tools, req,
                                                            served.tool_call_parser)
        grammar = forced or grammar  # a forced call comes before any response format
        kwargs = dict(req.chat_template_kwargs or {})
        if req.reasoning_effort is not None:
            kwargs.setdefault("reasoning_effort", req.reasoning_effort)
        if grammar is not None:
            grammar.after_think = thinks(served.reasoning_parser, kwargs)
        cid = f"chatcmpl-{uuid.uuid4().hex}"
        await off_loop(size, check_prompt_chars, messages, tools,
                       context_length(st.facts, served.context_length), "messages")
        jobs = [Generate(request_id=f"{cid}-{i}", params=params, messages=messages, tools=tools,
                         chat_template_kwargs=kwargs, assistant_prefix=prefix, grammar=grammar,
                         images=pictures, cache_salt=self.salts.of(request))
                for i in range(req.n)]
        await off_loop(size, encodable, jobs[0])  # the choices differ only in request_id
        streams = await submit_spaced(self.hub, req.model, jobs,
                                      tenant_of(request, self.salts.keyed))
        try:
            firsts = await until_disconnected(request, peek_first(self.hub, streams))
        except BaseException:
            abort_all(self.hub, streams)
            raise
        asms = [
            ChoiceAssembler(i, tool_parser=served.tool_call_parser,
                            reasoning_parser=served.reasoning_parser, tools=tools,
                            parse_tools=parse_tools, think_opened=firsts[i].think_opened,
                            prefix=prefix)
            for i in range(req.n)
        ]
        created = int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            # the stream keeps only the request's scalars (its body, raw and decoded, its jobs
            # and images go with this frame; the assemblers' tools fit the context length), so
            # its body charge is given back now rather than when the answer ends
            return slim_stream(
                request, req,
                lambda slim: self._stream(cid, created, slim, asms, streams, firsts, include_usage),
                messages=[], tools=None, response_format=None, chat_template_kwargs=None,
                logit_bias=None)
        try:
            return await until_disconnected(
                request, self._collect(cid, created, req, asms, streams, firsts))
        finally:
            abort_all(self.hub, streams)

    async def _collect(self, cid: str, created: int, req: ChatCompletionRequest,
                       asms: list[ChoiceAssembler], streams: Any, firsts: Any) -> Response:
        tally = Tally(req.n, req.top_logprobs or 0, "top_logprobs", req.logprobs)
        async for i, item in merged(streams, firsts):
            if isinstance(item, Terminal) or item.error is not None:
                raise error_for(item)
            tally.add(len(item.token_ids))
            asms[i].feed(item)
        return await build(tally, lambda: self._body(cid, created, req, asms))

    def _body(self, cid: str, created: int, req: ChatCompletionRequest,
              asms: list[ChoiceAssembler]) -> dict[str, Any]:
        """The non-streamed answer's body."""
        choices = []
        for a in asms:
            calls = a.calls if req.parallel_tool_calls is not False else a.calls[:1]
            message: dict[str, Any] = {"role": "assistant", "content": a.content or None,
                                       "refusal": None}
            if a.reasoning:
                message["reasoning_content"] = a.reasoning
            if calls:
                message["tool_calls"] = calls
            elif not a.content:
                message["content"] = ""
            choices.append({"index": a.index, "message": message, "finish_reason": a.finish_reason,
                            "logprobs": chat_logprobs_raw(a.logprobs) if req.logprobs else None})
        return {"id": cid, "object": "chat.completion", "created": created, "model": req.model,
                "choices": choices, "usage": _usage(asms)}

    async def _stream(self, cid: str, created: int, req: ChatCompletionRequest,
                      asms: list[ChoiceAssembler], streams: Any, firsts: Any,
                      include_usage: bool) -> AsyncIterator[bytes]:
        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                        "model": req.model, "choices": choices, **extra})

        try:
            for a in asms:
                yield chunk([{"index": a.index, "delta": {"role": "assistant", "content": "",
                                                          "refusal": None},
                              "logprobs": None, "finish_reason": None}])
            async for i, item in merged(streams, firsts):
                if isinstance(item, Terminal) or item.error is not None:
                    yield sse(error_for(item).body())
                    return
                a = asms[i]
                before = len(a.logprobs)
                delta = a.feed(item)
                d: dict[str, Any] = {}
                if delta.content:
                    d["content"] = delta.content
                if delta.reasoning:
                    d["reasoning_content"] = delta.reasoning
                if delta.tool_calls and (req.parallel_tool_calls is not False or
                                         all(tc["index"] == 0 for tc in delta.tool_calls)):
                    d["tool_calls"] = [tc for tc in delta.tool_calls
                                       if req.parallel_tool_calls is not False or tc["index"] == 0]
                lp = chat_logprobs(a.logprobs[before:]) if req.logprobs else None
                if d or a.finish_reason is not None or lp:
                    yield chunk([{"index": i, "delta": d, "logprobs": lp,
                                  "finish_reason": a.finish_reason}],
                                **({"usage": None} if include_usage else {}))
            if include_usage:
                yield chunk([], usage=_usage(asms))
            yield DONE
        finally:
            abort_all(self.hub, streams)


def _translate(req: ChatCompletionRequest, images: ImageParts,
               size: int) -> tuple[list[dict[str, Any]], GrammarSpec | None]:
    """The request's messages (its images recorded in IMAGES) and response format, checked."""
    messages = chat_messages(req, images)
    images.check_body(size)
    check_fanout(1, req.n)
    check_template_kwargs(req.chat_template_kwargs)
    fmt = req.response_format
    return messages, grammar_for(fmt.type, fmt.json_schema) if fmt else None


def _usage(asms: list[ChoiceAssembler]) -> dict[str, Any]:
    prompt = asms[0].prompt_tokens
    completion = sum(a.completion_tokens for a in asms)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": asms[0].cached_tokens}}
