"""OpenAI's audio endpoints: speech-to-text and text-to-speech (no mlx and no audio decoding
here: the workers do it)."""
