"""A chat request's messages and tools as the chat template gets them (image parts recorded)."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.doors.tool_choice import ToolPlan, plan_tools
from gateway.edge.errors import bad_request
from gateway.edge.jsonguard import JSONLimitError, check_json
from gateway.images.intake import ImageParts
from gateway.images.refs import from_chat_part
from gateway.openai.schemas import ChatCompletionRequest

TEXT_PARTS = ("text", "input_text", "output_text", "refusal")


def _part(part: dict[str, Any], param: str, images: ImageParts) -> dict[str, Any]:
    """A content part as the template gets it: text as is, an image_url part recorded in IMAGES
    and replaced by its placeholder; other parts (input_audio, file, ...) refused."""
    kind = part.get("type")
    if kind == "image_url":
        return images.add(from_chat_part(part, param))
    if kind not in TEXT_PARTS:
        raise bad_request(f"Content part of type '{str(kind)[:40]}' is not supported (text and "
                          "image_url parts are).", param=f"{param}.type",
                          code="unsupported_parameter")
    return part


def chat_messages(req: ChatCompletionRequest, images: ImageParts) -> list[dict[str, Any]]:
    """Messages as plain dicts for the template; tool-call arguments as objects when they parse;
    image_url parts recorded in IMAGES and replaced by placeholders."""
    out = []
    for i, msg in enumerate(req.messages):
        d = msgspec.to_builtins(msg)
        if d.get("role") == "developer":
            d["role"] = "system"
        if isinstance(d.get("content"), list):
            d["content"] = [_part(p, f"messages[{i}].content[{j}]", images)
                            for j, p in enumerate(d["content"])]
        for j, call in enumerate(d.get("tool_calls") or []):
            fn = call.get("function", {})
            raw = (fn.get("arguments") or "{}").encode()
            try:
                check_json(raw)  # JSON inside a string: the body's checks did not see it
                fn["arguments"] = msgspec.json.decode(raw)
            except JSONLimitError as exc:
                raise bad_request(str(exc), param=f"messages[{i}].tool_calls[{j}].function."
                                  "arguments", code=exc.code) from None
            except msgspec.DecodeError:
                pass
        out.append(d)
    return out


def chat_tools(req: ChatCompletionRequest, tool_parser: str | None) -> ToolPlan:
    """The tools to render, whether tool calls are parsed, the forced prefix and grammar."""
    tools = [msgspec.to_builtins(t) for t in req.tools] if req.tools else None
    choice = req.tool_choice
    parallel = req.parallel_tool_calls is not False
    if choice is None or isinstance(choice, str):
        return plan_tools(tools, choice or "auto", None, tool_parser, parallel=parallel)
    return plan_tools(tools, "named", choice.function.name, tool_parser)
