"""Guessing the parser names for a model from its chat template, vocabulary and config."""

from __future__ import annotations

from collections.abc import Iterable

_INTERESTING = frozenset(
    {
        "<|channel|>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<minimax:tool_call>",
        "<arg_key>",
        "<tool_call>",
        "<function=",
        "<|python_tag|>",
        "<|python_start|>",
        "<think>",
    }
)


def _present(chat_template: str | None, vocab: Iterable[str] | None) -> set[str]:
    found = {tok for tok in _INTERESTING if chat_template and tok in chat_template}
    if vocab is not None:
        found |= _INTERESTING.intersection(vocab)
    return found


def _by_model_type(model_type: str) -> str | None:
    mt = model_type.lower()
    if mt == "gpt_oss":
        return "harmony"
    if mt.startswith("deepseek_v3") or mt == "deepseek_v32":
        return "deepseek"
    if mt.startswith("minimax"):
        return "minimax"
    if mt.startswith("glm4_moe"):
        return "glm47"
    if mt.startswith(("qwen2", "qwen3")):
        return "hermes"
    if mt in ("llama", "llama4", "mllama"):
        return "llama"
    return None


def detect_parsers(
    chat_template: str | None,
    vocab: Iterable[str] | None,
    model_type: str | None = None,
) -> tuple[str | None, str | None]:
    """``(tool_call_parser, reasoning_parser)`` guessed for a model; None where unknown.

    Evidence from the chat template and special tokens wins over the config ``model_type``.
    """
    found = _present(chat_template, vocab)
    template = chat_template or ""
    think = "<think>" in found
    tool: str | None
    if "<|channel|>" in found:
        return "harmony", "harmony"
    if "<｜tool▁calls▁begin｜>" in found or "<｜tool▁call▁begin｜>" in found:
        tool = "deepseek"
    elif "<minimax:tool_call>" in found:
        tool = "minimax"
    elif "<arg_key>" in found:
        tool = "glm47"
    elif "<function=" in template and "<parameter=" in template:
        tool = "qwen3_coder_xml"
    elif "<tool_call>" in found:
        tool = "hermes"
    elif "<|python_tag|>" in found or "<|python_start|>" in found:
        tool = "llama"
    else:
        tool = _by_model_type(model_type or "")
    if tool == "harmony":
        return "harmony", "harmony"
    reasoning: str | None = None
    if think or tool in ("minimax", "glm47"):  # these families always think
        reasoning = {"deepseek": "deepseek_r1", "minimax": "minimax", "glm47": "glm4"}.get(
            tool or "", "qwen3"
        )
        if tool is None and "<｜Assistant｜>" in template:
            reasoning = "deepseek_r1"
    return tool, reasoning


def prompt_opens_think(prompt: str, open_tag: str = "<think>") -> bool:
    """True when a rendered prompt ends inside an opened reasoning block."""
    return prompt.rstrip().endswith(open_tag)
