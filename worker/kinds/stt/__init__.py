"""Speech-to-text worker kind: Whisper (and Parakeet) through mlx-audio, uploads decoded with PyAV."""
