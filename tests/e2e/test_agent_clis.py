"""The real coding-agent CLIs from npm (Codex CLI, Claude Code) complete one turn against the
real server and the demo model, every request they make answered 2xx.

`make install`/`make test` put them in .venv/agent-clis (deploy/ensure-agent-clis.sh); where npm
or its registry is out of reach they are missing and these tests skip. Both run with a throwaway
HOME. The demo model is 2048 tokens and only answers short prompts sensibly, so each CLI runs
with its tools and long built-in instructions turned off (the default, full-size requests go
through the same protocol code: tests/gateway/test_agent_requests.py replays their shapes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')


def agent_bin(name: str) -> Path:
    """A CLI installed by deploy/ensure-agent-clis.sh; the test skips without it."""
    root = Path(os.environ.get("RAPID_MLX_AGENT_CLIS", Path(sys.prefix) / "agent-clis"))
    path = root / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in {root} (npm or its registry unreachable when "
                    "deploy/ensure-agent-clis.sh ran; see its npm-install.log)")
    return path


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    # past the demo's trained 2048 tokens: room for the CLIs' system prompts (RoPE degrades)
    s = Server("--log-level", "info", "--context-length", "4096",
               "--anthropic-model-map", "claude-*=default").wait_ready()
    yield s
    s.stop()


def requests_since(server: Server, mark: int) -> list[tuple[str, str, int]]:
    """(method, path, status) of every request in the server's access log after line MARK."""
    out = []
    for line in server.lines[mark:]:
        m = ACCESS.search(line)
        if m and "/workers" not in m["path"]:
            out.append((m["method"], m["path"], int(m["status"])))
    return out


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENAI_", "ANTHROPIC_", "CODEX_", "CLAUDE"))}
    return subprocess.run(cmd, env={**base, **env}, cwd=cwd, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def codex_finished(res: subprocess.CompletedProcess[str]) -> bool:
    """True when Codex exited 0, or only because the demo model's answer ran to the token limit.

    Codex's prompt (~3,000 tokens) is past the demo model's trained 2,048, and its greedy answer
    sometimes loops ("bababa...") until `max_output_tokens`; Codex then exits 1 with "Incomplete
    response returned". That is the tiny model's quality, not the protocol under test.
    """
    out = res.stdout + res.stderr
    return res.returncode == 0 or (
        "Incomplete response returned, reason: max_output_tokens" in out
        and out.count("ERROR:") == out.count("ERROR: Incomplete response returned"))


def _slim_codex(tmp_path: Path) -> list[str]:
    """`-c` flags turning off Codex's tools and long instructions (the demo model's context)."""
    instructions = tmp_path / "instructions.md"
    instructions.write_text("You are a coding agent. Answer briefly.\n")
    slim = ["features.multi_agent=false", "features.goals=false", "web_search=disabled",
            f"model_instructions_file={instructions}", "skills.include_instructions=false",
            "features.view_image=false", "tools.experimental_request_user_input.enabled=false",
            "features.shell_tool=false", "model_reasoning_effort=minimal"]
    return [a for kv in slim for a in ("-c", kv)]


def test_codex_exec_one_turn(srv: Server, tmp_path: Path) -> None:
    codex = agent_bin("codex")
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    provider = (f'model_providers.rapid={{name="rapid-mlx",base_url="{srv.url}",'
                'env_key="RAPID_MLX_API_KEY",wire_api="responses"}')
    mark = len(srv.lines)
    res = _run([str(codex), "exec", "--skip-git-repo-check", "-s", "read-only",
                "-c", provider, "-c", "model_provider=rapid", "-m", "default",
                *_slim_codex(tmp_path), "Say hello."],
               {"HOME": str(home), "CODEX_HOME": str(home / ".codex"),
                "RAPID_MLX_API_KEY": "sk-test"}, tmp_path)
    seen = requests_since(srv, mark)
    assert codex_finished(res), (seen, res.stdout[-3000:] + res.stderr[-3000:])
    assert ("POST", "/v1/responses", 200) in seen, seen
    assert all(200 <= status < 300 for _, _, status in seen), seen
    # the model's (demo) answer: on stdout, or with Codex's incomplete-response error
    assert res.stdout.strip() or res.returncode != 0 and res.stderr.strip(), res.stderr[-2000:]


def test_claude_print_one_turn(srv: Server, tmp_path: Path) -> None:
    claude = agent_bin("claude")
    home = tmp_path / "home"
    home.mkdir()
    mark = len(srv.lines)
    res = _run([str(claude), "-p", "Say hello.", "--bare", "--model", "default", "--tools", "",
                "--system-prompt", "Answer briefly."],
               {"HOME": str(home), "ANTHROPIC_BASE_URL": srv.base,
                "ANTHROPIC_API_KEY": "sk-test", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "CLAUDE_CODE_DISABLE_THINKING": "1"}, tmp_path)
    seen = requests_since(srv, mark)
    assert res.returncode == 0, (seen, res.stdout[-3000:] + res.stderr[-3000:])
    assert [s for s in seen if s[1].startswith("/v1/messages")], seen
    assert all(200 <= status < 300 for _, _, status in seen), seen
    assert res.stdout.strip()


def _launch(srv: Server, home: Path, *args: str) -> str:
    env = {**os.environ, "HOME": str(home)}
    env.pop("RAPID_MLX_API_KEY", None)
    res = subprocess.run([sys.executable, "-m", "gateway", "launch", *args, "--url", srv.base,
                          "--no-exec"], env=env, capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_launch_prints_each_client(srv: Server, tmp_path: Path) -> None:
    out = {c: _launch(srv, tmp_path, c, "--api-key", "sk-9")
           for c in ("codex", "claude", "opencode", "aider")}
    assert f'base_url = "{srv.url}"' in out["codex"] and "model_context_window = 4096" in out["codex"]
    assert f'"ANTHROPIC_BASE_URL": "{srv.base}"' in out["claude"] and "sk-9" in out["claude"]
    assert '"context": 4096' in out["opencode"] and '"model": "rapid-mlx/default"' in out["opencode"]
    assert "model: openai/default" in out["aider"] and f"openai-api-base: {srv.url}" in out["aider"]
    assert not list(tmp_path.iterdir())  # printing writes nothing


def test_launch_write_then_codex_uses_it(srv: Server, tmp_path: Path) -> None:
    codex = agent_bin("codex")
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text('approval_policy = "never"\n')
    _launch(srv, home, "codex", "--write", "--api-key", "sk-9")
    assert list((home / ".codex").glob("config.toml.bak-*"))
    mark = len(srv.lines)
    res = _run([str(codex), "exec", "--skip-git-repo-check", "-s", "read-only",
                *_slim_codex(tmp_path), "Say hello."],
               {"HOME": str(home), "CODEX_HOME": str(home / ".codex"),
                "RAPID_MLX_API_KEY": "sk-9"}, tmp_path)
    seen = requests_since(srv, mark)
    assert codex_finished(res), (seen, res.stdout[-3000:] + res.stderr[-3000:])
    assert ("POST", "/v1/responses", 200) in seen, seen
    assert all(200 <= status < 300 for _, _, status in seen), seen
    assert "Model metadata" not in res.stdout + res.stderr  # the catalog launch wrote


def test_launch_write_then_claude_uses_it(srv: Server, tmp_path: Path) -> None:
    claude = agent_bin("claude")
    home = tmp_path / "home"
    home.mkdir()
    out = _launch(srv, home, "claude", "--write", "--api-key", "sk-9")
    assert "--anthropic-model-map 'claude-*=default'" in out
    mark = len(srv.lines)
    res = _run([str(claude), "-p", "Say hello.", "--bare", "--tools", "", "--system-prompt",
                "Answer briefly.", "--settings", str(home / ".claude" / "settings.json")],
               {"HOME": str(home), "CLAUDE_CODE_DISABLE_THINKING": "1"}, tmp_path)
    seen = requests_since(srv, mark)
    assert res.returncode == 0, (seen, res.stdout[-3000:] + res.stderr[-3000:])
    assert [s for s in seen if s[1].startswith("/v1/messages")], seen
    assert all(200 <= status < 300 for _, _, status in seen), seen
    assert "assumes a context window" not in res.stdout + res.stderr  # it was told the window


def test_max_tokens_beyond_the_context_means_the_rest(srv: Server) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=srv.base, api_key="x", max_retries=0)
    with client.messages.stream(model="claude-opus-5-5", max_tokens=128000,
                                messages=[{"role": "user", "content": "Hello!"}]) as stream:
        msg = stream.get_final_message()
    assert msg.stop_reason == "end_turn" and msg.content[0].type == "text"
    assert msg.model == "claude-opus-5-5"
    # below the context but more than its prompt leaves (Claude Code's 32000 in a 32k
    # context): what is left
    short = client.messages.create(model="default", max_tokens=4000,
                                   messages=[{"role": "user", "content": "Hello! " * 60}])
    assert short.usage.input_tokens + short.usage.output_tokens <= 4096
