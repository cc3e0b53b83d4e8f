"""The storage plane: what the gateway keeps beyond one request (stored Responses API objects)."""
