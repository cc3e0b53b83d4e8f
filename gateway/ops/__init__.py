"""Operator routes and docs: health, metrics, workers, admin hot swap, models, OpenAPI and /docs, and the ops client."""
