"""Text-to-speech worker: Kokoro through mlx-audio, audio encoded with PyAV."""
