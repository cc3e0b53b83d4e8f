"""POST /v1/responses: the OpenAI Responses API as a front door onto the chat job path."""
