"""Find a model's folder: a local path, the embedded demo, or a Hugging Face snapshot (cached or
downloaded). Imports no mlx: `rapid-mlx pull` runs it as `python -m worker.model.fetch REPO`."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from protocol.process import EMBEDDED_PREFIX
from protocol.process import EXIT_CANNOT_LOAD as EXIT_CANNOT_LOAD  # a deterministic load failure

log = logging.getLogger("rapid_mlx.worker")

PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "*.py",
            "*.npz"]  # mlx-whisper folders keep their weights in weights.npz


class CannotLoad(Exception):
    """The model cannot be loaded for a deterministic reason: what, why and what to do."""

    def __init__(self, model: str, why: str, todo: str, *, offline: bool = False) -> None:
        super().__init__(f"cannot load '{model}': {why}; {todo}")
        self.model, self.why, self.todo = model, why, todo
        self.offline = offline  # the hub could not be reached (or HF_HUB_OFFLINE is set)


def is_repo_id(model: str) -> bool:
    """True for an 'org/name' Hugging Face repo id (not a path-like string)."""
    return (model.count("/") == 1 and not model.startswith((".", "/", "~"))
            and all(part.strip() for part in model.split("/")))


def local_folder(model: str) -> Path | None:
    """MODEL as an existing local folder, else None."""
    local = Path(model).expanduser()
    return local if local.is_dir() else None


def resolve(model: str, revision: str | None = None) -> Path:
    """Return a local folder for MODEL: the path itself, or a hub snapshot (downloaded if needed)."""
    if model.startswith(EMBEDDED_PREFIX):
        from worker.model.embedded import embedded_model_path

        return embedded_model_path()
    local = local_folder(model)
    if local is not None:
        if not (local / "config.json").exists():
            raise CannotLoad(model, "the folder has no config.json, so it is not a Hugging Face "
                             "model folder", "pass a folder with config.json and *.safetensors "
                             "files, an 'org/name' repo id, or an alias (see 'rapid-mlx models')")
        return local.resolve()
    if not is_repo_id(model):
        raise CannotLoad(model, "no such folder, and not an 'org/name' Hugging Face repo id",
                         "check the path, or pass an alias (see 'rapid-mlx models')")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(model, revision=revision, allow_patterns=PATTERNS,
                                      local_files_only=True))
    except Exception:
        pass
    if _offline():
        raise CannotLoad(model, "it is not in the local Hugging Face cache and HF_HUB_OFFLINE is "
                         "set", f"run 'rapid-mlx pull {model}' with network access first, or "
                         "pass a local folder", offline=True)
    log.info("downloading %s from the Hugging Face hub", model)
    return download(model, revision)


def download(model: str, revision: str | None = None) -> Path:
    """Download (or update) repo MODEL into the Hugging Face cache with a progress bar."""
    from huggingface_hub import errors, snapshot_download

    try:
        return Path(snapshot_download(model, revision=revision, allow_patterns=PATTERNS))
    except errors.RevisionNotFoundError as exc:
        raise CannotLoad(model, f"the repo has no revision '{revision}'",
                         "check --revision") from exc
    except (errors.RepositoryNotFoundError, errors.GatedRepoError) as exc:
        raise CannotLoad(model, "no such repo on the Hugging Face hub, or it is private or gated",
                         "check the name (see 'rapid-mlx models' for aliases), or log in with "
                         "'hf auth login' for a gated repo") from exc
    except errors.LocalEntryNotFoundError as exc:  # offline or unreachable, and not cached
        why = ("HF_HUB_OFFLINE is set" if _offline() else
               f"the Hugging Face hub is unreachable ({_root_cause(exc)})")
        raise CannotLoad(model, f"it is not in the local cache and {why}",
                         f"check the network, run 'rapid-mlx pull {model}' where it works, or "
                         "pass a local folder", offline=True) from exc


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true")


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:160]


def main(argv: list[str] | None = None) -> int:
    """`python -m worker.model.fetch REPO [--revision R]` (what `rapid-mlx pull` runs): download REPO
    into the Hugging Face cache and print its folder, or one `error:` line and exit 1."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m worker.model.fetch", description=main.__doc__)
    p.add_argument("repo", help="an 'org/name' Hugging Face repo id")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    args = p.parse_args(argv)
    try:
        path = download(args.repo, args.revision)
    except CannotLoad as exc:
        todo = "check the network and HF_HUB_OFFLINE, then try again" if exc.offline else exc.todo
        print(f"error: cannot download '{args.repo}': {exc.why}; {todo}", file=sys.stderr)
        return 1
    print(path, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
