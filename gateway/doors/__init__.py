"""Pieces every front door shares: request checks, jobs, relaying worker outputs, choices, SSE, tool_choice and structured output."""
