"""Call grammars of the XML-parameter families (Qwen3-Coder, GLM-4.5+, MiniMax-M2): each
parameter in the family's tags, a string as bare text, any other value as compact JSON."""

from __future__ import annotations

from typing import Any

from parsers.glm47 import _K_CLOSE, _K_OPEN, _V_CLOSE, _V_OPEN, Glm47ToolParser
from parsers.grammarterms import Lit, properties, value_term
from parsers.minimax import _P_CLOSE as _M_CLOSE
from parsers.minimax import _P_OPEN as _M_OPEN
from parsers.minimax import MiniMaxToolParser
from parsers.qwen3_xml import _P_CLOSE as _Q_CLOSE
from parsers.qwen3_xml import _P_OPEN as _Q_OPEN
from parsers.qwen3_xml import Qwen3XmlToolParser

_CHARS = r"[^<\r\n]"  # a bare-text value: no tag, no line break the format would strip
_EDGE = r"[^<\s]"  # MiniMax strips a value's surrounding whitespace: none at its ends


def xml_families() -> tuple[str, ...]:
    """The tool parser names whose calls carry XML-tagged parameters."""
    return ("qwen3_xml", "qwen3_coder_xml", "glm47", "minimax")


def _param(family: str, key: str, schema: Any) -> tuple[str, str, str]:
    """(text before, value term, text after) of one parameter."""
    if family == "glm47":
        return (f"{_K_OPEN}{key}{_K_CLOSE}\n{_V_OPEN}", value_term(schema, _CHARS),
                f"{_V_CLOSE}\n")
    if family == "minimax":
        return f'{_M_OPEN} name="{key}">', value_term(schema, _CHARS, _EDGE), f"{_M_CLOSE}\n"
    return f"{_Q_OPEN}{key}>\n", value_term(schema, _CHARS), f"\n{_Q_CLOSE}\n"


def _frame(family: str, name: str) -> tuple[str, str]:
    """(text before the parameters, text after) of one call."""
    if family == "glm47":
        return f"{Glm47ToolParser.BLOCK_OPEN[0]}{name}\n", Glm47ToolParser.BLOCK_CLOSE
    if family == "minimax":
        return f'{MiniMaxToolParser.CALL_OPEN} name="{name}">\n', f"{MiniMaxToolParser.CALL_CLOSE}\n"
    q = Qwen3XmlToolParser
    return (f"{q.BLOCK_OPEN[0]}\n{q.CALL_OPEN}{name}>\n", f"{q.CALL_CLOSE}\n{q.BLOCK_CLOSE}")


def xml_call(family: str, name: str, params: dict[str, Any] | None, lit: Lit) -> str:
    """One call of NAME with its declared parameters (required ones always, others optional)."""
    head, tail = _frame(family, name)
    parts = [lit(head)]
    for key, schema, required in properties(params):
        before, value, after = _param(family, key, schema)
        item = f"{lit(before)} {value} {lit(after)}"
        parts.append(item if required else f"({item})?")
    parts.append(lit(tail))
    return " ".join(parts)

