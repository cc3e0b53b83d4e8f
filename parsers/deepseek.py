"""DeepSeek V3 / R1 / V3.1 tool calls with ``<｜tool▁calls▁begin｜>`` markers."""

from __future__ import annotations

from typing import Any, ClassVar

from parsers.jsonutil import loads_strict, strip_code_fence
from parsers.markup import MarkupToolParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def parse_deepseek_call(body: str) -> tuple[str, dict[str, Any]] | None:
    """One call body: V3 ``function<sep>NAME`` + fenced JSON, or V3.1 ``NAME<sep>{...}``."""
    left, sep, right = body.partition(SEP)
    if not sep:
        return None
    left = left.strip()
    if left == "function" and not right.lstrip().startswith("{"):
        name, _, args_text = right.partition("\n")
    else:
        name, args_text = left, right
    name = name.strip()
    if not name or any(c.isspace() for c in name):
        return None
    args_text = strip_code_fence(args_text)
    if not args_text:
        return name, {}
    ok, args = loads_strict(args_text)
    if not ok or not isinstance(args, dict):
        return None
    return name, args


class DeepSeekToolParser(MarkupToolParser):
    """DeepSeek tool calls; a call list without the outer begin marker is accepted too."""

    BLOCK_OPEN: ClassVar[tuple[str, ...]] = (CALLS_BEGIN,)
    BLOCK_CLOSE: ClassVar[str] = CALLS_END
    CALL_OPEN: ClassVar[str | None] = CALL_BEGIN
    CALL_CLOSE: ClassVar[str | None] = CALL_END
    BARE_CALLS: ClassVar[bool] = True

    def parse_deferred(self, body: str) -> list[tuple[str, dict[str, Any]]] | None:
        """The call in one ``<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>`` body."""
        call = parse_deepseek_call(body)
        return [call] if call else None
