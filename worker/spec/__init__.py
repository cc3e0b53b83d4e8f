"""Speculative decoding: drafters that propose tokens, and the engine's exact verification."""
