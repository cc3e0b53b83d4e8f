"""Tiny random-weight models with the structure of each architecture behind a built-in alias."""
