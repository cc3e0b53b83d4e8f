"""What a tenant's key may see of operator data: no other tenant's requests, no pids, no paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.process import EMBEDDED_PREFIX

HIDDEN_LIVE = ("requests", "path", "pid", "facts", "model")  # of a worker's own status


def is_local_path(model: str) -> bool:
    """True when MODEL names a folder on this machine rather than a hub repository."""
    if model.startswith(EMBEDDED_PREFIX):
        return False
    p = Path(model).expanduser()
    return p.is_absolute() or model.startswith((".", "~")) or p.is_dir()


def shown_model(model: str | None) -> str | None:
    """MODEL as a tenant sees it: a local folder by its name only, a repository id as is."""
    if not model or not is_local_path(model):
        return model
    return Path(model).expanduser().name or model


def worker_view(view: dict[str, Any]) -> dict[str, Any]:
    """A /v1/workers description without per-request rows, pids, addresses and paths."""
    live = view.get("live")
    out = {**view, "model": shown_model(view.get("model")), "path": None, "pid": None,
           "last_exit": None, "requests": None, "redacted": True,
           "live": None if live is None else {**{k: v for k, v in live.items()
                                                 if k not in HIDDEN_LIVE},
                                              "model": shown_model(live.get("model"))},
           "replicas": [{**r, "pid": None, "address": None, "model": shown_model(r.get("model"))}
                        for r in view.get("replicas", [])]}
    return out


def health_view(alias: dict[str, Any]) -> dict[str, Any]:
    """A /v1/health alias entry without the pid, the last exit's text and the model's path."""
    return {**alias, "model": shown_model(alias.get("model")), "pid": None, "last_exit": None,
            "redacted": True}
