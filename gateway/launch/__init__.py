"""`rapid-mlx launch`: point a coding agent (codex, claude, opencode, aider) at the server."""
