"""`rapid-mlx launch`: the generated client configurations and the merge into existing files."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from gateway.launch.configs import BUILDERS, Target
from gateway.launch.run import render, write

T = Target(base="http://127.0.0.1:8000", alias="qwen", context_length=32768, api_key="sk-1")


def test_codex_provider_block_merges_into_existing_config(tmp_path: Path) -> None:
    cfg = BUILDERS["codex"](T, tmp_path)
    assert cfg.path == tmp_path / ".codex" / "config.toml"
    cfg.path.parent.mkdir()
    cfg.path.write_text('# mine\nmodel = "gpt-5"\napproval_policy = "never"\n\n'
                        '[model_providers.other]\nname = "other"\nbase_url = "http://x"\n\n'
                        '[mcp_servers.fs]\ncommand = "fs"\n')
    backup = write(cfg)
    assert backup is not None and "gpt-5" in backup.read_text()
    text = cfg.path.read_text()
    doc = tomllib.loads(text)
    assert "# mine" in text and doc["approval_policy"] == "never"
    assert doc["mcp_servers"] == {"fs": {"command": "fs"}}
    assert doc["model_providers"]["other"]["base_url"] == "http://x"
    assert (doc["model"], doc["model_provider"], doc["model_context_window"]) == (
        "qwen", "rapid-mlx", 32768)
    assert doc["model_providers"]["rapid-mlx"] == {
        "name": "rapid-mlx", "base_url": "http://127.0.0.1:8000/v1",
        "env_key": "RAPID_MLX_API_KEY", "wire_api": "responses"}
    assert cfg.env == {"RAPID_MLX_API_KEY": "sk-1"}
    assert tomllib.loads(cfg.merge(text)) == doc  # idempotent


def test_claude_env_in_settings(tmp_path: Path) -> None:
    cfg = BUILDERS["claude"](T, tmp_path)
    cfg.path.parent.mkdir()
    cfg.path.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]},
                                    "env": {"FOO": "1"}}))
    write(cfg)
    doc = json.loads(cfg.path.read_text())
    assert doc["permissions"] == {"allow": ["Bash(ls)"]} and doc["env"]["FOO"] == "1"
    assert doc["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"  # no /v1: it adds it
    assert doc["env"]["ANTHROPIC_AUTH_TOKEN"] == "sk-1"
    assert doc["env"]["ANTHROPIC_MODEL"] == "qwen" and cfg.env_enough
    assert "model alias" in BUILDERS["claude"](Target(T.base, "default", 1, "k"), tmp_path).note


def test_opencode_provider_with_context_limit(tmp_path: Path) -> None:
    cfg = BUILDERS["opencode"](T, tmp_path)
    doc = json.loads(cfg.merge('{"theme": "dark", "provider": {"x": {"npm": "y"}}}'))
    assert doc["theme"] == "dark" and doc["provider"]["x"] == {"npm": "y"}
    p = doc["provider"]["rapid-mlx"]
    assert p["npm"] == "@ai-sdk/openai-compatible"
    assert p["options"] == {"baseURL": "http://127.0.0.1:8000/v1", "apiKey": "sk-1"}
    assert p["models"]["qwen"]["limit"]["context"] == 32768
    assert doc["model"] == "rapid-mlx/qwen"


def test_aider_conf(tmp_path: Path) -> None:
    cfg = BUILDERS["aider"](T, tmp_path)
    doc = yaml.safe_load(cfg.merge("dark-mode: true\nmodel: gpt-4o\n"))
    assert doc == {"dark-mode": True, "model": "openai/qwen",
                   "openai-api-base": "http://127.0.0.1:8000/v1", "openai-api-key": "sk-1"}
    assert cfg.path == tmp_path / ".aider.conf.yml"
    with pytest.raises(ValueError):
        cfg.merge("- a list\n")


def test_render_shows_file_env_and_note() -> None:
    out = render(BUILDERS["codex"](T, Path("/h")))
    assert out.startswith("# codex: /h/.codex/config.toml\n")
    assert 'wire_api = "responses"' in out and "export RAPID_MLX_API_KEY=sk-1" in out


def test_launch_without_the_client_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gateway.cli import main

    monkeypatch.setattr("gateway.launch.run.target", lambda url, alias, key: T)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(main, ["launch", "opencode", "--write"])
    assert res.exit_code == 0, res.output
    assert "npm install -g opencode-ai" in res.output
    assert json.loads((tmp_path / ".config/opencode/opencode.json").read_text())["model"] == \
        "rapid-mlx/qwen"


def test_codex_gets_a_model_catalog_with_the_context_window(tmp_path: Path) -> None:
    cfg = BUILDERS["codex"](T, tmp_path)
    write(cfg)
    doc = tomllib.loads(cfg.path.read_text())
    catalog = Path(doc["model_catalog_json"])
    assert catalog == tmp_path / ".codex" / "rapid-mlx-models.json"
    (entry,) = json.loads(catalog.read_text())["models"]
    assert (entry["slug"], entry["context_window"], entry["max_context_window"]) == (
        "qwen", 32768, 32768)
    assert entry["base_instructions"].strip()  # Codex refuses an entry without instructions
    assert "rapid-mlx-models.json" in render(cfg)


def test_claude_is_told_the_context_window_and_an_output_limit(tmp_path: Path) -> None:
    env = BUILDERS["claude"](T, tmp_path).env
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "8192"
    small = BUILDERS["claude"](Target(T.base, "qwen", 4096, "k"), tmp_path).env
    assert small["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "1024"


def test_pinned_versions_match_the_install_script() -> None:
    from gateway.launch.run import PINNED

    script = (Path(__file__).resolve().parents[2] / "deploy" / "ensure-agent-clis.sh").read_text()
    for spec in PINNED.values():
        assert f'"{spec}"' in script, spec


def _cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str,
         alias: str = "qwen") -> tuple[str, list[tuple[str, list[str]]]]:
    from click.testing import CliRunner

    from gateway.cli import main

    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr("gateway.launch.run.target",
                        lambda url, a, key: Target(T.base, alias, T.context_length, T.api_key))
    monkeypatch.setattr("gateway.launch.run.os.execvpe", lambda exe, argv, env: ran.append(
        (exe, argv)))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = CliRunner().invoke(main, ["launch", *args])
    assert res.exit_code == 0, res.output
    return res.output, ran


def test_launch_runs_the_pinned_cli_of_the_project(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    clis = tmp_path / "agent-clis"
    monkeypatch.setenv("RAPID_MLX_AGENT_CLIS", str(clis))
    out, ran = _cli(monkeypatch, tmp_path, "codex", "--write")
    assert not ran and "make install" in out and "@openai/codex@0.171.0" in out
    assert "npm install -g" not in out
    exe = clis / "node_modules" / ".bin" / "codex"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    out, ran = _cli(monkeypatch, tmp_path, "codex", "--write", "exec", "hi")
    assert ran == [(str(exe), ["codex", "exec", "hi"])]
    assert "rapid-mlx-models.json" in out


def test_launch_write_prints_the_model_map_hint(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("RAPID_MLX_AGENT_CLIS", str(tmp_path / "none"))
    out, _ = _cli(monkeypatch, tmp_path, "claude", "--write", "--no-exec", alias="default")
    assert "--anthropic-model-map 'claude-*=default'" in out
