"""Worker kinds besides text generation: embeddings, speech-to-text, text-to-speech."""
