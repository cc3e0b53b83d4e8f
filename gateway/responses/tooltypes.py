"""Which Responses tool types are served: function tools, namespaces of them, and the rest.

Served: `function` tools, and `namespace` tools (a group of function tools; the model sees the
functions, and a call to one comes back as a `function_call` carrying the `namespace`).

Not served but known: the tools OpenAI runs on its side (web_search, file_search, ...) and the
client-side tool types a model must be trained for (local_shell, custom, ...). Coding agents
(Codex CLI) offer some of them on every request, so an offered one is left out of the prompt
with a logged warning (the model simply never calls it, which any response may do); one that
tool_choice forces is refused with a 400. An unknown type is refused with a 400 too, inside a
namespace as at the top.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from gateway.edge.errors import bad_request
from gateway.responses.schemas import FunctionTool

log = logging.getLogger("rapid_mlx.gateway")

NOT_SERVED = frozenset({
    "web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
    "file_search", "code_interpreter", "image_generation", "computer", "computer_use",
    "computer_use_preview", "mcp", "local_shell", "shell", "apply_patch", "custom",
    "tool_search"})


def _function(t: FunctionTool, param: str) -> dict[str, Any]:
    if not t.name:
        raise bad_request("A function tool needs a name.", param=f"{param}.name")
    fn: dict[str, Any] = {"name": t.name, "description": t.description,
                          "parameters": t.parameters, "strict": t.strict}
    return {"type": "function", "function": {k: v for k, v in fn.items() if v is not None}}


def _left_out(kind: str, param: str) -> None:
    """Refuse (400) a tool type that is neither served nor known as one to leave out."""
    if kind not in NOT_SERVED:
        raise bad_request(f"Tool type {kind[:64]!r} is not supported: only function and "
                          "namespace tools are served.", param=param, code="unsupported_parameter")


def served_tools(tools: list[FunctionTool], quiet: bool = False
                 ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Chat-format function tools to render, and function name -> namespace for the calls
    (QUIET: no log line for the tool types left out, when the request's was logged already)."""
    out: list[dict[str, Any]] = []
    namespaces: dict[str, str] = {}
    skipped: Counter[str] = Counter()  # of NOT_SERVED names only: a short log line, client text-free
    for i, t in enumerate(tools):
        if t.type == "function":
            out.append(_function(t, f"tools[{i}]"))
        elif t.type == "namespace":
            if not t.name:
                raise bad_request("A namespace tool needs a name.", param=f"tools[{i}].name")
            for j, inner in enumerate(t.tools or []):
                if inner.type != "function":
                    _left_out(inner.type, f"tools[{i}].tools[{j}].type")
                    skipped[inner.type] += 1
                    continue
                out.append(_function(inner, f"tools[{i}].tools[{j}]"))
                namespaces[inner.name or ""] = t.name
        else:
            _left_out(t.type, f"tools[{i}].type")
            skipped[t.type] += 1
    seen: set[str] = set()  # a set: a body may hold 100k tools (a list was quadratic)
    for rendered in out:
        name = rendered["function"]["name"]
        if name in seen:
            raise bad_request(f"Two tools are named '{name}'.", param="tools")
        seen.add(name)
    if skipped and not quiet:
        log.warning("responses: tool types not served here left out of the prompt: %s",
                    ", ".join(k if n == 1 else f"{k} (x{n})" for k, n in skipped.items()))
    return out, namespaces
