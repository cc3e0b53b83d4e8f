"""POST /v1/completions (legacy text completions), streamed and not."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.doors.checks import (
    check_fanout,
    context_length,
    prompt_count,
    split_prompt,
    vocab_size,
)
from gateway.doors.disconnect import until_disconnected
from gateway.doors.jobs import completion_params, encodable
from gateway.doors.kinds import require_kind
from gateway.doors.relay import abort_all, error_for, peek_first, submit_spaced
from gateway.doors.response_size import Tally, build, check_upfront
from gateway.doors.salt import CacheSalts
from gateway.doors.streaming import DONE, merged, slim_stream, sse
from gateway.doors.structured import grammar_for
from gateway.doors.tenant import tenant_of
from gateway.edge.errors import APIError, bad_request, decode_body, read_raw
from gateway.edge.offload import off_loop
from gateway.openai.logprobs import completion_logprobs
from gateway.openai.logprobs_json import completion_logprobs_raw
from gateway.openai.schemas import CompletionRequest
from gateway.plane.hub import Hub, Stream, Terminal
from protocol.messages import Generate, GrammarSpec, ModelFacts, RequestOutput, TokenLogprob


class _Choice:
    def __init__(self, index: int, echo: str) -> None:
        self.index = index
        self.text = echo
        self.pending_echo = echo
        self.finish_reason: str | None = None
        self.logprobs: list[TokenLogprob] = []
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cached_tokens = 0

    def feed(self, out: RequestOutput) -> str:
        text, self.pending_echo = self.pending_echo + out.text, ""
        self.text += out.text
        self.logprobs.extend(out.logprobs)
        self.finish_reason = out.finish_reason
        self.prompt_tokens = out.prompt_tokens or self.prompt_tokens
        self.completion_tokens = out.completion_tokens or self.completion_tokens
        self.cached_tokens = out.cached_tokens or self.cached_tokens
        return text


class CompletionsEndpoint:
    """Validates a completion request, one job per prompt and choice, relays the outputs."""

    def __init__(self, hub: Hub, salts: CacheSalts | None = None) -> None:
        self.hub = hub
        self.salts = salts or CacheSalts()

    async def handle(self, request: Request) -> Response:
        """Handle one POST /v1/completions."""
        try:
            raw = await read_raw(request)
            size = len(raw)  # a large body is decoded, checked and its jobs built off the loop
            req = await off_loop(size, decode_body, raw, CompletionRequest)
        except APIError as exc:  # param names the field, as OpenAI does; the message has the path
            if exc.param and exc.param.startswith("prompt["):
                exc.param = "prompt"
            raise
        if req.suffix:
            raise bad_request("suffix is not supported.", param="suffix")
        if req.best_of is not None and req.best_of < req.n:  # as OpenAI answers
            raise bad_request("best_of must be greater than or equal to n.", param="best_of",
                              code="invalid_value")
        if req.best_of is not None and req.best_of > req.n:
            raise bad_request("best_of greater than n is not supported (no completions are "
                              "ranked server-side): ask for n completions instead.",
                              param="best_of", code="unsupported_parameter")
        grammar = await off_loop(size, _checked, req)
        st = await self.hub.wait_ready(req.model)
        require_kind(st, "generate", "/v1/completions")
        cid = f"cmpl-{uuid.uuid4().hex}"
        jobs, choices = await off_loop(size, _jobs, req, grammar, st.facts, cid,
                                       self.salts.of(request))
        streams = await submit_spaced(self.hub, req.model, jobs,
                                      tenant_of(request, self.salts.keyed))
        try:
            firsts = await until_disconnected(request, peek_first(self.hub, streams))
        except BaseException:
            abort_all(self.hub, streams)
            raise
        created = int(time.time())
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            # the stream keeps the request's scalars (and an echoed prompt, within the context
            # length), not its body: the body charge is given back now (chat.py does the same)
            return slim_stream(
                request, req,
                lambda slim: self._stream(cid, created, slim, choices, streams, firsts,
                                          include_usage),
                prompt="", stop=None, logit_bias=None, response_format=None)
        try:
            return await until_disconnected(
                request, self._collect(cid, created, req, choices, streams, firsts))
        finally:
            abort_all(self.hub, streams)

    async def _collect(self, cid: str, created: int, req: CompletionRequest,
                       choices: list[_Choice], streams: list[Stream],
                       firsts: list[RequestOutput]) -> Response:
        tally = Tally(len(choices), req.logprobs or 0, "logprobs", req.logprobs is not None)
        async for i, item in merged(streams, firsts):
            if isinstance(item, Terminal) or item.error is not None:
                raise error_for(item)
            tally.add(len(item.token_ids))
            choices[i].feed(item)
        return await build(tally, lambda: self._body(cid, created, req, choices))

    def _body(self, cid: str, created: int, req: CompletionRequest,
              choices: list[_Choice]) -> dict[str, Any]:
        """The non-streamed answer's body."""
        return {
            "id": cid, "object": "text_completion", "created": created, "model": req.model,
            "choices": [{"index": c.index, "text": c.text, "finish_reason": c.finish_reason,
                         "logprobs": completion_logprobs_raw(c.logprobs) if req.logprobs is not None
                         else None} for c in choices],
            "usage": _usage(choices, req.n),
        }

    async def _stream(self, cid: str, created: int, req: CompletionRequest,
                      choices: list[_Choice], streams: list[Stream], firsts: list[RequestOutput],
                      include_usage: bool) -> AsyncIterator[bytes]:
        try:
            async for i, item in merged(streams, firsts):
                if isinstance(item, Terminal) or item.error is not None:
                    yield sse(error_for(item).body())
                    return
                c = choices[i]
                before = len(c.logprobs)
                text = c.feed(item)
                lp = completion_logprobs(c.logprobs[before:]) if req.logprobs is not None else None
                yield sse({"id": cid, "object": "text_completion", "created": created,
                           "model": req.model, "choices": [{"index": c.index, "text": text,
                                                            "logprobs": lp,
                                                            "finish_reason": c.finish_reason}]})
            if include_usage:
                yield sse({"id": cid, "object": "text_completion", "created": created,
                           "model": req.model, "choices": [], "usage": _usage(choices, req.n)})
            yield DONE
        finally:
            abort_all(self.hub, streams)


def _checked(req: CompletionRequest) -> GrammarSpec | None:
    """The request's fan-out checked (before any job exists); its response format's grammar."""
    check_fanout(prompt_count(req.prompt), req.n)
    fmt = req.response_format
    return grammar_for(fmt.type, fmt.json_schema) if fmt else None


def _jobs(req: CompletionRequest, grammar: GrammarSpec | None, facts: ModelFacts | None,
          cid: str, salt: str) -> tuple[list[Generate], list[_Choice]]:
    """One job per prompt and choice (checked against the model's FACTS), and their choices."""
    vocab = vocab_size(facts)
    params = completion_params(req, vocab=vocab)
    prompts = split_prompt(req.prompt, vocab, context_length(facts, None))
    if req.logprobs is not None and not req.stream:
        check_upfront(len(prompts) * req.n, params.max_tokens, req.logprobs, "logprobs")
    jobs: list[Generate] = []
    choices: list[_Choice] = []
    for p_idx, prompt in enumerate(prompts):
        for i in range(req.n):
            idx = p_idx * req.n + i
            jobs.append(Generate(request_id=f"{cid}-{idx}", params=params, grammar=grammar,
                                 cache_salt=salt, **prompt))
            choices.append(_Choice(idx, prompt.get("prompt", "") if req.echo else ""))
        encodable(jobs[-1])  # the choices of a prompt differ only in request_id
    return jobs, choices


def _usage(choices: list[_Choice], n: int) -> dict[str, Any]:
    prompt = sum(c.prompt_tokens for c in choices[::n])
    completion = sum(c.completion_tokens for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": sum(c.cached_tokens for c in choices[::n])}}
