"""Name -> parser registry (the names the gateway and model aliases refer to)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from parsers.base import ReasoningParser, ToolParser
from parsers.deepseek import DeepSeekToolParser
from parsers.glm47 import Glm47ToolParser
from parsers.harmony import HarmonyReasoningParser, HarmonyToolParser
from parsers.hermes import HermesToolParser
from parsers.llama import LlamaToolParser
from parsers.minimax import MiniMaxToolParser
from parsers.qwen3_xml import Qwen3XmlToolParser
from parsers.reasoning import (
    DeepSeekR1ReasoningParser,
    Glm4ReasoningParser,
    MiniMaxReasoningParser,
    Qwen3ReasoningParser,
)
from parsers.ui_tars import UiTarsToolParser

ToolFactory = Callable[[list[dict[str, Any]] | None], ToolParser]

_TOOL_PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesToolParser,
    "qwen3_xml": Qwen3XmlToolParser,
    "qwen3_coder_xml": Qwen3XmlToolParser,
    "glm47": Glm47ToolParser,
    "harmony": HarmonyToolParser,
    "ui_tars": UiTarsToolParser,
    "llama": LlamaToolParser,
    "deepseek": DeepSeekToolParser,
    "minimax": MiniMaxToolParser,
}

_REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "qwen3": Qwen3ReasoningParser,
    "deepseek_r1": DeepSeekR1ReasoningParser,
    "glm4": Glm4ReasoningParser,
    "harmony": HarmonyReasoningParser,
    "minimax": MiniMaxReasoningParser,
}


def tool_parser_names() -> list[str]:
    """Registered tool-call parser names, sorted."""
    return sorted(_TOOL_PARSERS)


def reasoning_parser_names() -> list[str]:
    """Registered reasoning parser names, sorted."""
    return sorted(_REASONING_PARSERS)


def make_tool_parser(name: str, tools: list[dict[str, Any]] | None = None) -> ToolParser:
    """A fresh tool parser; ValueError listing the known names if ``name`` is unknown."""
    cls = _TOOL_PARSERS.get(name)
    if cls is None:
        raise ValueError(f"unknown tool parser {name!r}; known: {', '.join(tool_parser_names())}")
    return cls(tools)


def make_reasoning_parser(
    name: str, *, think_opened: bool = False, tool_blocks: Sequence[tuple[str, str]] = ()
) -> ReasoningParser:
    """A fresh reasoning parser; ValueError listing the known names if ``name`` is unknown."""
    cls = _REASONING_PARSERS.get(name)
    if cls is None:
        raise ValueError(
            f"unknown reasoning parser {name!r}; known: {', '.join(reasoning_parser_names())}"
        )
    return cls(think_opened=think_opened, tool_blocks=tool_blocks)
