"""The OpenAI front doors: /v1/chat/completions and /v1/completions, their schemas and stream events."""
