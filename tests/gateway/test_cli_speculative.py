"""`serve --speculative ...` and an alias's own speculative settings reach the worker's args."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gateway import cli


def test_serve_speculative_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gateway.server

    seen: list[Any] = []
    monkeypatch.setattr(gateway.server, "run", seen.append)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert CliRunner().invoke(cli.main, ["serve"]).exit_code == 0
    assert "--speculative" not in seen[-1].worker_args
    out = CliRunner().invoke(cli.main, ["serve", "--speculative", "ngram",
                                        "--num-draft-tokens", "6"])
    assert out.exit_code == 0, out.output
    args = seen[-1].worker_args
    assert args[args.index("--speculative") + 1] == "ngram"
    assert args[args.index("--num-draft-tokens") + 1] == "6"
    # without --num-draft-tokens the worker picks the drafter's own default (8 for ngram)
    assert CliRunner().invoke(cli.main, ["serve", "--speculative", "ngram"]).exit_code == 0
    assert "--num-draft-tokens" not in seen[-1].worker_args
    out = CliRunner().invoke(cli.main, ["serve", "--speculative", "draft"])
    assert out.exit_code == 2 and "--draft-model" in out.output
    out = CliRunner().invoke(cli.main, ["serve", "--speculative", "draft", "--draft-model",
                                        str(tmp_path)])
    assert out.exit_code == 0, out.output
    args = seen[-1].worker_args
    assert args[args.index("--draft-model") + 1] == str(tmp_path)
    assert CliRunner().invoke(cli.main, ["serve", "--speculative", "magic"]).exit_code == 2


def test_an_alias_speculates_on_its_own(tmp_path: Path) -> None:
    from gateway.aliases import load_aliases, served_model

    table = tmp_path / "aliases.toml"
    table.write_text('[fast]\nrepo = "org/big"\nspeculative = "draft"\nnum_draft_tokens = 3\n'
                     'draft_model = "small"\n[small]\nrepo = "org/small"\n')
    aliases = load_aliases(table)
    s = served_model("fast", None, aliases, None, None)
    assert s.worker_args == ["--speculative", "draft", "--num-draft-tokens", "3",
                             "--draft-model", "org/small"]
    assert served_model("small", None, aliases, None, None).worker_args == []
    table.write_text('[bad]\nrepo = "x/y"\nspeculative = "magic"\n')
    with pytest.raises(ValueError):
        load_aliases(table)
