"""The configuration that points each coding agent at a rapid-mlx server (pure: no I/O).

Every builder returns a `ClientConfig`: the file the client reads, a function merging our keys
into that file's current text (unrelated keys and tables are kept), the environment the client
needs, and a note for the user.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import yaml

PROVIDER = "rapid-mlx"
KEY_ENV = "RAPID_MLX_API_KEY"
CLAUDE_ALIASES = {"default", "best", "sonnet", "opus", "haiku", "opusplan"}


@dataclass
class Target:
    """The server and model a client is pointed at."""

    base: str  # http://host:port, no /v1
    alias: str
    context_length: int
    api_key: str

    @property
    def v1(self) -> str:
        """The OpenAI-style base URL."""
        return self.base.rstrip("/") + "/v1"


    @property
    def output_limit(self) -> int:
        """The output tokens a client is told it may ask for: a quarter of the context, at most
        32000 (the server clamps any request to what the context has left anyway)."""
        return max(1, min(32000, self.context_length // 4))


@dataclass
class ClientConfig:
    """What `launch` prints or writes for one client."""

    client: str
    path: Path
    merge: Callable[[str], str]  # current file text ("" if none) -> new text
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    note: str = ""
    env_enough: bool = False  # the environment alone points the client at the server
    files: dict[Path, str] = field(default_factory=dict)  # written whole beside PATH (--write)


# the instructions Codex's model catalog entry needs (a catalog entry must carry some): short,
# so a small local model's context goes to the tools and the conversation
CODEX_INSTRUCTIONS = """You are a coding agent running in a terminal, working in the user's \
workspace with the tools you are given. Be precise, safe and brief.

- Understand the request, look at the relevant files, then act; keep going until it is done.
- Prefer small, focused changes that match the surrounding code; never discard the user's work.
- Run the project's checks when you change code, and say what you ran and what it showed.
- End with a short summary of what you did and anything left to do.
"""


def codex_catalog(t: Target) -> str:
    """Codex's model catalog (`model_catalog_json`) with one entry, the served alias: its
    context window, so Codex neither warns of missing model metadata nor assumes its own."""
    entry = {
        "slug": t.alias, "display_name": t.alias, "description": f"{t.alias} on rapid-mlx",
        "context_window": t.context_length, "max_context_window": t.context_length,
        "shell_type": "default", "visibility": "list", "supported_in_api": True, "priority": 0,
        "base_instructions": CODEX_INSTRUCTIONS,
        "truncation_policy": {"mode": "bytes", "limit": 10000}, "input_modalities": ["text"],
        "support_verbosity": False, "supports_parallel_tool_calls": False,
        "supports_reasoning_summaries": False, "supported_reasoning_levels": [],
        "experimental_supported_tools": []}
    return json.dumps({"models": [entry]}, indent=2) + "\n"


def _codex_merge(t: Target, catalog: Path) -> Callable[[str], str]:
    def merge(text: str) -> str:
        doc = tomlkit.parse(text)
        doc["model"] = t.alias
        doc["model_provider"] = PROVIDER
        doc["model_context_window"] = t.context_length
        doc["model_catalog_json"] = str(catalog)
        providers = doc.get("model_providers")
        if providers is None:
            providers = tomlkit.table(is_super_table=True)
            doc["model_providers"] = providers
        table = tomlkit.table()
        table.update({"name": "rapid-mlx", "base_url": t.v1, "env_key": KEY_ENV,
                      "wire_api": "responses"})
        providers[PROVIDER] = table
        return tomlkit.dumps(doc)
    return merge


def codex(t: Target, home: Path) -> ClientConfig:
    """Codex CLI: a model provider with the Responses wire API in ~/.codex/config.toml, and a
    model catalog beside it that names the alias's context window."""
    catalog = home / ".codex" / "rapid-mlx-models.json"
    return ClientConfig("codex", home / ".codex" / "config.toml", _codex_merge(t, catalog),
                        env={KEY_ENV: t.api_key},
                        note=f"codex reads the key from ${KEY_ENV}",
                        files={catalog: codex_catalog(t)})


def claude(t: Target, home: Path) -> ClientConfig:
    """Claude Code: the Anthropic base URL, token and model in ~/.claude/settings.json `env`."""
    env = {"ANTHROPIC_BASE_URL": t.base, "ANTHROPIC_AUTH_TOKEN": t.api_key,
           "ANTHROPIC_MODEL": t.alias, "ANTHROPIC_DEFAULT_OPUS_MODEL": t.alias,
           "ANTHROPIC_DEFAULT_SONNET_MODEL": t.alias, "ANTHROPIC_DEFAULT_HAIKU_MODEL": t.alias,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           # the served context and an output limit within it: Claude Code otherwise assumes
           # its own window for an unknown model name (up to 1M tokens) and asks for 32000
           "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(t.context_length),
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(t.output_limit)}

    def merge(text: str) -> str:
        doc: dict[str, Any] = json.loads(text) if text.strip() else {}
        doc.setdefault("env", {}).update(env)
        return json.dumps(doc, indent=2) + "\n"
    note = ""
    if t.alias in CLAUDE_ALIASES:
        note = (f"'{t.alias}' is also a Claude Code model alias: if it sends claude-* names, "
                f"serve with --anthropic-model-map 'claude-*={t.alias}'")
    return ClientConfig("claude", home / ".claude" / "settings.json", merge, env=env, note=note,
                        env_enough=True)


def opencode(t: Target, home: Path) -> ClientConfig:
    """opencode: an @ai-sdk/openai-compatible provider in ~/.config/opencode/opencode.json."""
    provider = {"npm": "@ai-sdk/openai-compatible", "name": "rapid-mlx",
                "options": {"baseURL": t.v1, "apiKey": t.api_key},
                "models": {t.alias: {"name": t.alias,
                                     "limit": {"context": t.context_length,
                                               "output": t.context_length // 4}}}}

    def merge(text: str) -> str:
        doc: dict[str, Any] = json.loads(text) if text.strip() else {}
        doc.setdefault("$schema", "https://opencode.ai/config.json")
        doc.setdefault("provider", {})[PROVIDER] = provider
        doc["model"] = f"{PROVIDER}/{t.alias}"
        return json.dumps(doc, indent=2) + "\n"
    return ClientConfig("opencode", home / ".config" / "opencode" / "opencode.json", merge)


def aider(t: Target, home: Path) -> ClientConfig:
    """aider: openai-api-base, key and `openai/<alias>` in ~/.aider.conf.yml."""
    keys = {"openai-api-base": t.v1, "openai-api-key": t.api_key, "model": f"openai/{t.alias}"}

    def merge(text: str) -> str:
        doc = yaml.safe_load(text) if text.strip() else {}
        if not isinstance(doc, dict):
            raise ValueError("the existing file is not a YAML mapping")
        doc.update(keys)
        return str(yaml.safe_dump(doc, sort_keys=False))
    return ClientConfig("aider", home / ".aider.conf.yml", merge,
                        env={"OPENAI_API_BASE": t.v1, "OPENAI_API_KEY": t.api_key},
                        args=["--model", f"openai/{t.alias}"],
                        note=f"context window: {t.context_length} tokens", env_enough=True)


BUILDERS: dict[str, Callable[[Target, Path], ClientConfig]] = {
    "codex": codex, "claude": claude, "opencode": opencode, "aider": aider}
