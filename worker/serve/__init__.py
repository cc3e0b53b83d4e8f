"""Serving a loaded model: the loop, request intake and validation, warm-up, signals, lifetime."""
