#!/bin/sh
# Install the coding-agent CLIs the client tests drive (Codex CLI, Claude Code) into a
# project-local npm prefix: $1 (default .venv/agent-clis). Pinned versions; quiet no-op when npm
# is missing or the registry cannot be reached (the tests then skip and say why).
PREFIX="${1:-.venv/agent-clis}"
CODEX="@openai/codex@0.171.0"
CLAUDE="@anthropic-ai/claude-code@2.1.332"
if ! command -v npm >/dev/null 2>&1; then
    echo "ensure-agent-clis: npm not found; the agent CLI tests will skip" >&2
    exit 0
fi
if [ -x "$PREFIX/node_modules/.bin/codex" ] && [ -x "$PREFIX/node_modules/.bin/claude" ] &&
   grep -q '"version": "0.171.0"' "$PREFIX/node_modules/@openai/codex/package.json" 2>/dev/null &&
   grep -q '"version": "2.1.332"' "$PREFIX/node_modules/@anthropic-ai/claude-code/package.json" 2>/dev/null; then
    exit 0
fi
mkdir -p "$PREFIX"
if ! npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=30000 "$CODEX" "$CLAUDE" >"$PREFIX/npm-install.log" 2>&1; then
    echo "ensure-agent-clis: npm install failed (see $PREFIX/npm-install.log); the agent CLI tests will skip" >&2
fi
exit 0
