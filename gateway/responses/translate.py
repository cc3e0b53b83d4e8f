"""Translate a Responses request into the chat job's messages, tools and template options."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.doors.structured import grammar_for
from gateway.doors.tool_choice import ToolPlan, plan_tools
from gateway.edge.errors import bad_request
from gateway.edge.jsonguard import JSONLimitError, check_json
from gateway.images.intake import ImageParts
from gateway.images.refs import from_input_image, shown
from gateway.responses.schemas import ContentPart, CreateResponse, InputItem
from gateway.responses.tooltypes import served_tools
from protocol.messages import GrammarSpec

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_PARTS = {"input_text", "output_text", "text", "reasoning_text", "summary_text"}


def _text(parts: str | list[ContentPart] | None, param: str,
          images: ImageParts | None = None) -> str | list[dict[str, Any]]:
    """Text of a string or of a list of text parts; with IMAGES, input_image parts are
    recorded there and the content becomes a list of text and image placeholder parts (other
    part types are refused)."""
    if parts is None or isinstance(parts, str):
        return parts or ""
    out: list[dict[str, Any]] = []
    for j, p in enumerate(parts):
        if p.type == "refusal":
            continue
        if p.type == "input_image" and images is not None:
            out.append(images.add(from_input_image(p, f"{param}[{j}]")))
            continue
        if p.type not in TEXT_PARTS or p.text is None:
            raise bad_request(f"Content part of type '{shown(p.type)}' is not supported here "
                              "(only text parts are).", param=f"{param}[{j}]",
                              code="unsupported_parameter")
        out.append({"type": "text", "text": p.text})
    if all(p["type"] == "text" for p in out):
        return "\n".join(p["text"] for p in out)
    return out


def _plain(parts: str | list[ContentPart] | None, param: str) -> str:
    """Text only (tool outputs, reasoning): image parts are refused there."""
    text = _text(parts, param)
    assert isinstance(text, str)
    return text


def _arguments(raw: str, param: str) -> Any:
    """Call arguments as an object for the template when they parse (as chat does)."""
    try:
        check_json(raw.encode())
        return msgspec.json.decode(raw or "{}")
    except JSONLimitError as exc:
        raise bad_request(str(exc), param=param, code=exc.code) from None
    except msgspec.DecodeError:
        return raw


def to_messages(req: CreateResponse, images: ImageParts | None = None) -> list[dict[str, Any]]:
    """The request's instructions and input items as chat-template messages (input_image parts
    of messages recorded in IMAGES, refused without it)."""
    msgs: list[dict[str, Any]] = []
    if req.instructions:
        msgs.append({"role": "system", "content": req.instructions})
    items = [InputItem(role="user", content=req.input)] if isinstance(req.input, str) \
        else req.input
    if not items:
        raise bad_request("input must hold at least one item.", param="input")
    names: dict[str, str] = {}  # call_id -> function name, for tool messages
    reasoning = ""
    for i, it in enumerate(items):
        where = f"input[{i}]"
        kind = it.type or "message"
        if kind == "message":
            role = ROLES.get(it.role or "")
            if role is None:
                raise bad_request(f"Message role '{it.role}' is not supported (use user, "
                                  "assistant, system or developer).", param=f"{where}.role")
            msg: dict[str, Any] = {"role": role,
                                   "content": _text(it.content, f"{where}.content", images)}
            if role == "assistant" and reasoning:
                msg["reasoning_content"], reasoning = reasoning, ""
            msgs.append(msg)
        elif kind == "function_call":
            if not it.call_id or not it.name or it.arguments is None:
                raise bad_request("A function_call item needs call_id, name and arguments.",
                                  param=where)
            names[it.call_id] = it.name
            call = {"id": it.call_id, "type": "function", "function": {
                "name": it.name, "arguments": _arguments(it.arguments, f"{where}.arguments")}}
            last = msgs[-1] if msgs else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": ""}
                if reasoning:
                    last["reasoning_content"], reasoning = reasoning, ""
                msgs.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            if not it.call_id or it.output is None:
                raise bad_request("A function_call_output item needs call_id and output.",
                                  param=where)
            tool: dict[str, Any] = {"role": "tool", "tool_call_id": it.call_id,
                                    "content": _plain(it.output, f"{where}.output")}
            if it.call_id in names:
                tool["name"] = names[it.call_id]
            msgs.append(tool)
        elif kind == "reasoning":
            reasoning += _plain(it.content, f"{where}.content")
        else:
            raise bad_request(f"Input item of type '{kind}' is not supported.",
                              param=f"{where}.type", code="unsupported_parameter")
    return msgs


def to_tools(req: CreateResponse, tool_parser: str | None) -> ToolPlan:
    """Chat-format tools to render, whether tool calls are parsed, and the forced prefix."""
    tools, _ = served_tools(req.tools or [])
    choice = req.tool_choice
    if choice is None or isinstance(choice, str):
        return plan_tools(tools or None, choice or "auto", None, tool_parser,
                          parallel=req.parallel_tool_calls is not False)
    if choice.type != "function" or not choice.name:
        raise bad_request("tool_choice must be none, auto, required or {\"type\": \"function\", "
                          "\"name\": ...}.", param="tool_choice")
    return plan_tools(tools or None, "named", choice.name, tool_parser)


def template_kwargs(req: CreateResponse) -> dict[str, Any]:
    """chat_template_kwargs: the request's own, plus reasoning.effort (none/minimal turn
    thinking off; low/medium/high/xhigh are passed as reasoning_effort)."""
    kwargs = dict(req.chat_template_kwargs or {})
    effort = req.reasoning.effort if req.reasoning else None
    if effort in ("none", "minimal"):
        kwargs.setdefault("enable_thinking", False)
    elif effort is not None:
        kwargs.setdefault("reasoning_effort", effort)
    return kwargs


def to_grammar(req: CreateResponse) -> GrammarSpec | None:
    """The job's grammar for text.format (json_schema carries name/schema/strict flat)."""
    fmt = req.text.format if req.text else None
    if fmt is None:
        return None
    spec = {"name": fmt.name, "schema": fmt.schema} if fmt.type == "json_schema" else None
    return grammar_for(fmt.type, spec, param="text.format")
