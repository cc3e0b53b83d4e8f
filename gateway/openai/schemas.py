"""OpenAI request and response bodies as msgspec structs: validation and OpenAPI from one source."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gateway.edge.limits import INT64_MAX, INT64_MIN, LOGIT_BIAS_MAX, MAX_LOGIT_BIAS

Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
MaxTokens = Annotated[int, Meta(ge=1)]
N = Annotated[int, Meta(ge=1, le=16)]
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
Seed = Annotated[int, Meta(ge=INT64_MIN, le=INT64_MAX)]
USER_CHARS = 256  # `user`: an end-user id (a hash, an email: RFC 5321 caps those at 254)
User = Annotated[str, Meta(max_length=USER_CHARS)]
TokenId = Annotated[int, Meta(ge=0)]  # the upper bound, the vocabulary size, is the model's
TokenIds = Annotated[list[TokenId], Meta(min_length=1)]
# str, list[str], list[int] or list[list[int]]: msgspec unions allow one array type, so the
# items are a union and the gateway checks that a list is all of one kind (jobs.py)
Prompt = str | Annotated[list[str | TokenId | TokenIds], Meta(min_length=1)]
LogitBias = Annotated[
    dict[Annotated[str, Meta(pattern=r"^[0-9]{1,10}$")],  # a token id, as a string
         Annotated[float, Meta(ge=-LOGIT_BIAS_MAX, le=LOGIT_BIAS_MAX)]],
    Meta(max_length=MAX_LOGIT_BIAS)]


class _Body(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of request bodies: unknown fields are ignored, as OpenAI does."""


class StreamOptions(_Body):
    """Options for streamed responses."""

    include_usage: bool = False


class FunctionDef(_Body):
    """A function the model may call."""

    name: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_.\-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    """A tool offered to the model."""

    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Body):
    """The name of the function a named tool_choice forces."""

    name: str


class ToolChoiceFunction(_Body):
    """tool_choice forcing one function."""

    type: Literal["function"]
    function: NamedFunction


class FunctionCall(_Body):
    """A function call made by the assistant."""

    name: str
    arguments: str


class ToolCall(_Body):
    """A tool call in an assistant message."""

    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class ResponseFormat(_Body):
    """response_format: text, json_object, or json_schema ({"name", "schema", "strict"})."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatMessage(_Body):
    """One message of a chat conversation."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class ChatCompletionRequest(_Body):
    """POST /v1/chat/completions."""

    model: str
    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Meta(ge=-1)] | None = None
    min_p: TopP | None = None
    n: N = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Meta(gt=0.0, le=10.0)] | None = None
    logprobs: bool = False
    top_logprobs: TopLogprobs | None = None
    seed: Seed | None = None
    ignore_eos: bool = False
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    response_format: ResponseFormat | None = None
    logit_bias: LogitBias | None = None
    user: User | None = None


class CompletionRequest(_Body):
    """POST /v1/completions."""

    model: str
    prompt: Prompt
    max_tokens: MaxTokens | None = 16
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Meta(ge=-1)] | None = None
    min_p: TopP | None = None
    n: N = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Meta(gt=0.0, le=10.0)] | None = None
    logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    echo: bool = False
    seed: Seed | None = None
    ignore_eos: bool = False
    logit_bias: LogitBias | None = None
    response_format: ResponseFormat | None = None  # an extension: structured output
    suffix: str | None = None
    best_of: N | None = None  # only best_of == n, which is what n alone does (checked at the door)
    user: User | None = None


# ---- responses ---------------------------------------------------------------------------


class PromptTokensDetails(msgspec.Struct):
    """Prompt token breakdown."""

    cached_tokens: int = 0


class Usage(msgspec.Struct):
    """Token accounting of a response."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = msgspec.field(default_factory=PromptTokensDetails)


class ResponseMessage(msgspec.Struct, kw_only=True):
    """The assistant message of a chat choice."""

    content: str | None
    refusal: str | None  # always null: the models served here do not refuse through the API
    role: str = "assistant"
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None


class TopLogprob(msgspec.Struct):
    """An alternative token and its log-probability."""

    token: str
    logprob: float
    bytes: list[int] | None = None


class LogprobEntry(msgspec.Struct):
    """A sampled token's log-probability and alternatives."""

    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(msgspec.Struct):
    """Log-probabilities of a choice's content."""

    content: list[LogprobEntry]


class ChatChoice(msgspec.Struct):
    """One choice of a chat completion."""

    index: int
    message: ResponseMessage
    finish_reason: str | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletion(msgspec.Struct):
    """Response of POST /v1/chat/completions."""

    id: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    object: str = "chat.completion"  # no system_fingerprint: optional, and never null


class CompletionChoice(msgspec.Struct):
    """One choice of a text completion."""

    index: int
    text: str
    finish_reason: str | None
    logprobs: dict[str, Any] | None = None


class Completion(msgspec.Struct):
    """Response of POST /v1/completions."""

    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    object: str = "text_completion"


class ModelCard(msgspec.Struct):
    """An entry of GET /v1/models."""

    id: str
    created: int
    owned_by: str = "rapid-mlx"
    object: str = "model"
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    is_hybrid: bool = False
    is_moe: bool = False
    supports_spec_decode: bool = False
    context_length: int | None = None
    state: str | None = None
    model: str | None = None  # what the alias serves: a path or a hub repo
    revision: str | None = None
    boot_id: str | None = None  # of the alias's current worker
    kind: str | None = None  # generate, embed, transcribe or speech (None until its worker is up)
    capabilities: list[str] = []  # the endpoints it serves, then what its worker can do
    dimensions: int | None = None  # an embedding model's vector size
    voices: list[str] | None = None  # a speech model's voices (the first is the default)
    sample_rate: int | None = None  # a speech model's output rate (Hz)


class ModelList(msgspec.Struct):
    """Response of GET /v1/models."""

    data: list[ModelCard]
    object: str = "list"


class ErrorDetail(msgspec.Struct):
    """The body of an error."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(msgspec.Struct):
    """Every error the API returns."""

    error: ErrorDetail
