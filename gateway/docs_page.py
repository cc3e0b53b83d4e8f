"""GET /docs: a self-contained HTML reference rendered from the OpenAPI document (no CDN)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

_STYLE = """body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}
.op{border:1px solid #ccc;border-radius:6px;margin:1rem 0;padding:.5rem 1rem}
.m{font-weight:bold;text-transform:uppercase;padding:.1rem .4rem;border-radius:4px;color:#fff}
.get{background:#2a7}.post{background:#27c}pre{background:#f6f6f6;padding:.5rem;overflow:auto}
details{margin:.3rem 0}"""


def _schema_block(name: str, schema: dict[str, Any]) -> str:
    return (f"<details id='{escape(name)}'><summary><code>{escape(name)}</code></summary>"
            f"<pre>{escape(json.dumps(schema, indent=2))}</pre></details>")


def render_docs(spec: dict[str, Any]) -> str:
    """The HTML page for SPEC."""
    info = spec.get("info", {})
    ops = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            ref = body.get("schema", {}).get("$ref", "")
            link = f" — body: <a href='#{ref.rsplit('/', 1)[-1]}'>{escape(ref.rsplit('/', 1)[-1])}</a>" if ref else ""
            codes = ", ".join(op.get("responses", {}))
            ops.append(f"<div class='op'><span class='m {method}'>{method}</span> "
                       f"<code>{escape(path)}</code> {escape(op.get('summary', ''))}{link}"
                       f"<br><small>responses: {escape(codes)}</small></div>")
    schemas = "".join(_schema_block(n, s) for n, s in
                      spec.get("components", {}).get("schemas", {}).items())
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(info.get('title', 'API'))}"
            f" docs</title><style>{_STYLE}</style></head><body><h1>{escape(info.get('title', ''))}"
            f" <small>{escape(info.get('version', ''))}</small></h1><p>{escape(info.get('description', ''))}"
            f" The machine-readable document is at <a href='/openapi.json'>/openapi.json</a>.</p>"
            f"<h2>Endpoints</h2>{''.join(ops)}<h2>Schemas</h2>{schemas}</body></html>")
