"""GET /docs: Swagger UI on /openapi.json, its files served from the swagger-ui-bundle-v2 package
(no CDN: the page works offline and loads nothing from elsewhere)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response

from gateway.edge.errors import APIError

STATIC_PREFIX = "/docs/static/"
# the only files the page needs, and their content types (the rest of the package is not served)
ASSETS = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8",
          "swagger-ui.css": "text/css; charset=utf-8",
          "favicon-32x32.png": "image/png", "favicon-16x16.png": "image/png"}

# relative URLs, so the page also works behind a proxy that mounts the server under a prefix;
# validatorUrl null: Swagger UI would otherwise send the document to an online validator
_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} API reference</title>
<link rel="stylesheet" href="docs/static/swagger-ui.css">
<link rel="icon" type="image/png" href="docs/static/favicon-32x32.png" sizes="32x32">
<link rel="icon" type="image/png" href="docs/static/favicon-16x16.png" sizes="16x16">
</head><body><div id="swagger-ui"></div>
<script src="docs/static/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({{url: "openapi.json", dom_id: "#swagger-ui", deepLinking: true,
  validatorUrl: null, presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout",
  displayRequestDuration: true}});
</script></body></html>
"""


def swagger_ui_dir() -> Path:
    """The directory of Swagger UI's dist files inside the installed package."""
    from swagger_ui_bundle import swagger_ui_path

    return Path(str(swagger_ui_path))


def render_docs(title: str) -> str:
    """The Swagger UI page for the API named TITLE."""
    return _PAGE.format(title=escape(title))


class DocsEndpoints:
    """GET /docs and GET /docs/static/{name}."""

    def __init__(self, title: str) -> None:
        self.html = render_docs(title)
        self.dir = swagger_ui_dir()

    async def page(self, request: Request) -> Response:
        """The Swagger UI page."""
        return HTMLResponse(self.html)

    async def asset(self, request: Request) -> Response:
        """One of Swagger UI's files, or 404."""
        name = request.path_params["name"]
        if name not in ASSETS:
            raise APIError(404, f"No such file: {STATIC_PREFIX}{name}.", code="not_found")
        return FileResponse(self.dir / name, media_type=ASSETS[name],
                            headers={"Cache-Control": "public, max-age=86400"})
