"""Assemble the Starlette app: routes, error handlers, the edge and auth, and the lifespan."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from gateway.aliases import detect_into
from gateway.anthropic import errors as anthropic_errors
from gateway.anthropic.endpoint import MessagesEndpoint
from gateway.audio.speech import SpeechEndpoint
from gateway.audio.transcriptions import AudioEndpoints
from gateway.config import GatewayConfig
from gateway.doors.salt import CacheSalts
from gateway.edge.auth import ApiKeyMiddleware, Operators, public_paths
from gateway.edge.cors import CorsPolicy
from gateway.edge.hosts import HostPolicy
from gateway.edge.middleware import EdgeMiddleware
from gateway.edge.shapes import ErrorShapes
from gateway.openai.chat import ChatEndpoint
from gateway.openai.completions import CompletionsEndpoint
from gateway.openai.embeddings import EmbeddingsEndpoint
from gateway.ops.admin import AdminEndpoints
from gateway.ops.docs_page import DocsEndpoints
from gateway.ops.health import HealthEndpoints
from gateway.ops.info import InfoEndpoints
from gateway.ops.swap_targets import SwapTargets
from gateway.ops.workers_api import WorkersEndpoints
from gateway.plane.curve import CurveServer
from gateway.plane.hub import AliasState, Hub
from gateway.plane.routing import RoutingConfig
from gateway.plane.supervisor import Supervisor, WorkerSpec
from gateway.responses.endpoint import ResponsesEndpoint
from gateway.responses.retrieve import StoredEndpoints
from gateway.responses.stored import Conversations
from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore

log = logging.getLogger("rapid_mlx.gateway")


def _version() -> str:
    try:
        return version("rapid-mlx")
    except PackageNotFoundError:
        return "0.0.0"


def error_shapes() -> ErrorShapes:
    """The error envelopes of the gateway's paths: Anthropic's on /v1/messages, else OpenAI's."""
    shapes = ErrorShapes()
    shapes.register(anthropic_errors.PREFIX, anthropic_errors.envelope)
    return shapes


def build_app(config: GatewayConfig) -> Starlette:
    """The gateway application for CONFIG."""
    served = {s.alias: s for s in config.served}
    address, private_dir = config.resolve_address()
    curve = CurveServer(config.curve_dir) if config.curve_dir else None
    hub = Hub(address, hang_timeout=config.hang_timeout, swap_wait=config.swap_wait,
              external=not config.spawn_workers, curve=curve,
              worker_token=config.worker_token(), insecure=config.insecure_worker_transport,
              heartbeat_timeout=config.heartbeat_timeout,
              routing=RoutingConfig(policy=config.routing),
              per_tenant=config.max_requests_per_key)
    hub.exit_reasons_public = not config.api_keys
    for s in config.served:
        hub.add_alias(s.alias, s.model)
    supervisor = Supervisor(
        hub, [WorkerSpec(s.alias, s.model, [*config.worker_args, *s.worker_args])
                for s in config.served],
        max_start_crashes=config.max_start_crashes, backoff=config.restart_backoff,
        replicas=config.replicas,
    ) if config.spawn_workers else None
    operators = Operators(config.api_keys, config.admin_key)  # who sees other tenants' requests
    info = InfoEndpoints(hub, served, _version(), operators)
    audio = AudioEndpoints(hub)

    def on_ready(st: AliasState) -> None:
        """An alias's worker is up: learn its parsers from the model when no alias gave them."""
        if st.facts is not None and st.alias in served:
            detect_into(served[st.alias], st.facts.chat_template, st.facts.special_tokens,
                        st.facts.model_type)

    hub.on_ready = on_ready
    health = HealthEndpoints(hub, terse=bool(config.api_keys), operators=operators)
    workers = WorkersEndpoints(hub, operators)
    targets = SwapTargets(config.alias_models, [s.model for s in config.served],
                          config.swap_allow_paths, config.swap_allow_repos)
    admin = AdminEndpoints(hub, supervisor, config.admin_key, config.swap_drain_timeout, targets)

    store = ResponseStore(Path(config.data_dir) / RESPONSES_DB, config.responses_max_count,
                          config.responses_max_age_days * 86400, config.responses_max_bytes,
                          config.responses_max_bytes_per_key) \
        if config.store_responses and config.data_dir else None
    conversations = Conversations(store, keyed=bool(config.api_keys))
    stored = StoredEndpoints(conversations)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if store is not None:
            await store.open()
        hub.start()
        if supervisor is not None:
            supervisor.start()
        try:
            yield
        finally:
            if supervisor is not None:
                await supervisor.stop()
            await hub.close()
            if private_dir:
                shutil.rmtree(private_dir, ignore_errors=True)
            if store is not None:
                await store.close()

    salts = CacheSalts(keyed=bool(config.api_keys), shared=config.shared_prefix_cache)
    messages = MessagesEndpoint(hub, served, config.anthropic_model_map,
                                config.allow_image_urls, salts)
    docs = DocsEndpoints("rapid-mlx")
    speech = SpeechEndpoint(hub)
    routes = [
        Route("/v1/models", info.models, methods=["GET"]),
        Route("/v1/models/{model:path}", info.model, methods=["GET"]),
        Route("/v1/chat/completions",
              ChatEndpoint(hub, served, config.allow_image_urls, salts).handle, methods=["POST"]),
        Route("/v1/completions", CompletionsEndpoint(hub, salts).handle, methods=["POST"]),
        Route("/v1/embeddings", EmbeddingsEndpoint(hub).handle, methods=["POST"]),
        Route("/v1/responses", ResponsesEndpoint(hub, served, conversations,
                                                 config.allow_image_urls, salts).handle,
              methods=["POST"]),
        Route("/v1/responses/{response_id}", stored.get, methods=["GET"]),
        Route("/v1/responses/{response_id}", stored.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", stored.input_items, methods=["GET"]),
        Route("/v1/messages", messages.handle, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
        Route("/v1/audio/transcriptions", audio.transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", audio.translations, methods=["POST"]),
        Route("/v1/audio/speech", speech.handle, methods=["POST"]),
        Route("/v1/audio/voices", speech.voices, methods=["GET"]),
        Route("/v1/health", health.health, methods=["GET"]),
        Route("/v1/health/{alias}", health.health_one, methods=["GET"]),
        Route("/health", health.health, methods=["GET"]),
        Route("/livez", health.livez, methods=["GET"]),
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/metrics", health.metrics, methods=["GET"]),
        Route("/admin/swap/{alias}", admin.swap, methods=["POST"]),
        Route("/admin/drain/{alias}/{boot_id}", admin.drain, methods=["POST"]),
        Route("/v1/workers", workers.list, methods=["GET"]),
        Route("/v1/workers/{alias}", workers.one, methods=["GET"]),
        Route("/openapi.json", info.openapi, methods=["GET"]),
        Route("/docs", docs.page, methods=["GET"]),
        Route("/docs/static/{name}", docs.asset, methods=["GET"]),
    ]
    shapes = error_shapes()
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(EdgeMiddleware, hosts=HostPolicy(config.host, config.allowed_hosts),
                       cors=CorsPolicy(config.cors_allow_origins), shapes=shapes),
            Middleware(ApiKeyMiddleware, keys=config.api_keys, public=public_paths(
                config.public_metrics, config.public_health, config.public_docs),
                       admin_key=config.admin_key, shapes=shapes),
        ],
        exception_handlers=shapes.exception_handlers(),
    )
    app.state.error_shapes = shapes
    app.state.hub = hub
    app.state.supervisor = supervisor
    app.state.served = served
    app.state.config = config
    return app
