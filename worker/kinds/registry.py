"""Build the runner of a non-generate worker kind: each kind's module has load_runner()."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from pathlib import Path
from typing import Any

from worker.model.fetch import CannotLoad
from worker.serve.runner import BasicRunner

# kind -> (module with `load_runner(model, path, config, args) -> BasicRunner`, the pip extra it
# needs, the top-level packages of that extra)
RUNNERS = {"embed": ("worker.kinds.embed.runner", "embeddings", ("mlx_embeddings",)),
           "transcribe": ("worker.kinds.stt.runner", "audio", ("mlx_audio", "av")),
           "speech": ("worker.kinds.tts.runner", "audio", ("mlx_audio", "av", "misaki", "phonemizer",
                                                     "espeakng_loader"))}


def missing_extra(model: str, kind: str, extra: str, missing: list[str]) -> CannotLoad:
    """The start failure when the packages of EXTRA are not installed."""
    what = {"embed": "an embedding", "transcribe": "a speech-to-text",
            "speech": "a text-to-speech"}.get(kind, kind)
    return CannotLoad(model, f"it is {what} model and the '{extra}' extra is not installed "
                      f"(no {', '.join(missing)})", f"pip install 'rapid-mlx[{extra}]'")


def load_runner(kind: str, model: str, path: Path, config: dict[str, Any],
                args: argparse.Namespace) -> BasicRunner:
    """Load MODEL (folder PATH) for KIND; CannotLoad names the extra when its packages are missing."""
    module_name, extra, packages = RUNNERS[kind]
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise missing_extra(model, kind, extra, missing)
    module = importlib.import_module(module_name)
    runner: BasicRunner = module.load_runner(model, path, config, args)
    runner.folder = str(path)
    return runner
