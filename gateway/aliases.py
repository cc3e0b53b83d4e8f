"""Model aliases: the built-in table plus a user file, and parser detection for the rest."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any, Literal

import msgspec

from gateway.served import ServedModel
from protocol.process import EMBEDDED_PREFIX

BUILTIN = Path(__file__).resolve().parent / "data" / "aliases.toml"
USER_DEFAULT = Path("~/.config/rapid-mlx/aliases.toml").expanduser()
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


class Sampling(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Recommended sampling defaults of a model."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    repetition_penalty: float | None = None


class AliasEntry(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """One alias: where the model is and how to parse its output."""

    repo: str
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    is_hybrid: bool = False
    is_moe: bool = False
    supports_spec_decode: bool = False
    context_length: int | None = None
    sampling: Sampling = msgspec.field(default_factory=Sampling)
    speculative: Literal["none", "ngram", "draft", "mtp"] | None = None  # overrides the CLI's
    num_draft_tokens: int | None = None
    draft_model: str | None = None  # --speculative draft: a folder, repo id or another alias
    compile_decode: Literal["auto", "on", "off"] | None = None  # overrides --compile-decode
    unavailable: str | None = None  # why `serve ALIAS` is refused (one line)


def _read(path: Path) -> dict[str, dict[str, Any]]:
    try:
        raw = msgspec.toml.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise ValueError(f"cannot read alias file {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"alias file {path} must be a table of aliases")
    return raw


def user_alias_file(explicit: str | None = None) -> Path | None:
    """The user alias file in use: --aliases, then RAPID_MLX_ALIASES, then ~/.config."""
    for candidate in (explicit, os.environ.get("RAPID_MLX_ALIASES")):
        if candidate:
            return Path(candidate).expanduser()
    return USER_DEFAULT if USER_DEFAULT.exists() else None


def load_aliases(user_file: Path | None = None) -> dict[str, AliasEntry]:
    """Built-in aliases overlaid field by field with the user's file."""
    merged = _read(BUILTIN)
    if user_file is not None:
        for alias, fields in _read(user_file).items():
            base = dict(merged.get(alias, {}))
            base.update(fields)
            merged[alias] = base
    try:
        return msgspec.convert(merged, type=dict[str, AliasEntry])
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid alias table: {exc}") from exc


def served_model(model: str, alias: str | None, aliases: dict[str, AliasEntry],
                 tool_parser: str | None, reasoning_parser: str | None) -> ServedModel:
    """What to serve for a MODEL argument: an alias's entry, or a repo id / folder as given."""
    entry = aliases.get(model)
    if entry is None:
        name = alias or model.rstrip("/").rsplit("/", 1)[-1]
        return ServedModel(name, model, tool_call_parser=tool_parser,
                           reasoning_parser=reasoning_parser)
    return ServedModel(
        alias or model, entry.repo, tool_call_parser=tool_parser or entry.tool_call_parser,
        reasoning_parser=reasoning_parser or entry.reasoning_parser, is_hybrid=entry.is_hybrid,
        is_moe=entry.is_moe, supports_spec_decode=entry.supports_spec_decode,
        context_length=entry.context_length, sampling=msgspec.to_builtins(entry.sampling),
        worker_args=spec_args(entry, aliases))


def spec_args(entry: AliasEntry, aliases: dict[str, AliasEntry]) -> list[str]:
    """The worker arguments of an alias's own engine settings (speculation, compiled decode; after the CLI's)."""
    out: list[str] = []
    if entry.speculative is not None:
        out += ["--speculative", entry.speculative]
    if entry.num_draft_tokens is not None:
        out += ["--num-draft-tokens", str(entry.num_draft_tokens)]
    if entry.draft_model:
        named = aliases.get(entry.draft_model)
        out += ["--draft-model", named.repo if named is not None else entry.draft_model]
    if entry.compile_decode is not None:
        out += ["--compile-decode", entry.compile_decode]
    return out


def closest(name: str, aliases: dict[str, AliasEntry], n: int = 3) -> list[str]:
    """The aliases nearest to NAME (a likely typo), best first: those it begins, then difflib's."""
    key = name.lower()
    starts = sorted(a for a in aliases if a.startswith(key))
    near = difflib.get_close_matches(key, sorted(aliases), n=n, cutoff=0.6)
    return list(dict.fromkeys(starts + near))[:n]


def unknown_model(model: str, aliases: dict[str, AliasEntry]) -> str | None:
    """Why `serve MODEL` cannot work (one line), or None for an alias, folder or repo id."""
    entry = aliases.get(model)
    if entry is not None and entry.unavailable:
        return f"cannot serve '{model}': {entry.unavailable}"
    if model in aliases or model.startswith(EMBEDDED_PREFIX) or Path(model).expanduser().is_dir():
        return None
    if _REPO_ID.fullmatch(model):
        return None  # org/name: the worker finds it in the cache or downloads it
    if model.startswith((".", "/", "~")) or "/" in model or "\\" in model:
        return (f"unknown model '{model}': no such folder. Check the path, or pass an alias "
                "(see 'rapid-mlx models').")
    near = closest(model, aliases)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    return (f"unknown model '{model}': not an alias, a local folder or a Hugging Face repo id "
            f"(org/name).{hint} See 'rapid-mlx models'.")


def detect_into(served: ServedModel, chat_template: str | None, special_tokens: list[str],
                model_type: str) -> None:
    """Fill parsers the alias table did not give from the loaded tokenizer and template."""
    if served.parsers_given:
        return
    from parsers.detect import detect_parsers

    tool, reasoning = detect_parsers(chat_template, special_tokens, model_type)
    served.tool_call_parser = served.tool_call_parser or tool
    served.reasoning_parser = served.reasoning_parser or reasoning


def format_table(aliases: dict[str, AliasEntry]) -> str:
    """`rapid-mlx models` output: one alias a line."""
    head = f"{'ALIAS':<34} {'TOOLS':<16} {'REASONING':<12} {'MOE':<4} {'CTX':>7}  REPO"
    lines = [head]
    for name, e in sorted(aliases.items()):
        lines.append(f"{name:<34} {e.tool_call_parser or '-':<16} {e.reasoning_parser or '-':<12} "
                     f"{'yes' if e.is_moe else 'no':<4} {e.context_length or 0:>7}  {e.repo}"
                     + ("  (refused: see `rapid-mlx serve` " + name + ")" if e.unavailable else ""))
    return "\n".join(lines)
