"""Finding, checking and loading a model: fetch, preflight, load, fingerprint, the embedded demo."""
