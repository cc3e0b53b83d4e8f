"""The OpenAPI 3 document, generated from the msgspec schemas the endpoints validate with."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from gateway.anthropic import reply as ar
from gateway.anthropic import schemas as a
from gateway.anthropic.errors import is_messages_path
from gateway.anthropic.event_schemas import MESSAGE_EVENTS
from gateway.audio import speech_schemas as sp
from gateway.audio import transcription_schemas as tr
from gateway.edge.middleware import MULTIPART_PATHS
from gateway.openai import embedding_schemas as e
from gateway.openai import schemas as s
from gateway.openai.stream_schemas import CHAT_EVENTS, COMPLETION_EVENTS
from gateway.ops import schemas as o
from gateway.ops.admin import DrainRequest, SwapRequest
from gateway.responses import objects as ro
from gateway.responses import schemas as rs
from gateway.responses.event_schemas import RESPONSE_EVENTS

# path, method, summary, request body type, response type, streams
ROUTES: list[tuple[str, str, str, type | None, type | None, bool]] = [
    ("/v1/models", "get", "List the served models", None, s.ModelList, False),
    ("/v1/models/{model}", "get", "One served model", None, s.ModelCard, False),
    ("/v1/chat/completions", "post", "Create a chat completion", s.ChatCompletionRequest,
     s.ChatCompletion, True),
    ("/v1/completions", "post", "Create a text completion", s.CompletionRequest, s.Completion,
     True),
    ("/v1/embeddings", "post", "Create embeddings (needs an embedding model; `truncate` is our "
     "extension: cut over-long inputs instead of a 400)", e.EmbeddingRequest, e.EmbeddingList,
     False),
    ("/v1/responses", "post", "Create a model response (OpenAI Responses API; stored unless "
     "`store` is false or the server runs with --no-store)", rs.CreateResponse,
     ro.ResponseObject, True),
    ("/v1/responses/{response_id}", "get", "Retrieve a stored response", None, ro.ResponseObject,
     False),
    ("/v1/responses/{response_id}", "delete", "Delete a stored response", None,
     ro.DeletedResponse, False),
    ("/v1/responses/{response_id}/input_items", "get", "List a stored response's input items",
     None, ro.ResponseItemList, False),
    ("/v1/messages", "post", "Create a message (Anthropic Messages API)", a.MessagesRequest,
     ar.AnthropicMessage, True),
    ("/v1/messages/count_tokens", "post", "Count a message's input tokens (Anthropic API)",
     a.CountTokensRequest, ar.AnthropicTokenCount, False),
    ("/v1/audio/speech", "post", "Create speech from text: the audio file (`stream_format` "
     "`audio`: the same bytes chunked as they are made; `sse`: base64 `speech.audio.delta` "
     "events, then `speech.audio.done`)", sp.SpeechRequest, None, True),
    ("/v1/audio/transcriptions", "post", "Transcribe audio (multipart/form-data: the file and "
     "the fields; needs a speech-to-text model)", tr.TranscriptionForm, tr.Transcription, True),
    ("/v1/audio/translations", "post", "Translate speech in any language into English text "
     "(multipart/form-data, as transcriptions without `language`)", tr.TranscriptionForm,
     tr.Transcription, True),
    ("/v1/audio/voices", "get", "The voices of every ready text-to-speech model", None,
     sp.SpeechVoiceList, False),
    ("/v1/health", "get", "Health of the gateway and of each model worker", None,
     o.HealthReport, False),
    ("/v1/health/{alias}", "get", "Health of one alias", None, o.OneAliasHealth, False),
    ("/v1/workers", "get", "Status of every worker process", None, o.WorkerList, False),
    ("/v1/workers/{alias}", "get", "Status of one alias's worker", None, o.WorkerInfo, False),
    ("/livez", "get", "Liveness probe (process up)", None, o.Liveness, False),
    ("/readyz", "get", "Readiness probe (503 until every alias is ready, and while draining)",
     None, o.Readiness, False),
    ("/metrics", "get", "Prometheus metrics", None, None, False),
    ("/admin/swap/{alias}", "post", "Hot-swap one alias's worker (needs --admin-key)",
     SwapRequest, o.SwapResult, False),
    ("/admin/drain/{alias}/{boot_id}", "post", "Drain one replica of an alias (boot id or name "
     "such as r1; needs --admin-key): no new work, running requests finish, then it stops",
     DrainRequest, o.DrainResult, False),
]

# the events each streaming route sends with `stream: true` (a streaming route not listed here
# is documented as a plain text/event-stream)
STREAM_EVENTS: dict[str, tuple[type, ...]] = {
    "/v1/chat/completions": CHAT_EVENTS, "/v1/completions": COMPLETION_EVENTS,
    "/v1/responses": RESPONSE_EVENTS, "/v1/messages": MESSAGE_EVENTS,
    "/v1/audio/speech": sp.SPEECH_EVENTS, "/v1/audio/transcriptions": tr.TRANSCRIPT_EVENTS,
    "/v1/audio/translations": tr.TRANSCRIPT_EVENTS}
# routes whose 200 is a file: path -> its content types
BINARY_ANSWERS = {"/v1/audio/speech": ("audio/mpeg", "audio/wav", "audio/flac", "audio/ogg",
                                       "audio/aac", "audio/pcm")}
# routes whose body is multipart/form-data (the struct documents the fields; its bytes are files)
FORM_BODIES = MULTIPART_PATHS
# other JSON answers a route gives (picked by a request field) and its plain-text answers
ALSO_JSON = {p: (tr.TranscriptionVerbose,) for p in FORM_BODIES}
TEXT_ANSWERS = {p: ("text/plain", "application/x-subrip", "text/vtt") for p in FORM_BODIES}
_DATA_ONLY = ("Server-sent events (`stream: true`): each `data:` line is one of these JSON "
              "objects; the stream ends with `data: [DONE]`.")
_TYPED = ("Server-sent events (`stream: true`): each `data:` line is one of these JSON objects, "
          "named by its `type`; the stream ends after the last one.")
_NAMED = ("Server-sent events (`stream: true`; `stream_format: \"sse\"` on /v1/audio/speech): "
          "each event is an `event: TYPE` line and a `data:` line with one of these JSON "
          "objects, whose `type` is TYPE.")

# status -> (description, the methods it applies to; None: every method)
ERROR_STATUSES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "400": ("Invalid request: the message (and `param`) name the field", None),
    "401": ("Missing or wrong API key", None),
    "403": ("Cross-origin request refused (see --cors-allow-origins)", ("post", "delete")),
    "404": ("Unknown model (or stored response)", None),
    "413": ("The body is larger than the limit", ("post",)),
    "415": ("The body is not `application/json` (or, on the audio uploads, "
            "`multipart/form-data`), or it is compressed (`Content-Encoding`)", ("post",)),
    "503": ("Model not ready or busy (see Retry-After)", None)}


# answers other than 200 whose body is not an error: path -> {status: (description, type)}
OTHER_ANSWERS: dict[str, dict[str, tuple[str, type]]] = {
    "/v1/health": {"503": ("No alias serves, or the gateway is draining", o.HealthReport)},
    "/v1/health/{alias}": {"503": ("The alias does not serve now", o.OneAliasHealth)},
    "/livez": {"503": ("The gateway no longer hears its workers", o.Liveness)},
    "/readyz": {"503": ("Not every alias has been ready yet, or draining", o.Readiness)},
    "/admin/swap/{alias}": {"202": ("Swap started; the new worker is not serving yet",
                                    o.SwapResult)},
}
OPTIONAL_BODIES = {"/admin/swap/{alias}", "/admin/drain/{alias}/{boot_id}"}  # an empty body takes every default

QUERY = {"/v1/responses/{response_id}/input_items": [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100,
                                                "default": 20}},
    {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"],
                                                "default": "desc"}},
    {"name": "after", "in": "query", "schema": {"type": "string"},
     "description": "An item id: list the items after it (in `order`)"}]}


def _ref(t: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{t.__name__}"}


def _tag(t: type) -> str | None:
    config = getattr(t, "__struct_config__", None)
    return config.tag if config is not None and isinstance(config.tag, str) else None


def event_stream_schema(path: str) -> dict[str, Any]:
    """The text/event-stream content of PATH: a oneOf of its event structs."""
    events = STREAM_EVENTS.get(path)
    if not events:
        return {"schema": {"type": "string"}}
    schema: dict[str, Any] = {"oneOf": [_ref(t) for t in events]}
    tags = {t: _tag(t) for t in events}
    if all(tags.values()):
        schema["discriminator"] = {"propertyName": "type", "mapping": {
            tag: _ref(t)["$ref"] for t, tag in tags.items() if tag}}
    if path in FORM_BODIES:
        schema["description"] = _TYPED
    else:
        schema["description"] = _NAMED if any(tags.values()) else _DATA_ONLY
    return {"schema": schema}


def error_responses(path: str, method: str) -> dict[str, Any]:
    """The 4xx/503 responses of one operation, in its protocol's error shape (or the route's own
    body where OTHER_ANSWERS names one)."""
    error = ar.AnthropicError if is_messages_path(path) else s.ErrorResponse
    out: dict[str, tuple[str, type]] = {code: (text, error) for code, (text, methods) in ERROR_STATUSES.items()
           if methods is None or method in methods}
    out.update(OTHER_ANSWERS.get(path, {}))
    return {code: {"description": text, "content": {"application/json": {"schema": _ref(t)}}}
            for code, (text, t) in sorted(out.items())}


def _files_as_binary(components: dict[str, Any], forms: set[type | None]) -> None:
    """Document the bytes fields of the multipart FORMS as file uploads."""
    for form in forms:
        if form is None:
            continue
        for prop in components[form.__name__]["properties"].values():
            if prop.get("contentEncoding") == "base64":
                del prop["contentEncoding"]
                prop["format"] = "binary"


def build_openapi(version: str) -> dict[str, Any]:
    """Return the OpenAPI document of the HTTP API."""
    types = [t for r in ROUTES for t in (r[3], r[4]) if t is not None] + [s.ErrorResponse,
                                                                          ar.AnthropicError]
    types += [t for events in STREAM_EVENTS.values() for t in events]
    types += [t for answers in OTHER_ANSWERS.values() for _, t in answers.values()]
    types += [t for also in ALSO_JSON.values() for t in also]
    _, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    _files_as_binary(components, {r[3] for r in ROUTES if r[0] in FORM_BODIES})
    paths: dict[str, Any] = {}
    for path, method, summary, body, resp, streams in ROUTES:
        schema: dict[str, Any] = _ref(resp) if resp else {"type": "object"}
        if path in ALSO_JSON and resp is not None:
            schema = {"oneOf": [schema, *map(_ref, ALSO_JSON[path])]}
        content: dict[str, Any] = {"application/json": {"schema": schema}}
        content.update({t: {"schema": {"type": "string"}} for t in TEXT_ANSWERS.get(path, ())})
        if streams:
            content["text/event-stream"] = event_stream_schema(path)
        if path == "/metrics":
            content = {"text/plain": {"schema": {"type": "string"}}}
        if path in BINARY_ANSWERS:
            content = {t: {"schema": {"type": "string", "format": "binary"}}
                       for t in BINARY_ANSWERS[path]} | (
                {"text/event-stream": event_stream_schema(path)} if streams else {})
        op: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method}_{path.strip('/').replace('/', '_')}",
            "responses": {"200": {"description": "OK", "content": content},
                          **error_responses(path, method)},
        }
        if body is not None:
            media = "multipart/form-data" if path in FORM_BODIES else "application/json"
            op["requestBody"] = {"required": path not in OPTIONAL_BODIES, "content": {
                media: {"schema": _ref(body)}}}
        params = re.findall(r"{(\w+)}", path)
        if params or path in QUERY:
            op["parameters"] = [*({"name": name, "in": "path", "required": True,
                                   "schema": {"type": "string"}} for name in params),
                                *QUERY.get(path, [])]
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "rapid-mlx", "version": version,
                 "description": "OpenAI-compatible inference server on MLX."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
