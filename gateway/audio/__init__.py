"""OpenAI audio endpoints: speech-to-text and text-to-speech."""
