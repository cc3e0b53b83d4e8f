"""Translate an Anthropic Messages request into the chat messages, tools and sampling of a job."""

from __future__ import annotations

from typing import Any

from gateway.anthropic.schemas import (
    AnthropicImageBlock,
    AnthropicTextBlock,
    AnthropicThinkingBlock,
    AnthropicToolResultBlock,
    AnthropicToolUseBlock,
    Block,
    CountTokensRequest,
    MessagesRequest,
)
from gateway.doors.jobs import _pick
from gateway.doors.tool_choice import Mode, ToolPlan, plan_tools
from gateway.edge.errors import bad_request
from gateway.edge.limits import MAX_STOP_CHARS, MAX_STOPS
from gateway.images.intake import ImageParts
from gateway.images.refs import from_anthropic_source
from protocol.messages import SamplingParams


def _image(b: AnthropicImageBlock, param: str, images: ImageParts | None) -> dict[str, Any]:
    """The placeholder of an image block recorded in IMAGES (refused without IMAGES)."""
    if images is None:
        raise bad_request("Image blocks are not allowed here.", param=param)
    return images.add(from_anthropic_source(b.source, param))


def _joined(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text parts as one string; with an image among them, the parts themselves."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _text_of(blocks: str | list[Any] | None, param: str,
             images: ImageParts | None = None) -> str | list[dict[str, Any]]:
    """The text of a string or of a list of text blocks; image blocks recorded in IMAGES."""
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    parts = []
    for j, b in enumerate(blocks):
        if isinstance(b, AnthropicImageBlock):
            parts.append(_image(b, f"{param}[{j}]", images))
        elif not isinstance(b, AnthropicTextBlock):
            raise bad_request("Only text blocks are allowed here.", param=param)
        else:
            parts.append({"type": "text", "text": b.text})
    return _joined(parts)


def _plain(blocks: str | list[Any] | None, param: str) -> str:
    """Text only (system prompts): image blocks are refused there."""
    text = _text_of(blocks, param)
    assert isinstance(text, str)
    return text


def _user(blocks: list[Block], param: str, images: ImageParts | None) -> list[dict[str, Any]]:
    """A user turn: text and image blocks become user messages, tool_result blocks tool
    messages, in order."""
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []

    def flush() -> None:
        if parts:
            out.append({"role": "user", "content": _joined(list(parts))})
            parts.clear()

    for j, b in enumerate(blocks):
        if isinstance(b, AnthropicTextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, AnthropicImageBlock):
            parts.append(_image(b, f"{param}[{j}]", images))
        elif isinstance(b, AnthropicToolResultBlock):
            flush()
            body = _text_of(b.content, f"{param}[{j}].content", images)
            if b.is_error:
                body = f"Error: {body}" if isinstance(body, str) else \
                    [{"type": "text", "text": "Error:"}, *body]
            out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": body})
        else:
            raise bad_request(f"A user message cannot hold a '{type(b).__name__}' block.",
                              param=f"{param}[{j}]")
    flush()
    return out


def _assistant(blocks: list[Block], param: str) -> dict[str, Any]:
    """An assistant turn: text, replayed thinking (as reasoning_content) and tool_use calls."""
    text, thinking, calls = [], [], []
    for j, b in enumerate(blocks):
        if isinstance(b, AnthropicTextBlock):
            text.append(b.text)
        elif isinstance(b, AnthropicThinkingBlock):
            thinking.append(b.thinking)
        elif isinstance(b, AnthropicToolUseBlock):
            calls.append({"id": b.id, "type": "function",
                          "function": {"name": b.name, "arguments": b.input}})
        elif isinstance(b, AnthropicImageBlock | AnthropicToolResultBlock):
            raise bad_request("An assistant message cannot hold image or tool_result blocks.",
                              param=f"{param}[{j}]")
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    return msg


def chat_messages(req: CountTokensRequest,
                  images: ImageParts | None = None) -> list[dict[str, Any]]:
    """The conversation as chat-template messages; every system text folded into one system;
    image blocks of user turns recorded in IMAGES (refused without it)."""
    system = [_plain(req.system, "system")] if req.system else []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(req.messages):
        param = f"messages[{i}].content"
        if m.role == "system":
            system.append(_plain(m.content, param))
        elif isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
        elif m.role == "user":
            out.extend(_user(m.content, param, images))
        else:
            out.append(_assistant(m.content, param))
    return ([{"role": "system", "content": "\n\n".join(system)}] if system else []) + out


_MODES: dict[str, Mode] = {"auto": "auto", "none": "none", "any": "required", "tool": "named"}


def chat_tools(req: CountTokensRequest, tool_parser: str | None) -> ToolPlan:
    """Tools in the chat format, whether calls are parsed, and the forced assistant prefix
    (tool_choice any/tool/none mapped like chat's required/named/none)."""
    choice = req.tool_choice
    for i, t in enumerate(req.tools or []):
        if t.type not in (None, "custom"):
            raise bad_request(f"Tool type '{t.type}' is not supported: only client tools "
                              "(name, description, input_schema).", param=f"tools[{i}].type")
    tools: list[dict[str, Any]] = [{"type": "function", "function": {
        "name": t.name, "description": t.description or "", "parameters": t.input_schema}}
        for t in req.tools or []]
    mode = _MODES[choice.type] if choice is not None else "auto"
    return plan_tools(tools or None, mode, choice.name if choice else None, tool_parser,
                      name_param="tool_choice.name",
                      parallel=not (choice is not None and choice.disable_parallel_tool_use))


def template_kwargs(req: CountTokensRequest) -> dict[str, Any]:
    """thinking enabled turns reasoning on; disabled or absent (Anthropic: no extended thinking
    unless asked) turns it off; adaptive keeps the model's default."""
    if req.thinking is None:
        return {"enable_thinking": False}
    if req.thinking.type == "adaptive":
        return {}
    return {"enable_thinking": req.thinking.type == "enabled"}


def sampling(req: MessagesRequest, defaults: dict[str, Any] | None) -> SamplingParams:
    """The job's sampling parameters (request, then the model's defaults, then Anthropic's)."""
    stop = list(req.stop_sequences or [])
    if len(stop) > MAX_STOPS:
        raise bad_request(f"At most {MAX_STOPS} stop sequences are allowed.",
                          param="stop_sequences")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stop):
        raise bad_request(f"Stop sequences must be non-empty strings of at most {MAX_STOP_CHARS} "
                          "characters.", param="stop_sequences")
    return SamplingParams(
        max_tokens=req.max_tokens,
        temperature=_pick(req.temperature, defaults, "temperature", 1.0),
        top_p=_pick(req.top_p, defaults, "top_p", 1.0),
        top_k=max(_pick(req.top_k, defaults, "top_k", 0), 0),
        min_p=_pick(None, defaults, "min_p", 0.0),
        repetition_penalty=_pick(None, defaults, "repetition_penalty", 1.0),
        presence_penalty=_pick(None, defaults, "presence_penalty", 0.0),
        stop=stop,
    )
