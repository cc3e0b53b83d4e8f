"""Each documented command (tests/docs/documented_commands.py) is in README.md as written, parses,
and names what it says: its models resolve through the alias table to the kind it serves, or it
is refused with its one-line reason before anything starts."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway import cli
from gateway.aliases import load_aliases, unknown_model
from gateway.config import GatewayConfig
from tests.docs.documented_commands import COMMANDS, EXTRAS, Documented

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
KINDS = {"embed": ("embedding", "embeddinggemma"), "speech": ("kokoro",),
         "transcribe": ("whisper", "parakeet")}


def _serve_args(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[:2] == ["rapid-mlx", "serve"], line
    return words[2:]


@pytest.mark.parametrize("doc", COMMANDS, ids=lambda d: d.line)
def test_each_command_is_in_the_readme(doc: Documented) -> None:
    assert f"`{doc.line}`" in README or f"\n{doc.line}\n" in README, doc.line


@pytest.mark.parametrize(("line", "extra"), EXTRAS)
def test_each_extra_exists(line: str, extra: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extra in project["optional-dependencies"]
    assert f"`{line}`" in README


@pytest.mark.parametrize("doc", COMMANDS, ids=lambda d: d.line)
def test_each_command_does_what_it_says(doc: Documented, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    started: list[GatewayConfig] = []
    monkeypatch.setattr("gateway.server.run", lambda config: started.append(config))
    monkeypatch.setenv("RAPID_MLX_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("RAPID_MLX_ALIASES", raising=False)
    out = CliRunner().invoke(cli.main, ["serve", *_serve_args(doc.line)])
    text = out.output.strip()
    if doc.refused and not doc.at_start:
        assert out.exit_code != 0 and not started
        assert len(text.splitlines()) == 1 and doc.refused in text, text
        return
    assert out.exit_code == 0, text
    (config,) = started
    aliases = load_aliases()
    for served in config.served:
        assert unknown_model(served.alias, aliases) is None
        repo = served.model.lower()
        assert doc.kind not in KINDS or any(k in repo for k in KINDS[doc.kind]), repo
    if doc.at_start:  # the worker refuses: its option reaches it
        assert "--audio-mode" in config.worker_args


def test_refused_alias_is_listed_as_refused() -> None:
    out = CliRunner().invoke(cli.main, ["models"])
    row = next(ln for ln in out.output.splitlines() if ln.startswith("qwen3.5-9b-mtp-4bit "))
    assert "refused" in row
