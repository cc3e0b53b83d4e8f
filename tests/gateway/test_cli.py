"""The CLI's checks before anything starts: unknown models, suggestions, --version, pull."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gateway import cli
from gateway.aliases import closest, load_aliases, unknown_model
from gateway.plane.supervisor import _load_failure
from protocol.process import EXIT_CANNOT_LOAD

ALIASES = load_aliases()


def test_closest_prefers_aliases_the_name_begins() -> None:
    assert closest("qwen3-4b", ALIASES)[0] == "qwen3-4b-4bit"
    assert closest("Qwen3-4B-4BIT", ALIASES)[0] == "qwen3-4b-4bit"
    assert closest("llama", ALIASES) == ["llama-3.1-8b-4bit", "llama-3.2-3b-4bit",
                                         "llama-3.3-70b-4bit"]
    assert closest("zzzzzz", ALIASES) == []


@pytest.mark.parametrize("model", ["default", "qwen3-4b-4bit", "mlx-community/Qwen3-4B-4bit",
                                   "org/name", "embedded://demo"])
def test_aliases_repo_ids_and_embedded_pass(model: str) -> None:
    assert unknown_model(model, ALIASES) is None


def test_existing_folders_pass(tmp_path: Path) -> None:
    assert unknown_model(str(tmp_path), ALIASES) is None


@pytest.mark.parametrize("model", ["/no/such/dir", "./nope", "~/nope-x", "a/b/c", "a\\b"])
def test_missing_paths_are_one_line(model: str) -> None:
    assert unknown_model(model, ALIASES) == (
        f"unknown model '{model}': no such folder. Check the path, or pass an alias "
        "(see 'rapid-mlx models').")


def test_a_typo_names_the_closest_aliases() -> None:
    msg = unknown_model("qwen3-4b", ALIASES)
    assert msg is not None and "\n" not in msg
    assert msg.startswith("unknown model 'qwen3-4b': not an alias, a local folder or a Hugging "
                          "Face repo id (org/name). Did you mean: qwen3-4b-4bit, ")
    assert msg.endswith("? See 'rapid-mlx models'.")
    assert "Did you mean" not in (unknown_model("zzzzzz", ALIASES) or "")


def test_serve_refuses_a_typo_before_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.server

    def never(*_: object) -> None:
        raise AssertionError("the server must not start")

    monkeypatch.setattr(gateway.server, "run", never)
    out = CliRunner().invoke(cli.main, ["serve", "default", "qwen3-4b"])
    assert out.exit_code == 2
    assert out.output.startswith("error: unknown model 'qwen3-4b'") and out.output.count("\n") == 1


def test_version() -> None:
    out = CliRunner().invoke(cli.main, ["--version"])
    assert out.exit_code == 0 and out.output.startswith("rapid-mlx ")


def test_pull_of_a_local_folder_downloads_nothing(tmp_path: Path) -> None:
    out = CliRunner().invoke(cli.main, ["pull", str(tmp_path)])
    assert out.exit_code == 0 and "a local folder" in out.output and "nothing to" in out.output


def test_exit_code_is_shared_with_the_worker() -> None:
    from worker.model.fetch import EXIT_CANNOT_LOAD as worker_code

    assert worker_code == EXIT_CANNOT_LOAD == 78


def test_load_failure_reason_in_either_order() -> None:
    assert _load_failure("cannot load 'x': why; do, then exit code 78", "exit code 78") == (
        "cannot load 'x': why; do")
    assert _load_failure("exit code 78, then cannot load 'x': why; do", "exit code 78") == (
        "cannot load 'x': why; do")
    assert _load_failure("exit code 78", "exit code 78").startswith(
        "exit code 78: the model cannot be loaded")


def test_serve_refuses_a_model_map_to_an_unserved_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.server

    seen: list[object] = []
    monkeypatch.setattr(gateway.server, "run", seen.append)
    out = CliRunner().invoke(cli.main, ["serve", "--anthropic-model-map", "claude-*=nope"])
    assert out.exit_code == 2 and "not a served alias" in out.output and not seen
    out = CliRunner().invoke(cli.main, ["serve", "--anthropic-model-map", "claude-*=default"])
    assert out.exit_code == 0, out.output
    assert seen[0].anthropic_model_map == [("claude-*", "default")]  # type: ignore[attr-defined]


def test_serve_storage_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import gateway.server

    seen: list[Any] = []
    monkeypatch.setattr(gateway.server, "run", seen.append)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert CliRunner().invoke(cli.main, ["serve"]).exit_code == 0
    assert seen[-1].data_dir == str(tmp_path / "xdg" / "rapid-mlx") and seen[-1].store_responses
    assert (seen[-1].responses_max_count, seen[-1].responses_max_age_days) == (10000, 30.0)
    assert seen[-1].responses_max_bytes == 1 << 30
    assert seen[-1].responses_max_bytes_per_key == 0  # off unless asked for
    out = CliRunner().invoke(cli.main, ["serve", "--no-store", "--data-dir", str(tmp_path / "n"),
                                        "--responses-max-count", "3",
                                        "--responses-max-age", "0.5",
                                        "--responses-max-bytes", "64MiB",
                                        "--responses-max-bytes-per-key", "8MiB"])
    assert out.exit_code == 0, out.output
    assert seen[-1].data_dir is None and not seen[-1].store_responses
    assert (seen[-1].responses_max_count, seen[-1].responses_max_age_days) == (3, 0.5)
    assert seen[-1].responses_max_bytes == 64 << 20
    assert seen[-1].responses_max_bytes_per_key == 8 << 20
    assert not (tmp_path / "n").exists()  # --no-store creates nothing
    (tmp_path / "file").write_text("")
    out = CliRunner().invoke(cli.main, ["serve", "--data-dir", str(tmp_path / "file" / "d")])
    assert out.exit_code == 1 and "--data-dir" in out.output and len(seen) == 2
    out = CliRunner().invoke(cli.main, ["serve", "--responses-max-count", "-1"])
    assert out.exit_code == 2
    for size, want in [("0", 0), ("1.5kb", 1500), ("4096", 4096), ("2GiB", 2 << 30)]:
        assert CliRunner().invoke(cli.main, ["serve", "--responses-max-bytes", size]).exit_code == 0
        assert seen[-1].responses_max_bytes == want
    for size in ["-1", "lots", "1TB", "nanMB", "1.5"]:
        out = CliRunner().invoke(cli.main, ["serve", "--responses-max-bytes", size])
        assert out.exit_code == 2 and "--responses-max-bytes" in out.output, (size, out.output)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "responses.sqlite3").write_text("not a database, just text" * 100)
    out = CliRunner().invoke(cli.main, ["serve", "--data-dir", str(bad)])
    assert out.exit_code == 1 and "--data-dir: file is not a database" in out.output, out.output
