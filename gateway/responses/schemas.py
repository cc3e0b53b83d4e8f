"""Responses API request and response bodies as msgspec structs (validation and OpenAPI)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from gateway.openai.schemas import MaxTokens, Temperature, TopP, User, _Body

# OpenAI's bounds: 16 pairs, keys of at most 64 characters, values of at most 512. The map is
# stored with the response: unbounded, one client could store 8 MiB of it per response.
Metadata = Annotated[dict[Annotated[str, Meta(max_length=64)], Annotated[str, Meta(max_length=512)]],
                     Meta(max_length=16)]


class ContentPart(_Body):
    """A content part of an input message (`input_text`, `output_text`, `input_image`, ...)."""

    type: str
    text: str | None = None
    image_url: str | None = None  # input_image: a data: URL (or http(s) where allowed)
    file_id: str | None = None  # input_image: refused (no Files API)
    detail: str | None = None  # input_image: auto, low or high


class InputItem(_Body):
    """One input item: a message (typed or not), a function_call, a function_call_output or a
    reasoning item. Which fields apply depends on `type`; translate.py checks them."""

    type: str | None = None
    role: str | None = None
    content: str | list[ContentPart] | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None
    summary: list[ContentPart] | None = None
    status: str | None = None


class FunctionTool(_Body):
    """A tool of a Responses request: `function` and `namespace` (a named group of function
    tools) are served; see tooltypes.py for the others."""

    type: str
    name: Annotated[str, Meta(min_length=1, max_length=64,
                              pattern=r"^[a-zA-Z0-9_.\-]+$")] | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[FunctionTool] | None = None  # a namespace's tools


class ToolChoiceNamed(_Body):
    """tool_choice forcing one function: {"type": "function", "name": ...}."""

    type: str
    name: str | None = None


class ReasoningParam(_Body):
    """reasoning: effort (none/minimal disable thinking; others go to the template)."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: str | None = None


class TextFormat(_Body):
    """text.format: text, json_object, or json_schema (name, schema, strict, description)."""

    type: str = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


class TextParam(_Body):
    """text: the output format."""

    format: TextFormat | None = None
    verbosity: str | None = None


class CreateResponse(_Body):
    """POST /v1/responses."""

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceNamed | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: Metadata | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    user: User | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # extension, as on chat completions
    ignore_eos: bool = False  # extension, as on chat completions
