"""POST /v1/embeddings request and response bodies (msgspec: validation and OpenAPI)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gateway.openai.schemas import TokenId, TokenIds

MAX_INPUTS = 2048  # inputs per request (OpenAI's limit)

# a string, strings, token ids or lists of token ids (one kind per request, at most MAX_INPUTS
# inputs: checked by the endpoint, since one token-id input may be longer than that)
EmbeddingInput = str | Annotated[list[str | TokenId | TokenIds], Meta(min_length=1)]


class EmbeddingRequest(msgspec.Struct, kw_only=True, omit_defaults=True):
    """POST /v1/embeddings (unknown fields are ignored, as OpenAI does)."""

    model: str
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Meta(ge=1)] | None = None
    user: str | None = None
    # an extension: cut inputs longer than the model's maximum to that many tokens instead of
    # refusing them with a 400 (sentence-transformers cuts silently; we only do when asked)
    truncate: bool = False


class Embedding(msgspec.Struct):
    """One input's vector: floats, or base64 of little-endian float32 bytes."""

    index: int
    embedding: list[float] | str
    object: str = "embedding"


class EmbeddingUsage(msgspec.Struct):
    """Tokens of the inputs (embeddings have no completion tokens)."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(msgspec.Struct):
    """The response: one Embedding per input, in input order."""

    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
    object: str = "list"
