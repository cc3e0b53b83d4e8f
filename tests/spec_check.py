"""Check payloads against the OpenAPI document strictly: the types must match and every field of
every object must be documented (objects with listed properties admit no others)."""

from __future__ import annotations

import copy
from typing import Any

from jsonschema import Draft202012Validator


def _close(node: Any) -> None:
    if isinstance(node, dict):
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        for value in node.values():
            _close(value)
    elif isinstance(node, list):
        for value in node:
            _close(value)


class SpecCheck:
    """Validators for the bodies and events an OpenAPI document describes."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.components = copy.deepcopy(spec["components"])
        _close(self.components)

    def schema(self, path: str, method: str, status: str, media: str) -> dict[str, Any]:
        """The documented schema of one response."""
        content = self.spec["paths"][path][method]["responses"][status]["content"]
        return content[media]["schema"]

    def errors(self, path: str, method: str, status: str, media: str,
               payload: Any) -> list[str]:
        """What is wrong with PAYLOAD as that response (empty: it conforms)."""
        root = {**copy.deepcopy(self.schema(path, method, status, media)),
                "components": self.components}
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in Draft202012Validator(root).iter_errors(payload)]

    def check(self, path: str, method: str, status: int | str, payload: Any,
              media: str = "application/json") -> None:
        """Assert that PAYLOAD conforms to the documented response."""
        problems = self.errors(path, method, str(status), media, payload)
        assert not problems, f"{method.upper()} {path} {status} {media}: {problems[:5]}\n{payload}"
