"""What an admin may swap an alias to: aliases, models served at start, allow-listed folders,
and (only when enabled) Hugging Face repo ids. Refusals never reveal what exists on disk."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gateway.edge.errors import APIError

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class SwapTargets:
    """The operator's swap policy; `resolve` turns a requested target into a model to load."""

    def __init__(self, aliases: dict[str, str], served: list[str], allow_paths: list[str],
                 allow_repos: bool) -> None:
        self.aliases = dict(aliases)  # alias name -> repo or folder
        self.served = frozenset(served)
        self.roots = [Path(os.path.realpath(os.path.expanduser(p))) for p in allow_paths]
        self.allow_repos = allow_repos

    def refusal(self, target: str) -> APIError:
        """The one answer for every refused target, whatever the reason."""
        how = ["an alias name (`rapid-mlx models`)", "a model this server was started with"]
        if self.roots:
            how.append("a model folder under --swap-allow-path")
        if self.allow_repos:
            how.append("a Hugging Face repo id")
        return APIError(400, f"The swap target '{target[:200]}' is not allowed or not found; "
                        f"use {', '.join(how[:-1])} or {how[-1]}.", param="model", code="swap_target_not_allowed")

    def _folder(self, target: str) -> str | None:
        real = Path(os.path.realpath(os.path.expanduser(target)))
        if not any(real == root or real.is_relative_to(root) for root in self.roots):
            return None
        return str(real) if (real / "config.json").is_file() else None

    def resolve(self, target: str) -> str:
        """The model to load for TARGET, or raise the generic 400 before any worker is touched."""
        if target in self.served:
            return target
        if target in self.aliases:
            return self.aliases[target]
        if target.startswith(("/", ".", "~")):
            folder = self._folder(target) if self.roots else None
            if folder is not None:
                return folder
        elif self.allow_repos and REPO_ID.match(target):
            return target
        raise self.refusal(target)
