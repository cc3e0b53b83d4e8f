"""Text that forces a tool call in each family's syntax (for tool_choice required / named)."""

from __future__ import annotations

# family -> (prefix for "any tool", prefix for a named tool with {name})
_PREFIXES: dict[str, tuple[str, str]] = {
    # no trailing space: the model's own next token (' {"') carries it, as in its training text
    "hermes": ("<tool_call>\n", '<tool_call>\n{{"name": "{name}", "arguments":'),
    "qwen3_xml": ("<tool_call>\n<function=", "<tool_call>\n<function={name}>\n"),
    "qwen3_coder_xml": ("<tool_call>\n<function=", "<tool_call>\n<function={name}>\n"),
    "glm47": ("<tool_call>", "<tool_call>{name}\n"),
    "minimax": ('<minimax:tool_call>\n<invoke name="', '<minimax:tool_call>\n<invoke name="{name}">\n'),
}


def forced_prefix(tool_parser: str | None, function: str | None) -> str:
    """The assistant-turn prefix that commits the model to a tool call, or "" when the family
    has no such prefix (the call is then requested but not forced)."""
    if tool_parser is None or tool_parser not in _PREFIXES:
        return ""
    any_tool, named = _PREFIXES[tool_parser]
    return named.format(name=function) if function else any_tool
