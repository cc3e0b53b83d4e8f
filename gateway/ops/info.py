"""GET /v1/models and /openapi.json."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.edge.auth import Operators
from gateway.ops.openapi import build_openapi
from gateway.ops.redact import shown_model
from gateway.plane.hub import Hub
from gateway.served import ServedModel
from protocol.messages import ModelFacts


class InfoEndpoints:
    """Read-only endpoints about what is served and how it is doing."""

    def __init__(self, hub: Hub, served: dict[str, ServedModel], version: str,
                 operators: Operators | None = None) -> None:
        self.hub = hub
        self.operators = operators or Operators([], None)
        self.served = served
        self.spec = build_openapi(version)

    def card(self, alias: str, full: bool = True) -> dict[str, Any]:
        """One model in OpenAI's shape, with our parser and capability fields (not FULL: a local
        model folder by its name only)."""
        s, st = self.served[alias], self.hub.aliases[alias]
        facts = st.facts
        ctx = facts.context_length if facts else s.context_length
        kind = facts.kind if facts else None  # unknown until the worker says Ready
        extra: dict[str, Any] = {}
        if facts is not None and facts.kind == "embed":
            extra["dimensions"] = facts.embedding_dimensions
        if facts is not None and facts.kind == "speech":
            extra.update(voices=facts.voices, sample_rate=facts.sample_rate)
        return {"id": alias, "object": "model", "created": s.created, "kind": kind,
                "capabilities": capabilities(facts) if facts else [], **extra,
                "owned_by": "rapid-mlx", "tool_call_parser": s.tool_call_parser,
                "reasoning_parser": s.reasoning_parser, "is_hybrid": s.is_hybrid,
                "is_moe": s.is_moe,
                "supports_spec_decode": bool(facts.speculative) if facts else False,
                "context_length": ctx, "state": st.state,
                "model": st.model if full else shown_model(st.model),
                "revision": st.revision, "boot_id": st.boot_id}

    async def models(self, request: Request) -> Response:
        """The OpenAI model list."""
        full = self.operators.sees_all(request.headers)
        return JSONResponse({"object": "list", "data": [self.card(a, full) for a in self.served]})

    async def model(self, request: Request) -> Response:
        """GET /v1/models/{model}: one model card, or 404 naming the served models."""
        alias = request.path_params["model"]
        self.hub.lookup(alias)  # the 404 in the OpenAI shape, naming what is served
        return JSONResponse(self.card(alias, self.operators.sees_all(request.headers)))

    async def openapi(self, request: Request) -> Response:
        """The OpenAPI document."""
        return JSONResponse(self.spec)


ENDPOINTS = {"generate": ["chat", "completions", "responses", "messages"],
             "embed": ["embeddings"], "transcribe": ["transcriptions"], "speech": ["speech"]}


def capabilities(facts: ModelFacts) -> list[str]:
    """What a client may ask of the model: its endpoints, then the worker's own capabilities."""
    return [*ENDPOINTS.get(facts.kind, []), *facts.capabilities]
