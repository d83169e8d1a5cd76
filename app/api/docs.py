"""The API's documentation pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), with their
scripts and styles served by the service itself, so that they work on a network with no
internet.

The files are those fastapi-offline ships (its ``static`` directory, refreshed with each
release), mounted with Starlette's ``StaticFiles(packages=...)``; the pages are FastAPI's
own (``get_swagger_ui_html``, ``get_redoc_html``) pointed at them. Each page is sent with a
``Content-Security-Policy`` that lets it load only from this origin: ReDoc's bundle loads
Redocly's logo from Redocly's CDN, and a browser that obeys the policy never asks for it.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
ASSETS_URL = "/docs/assets"

# Scripts and styles inline (the pages' start-up script; both UIs style elements inline),
# images as data: URIs, ReDoc's search in a worker made from a blob: nothing from elsewhere.
POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; base-uri 'none'; form-action 'self'"
)
# Swagger UI's validator badge sends the OpenAPI document's URL to swagger.io: off.
SWAGGER_UI_PARAMETERS = {"validatorUrl": None}


def add_docs(app: FastAPI) -> None:
    """Serve the documentation pages of ``app`` and their files (the app is made with
    ``docs_url=None, redoc_url=None``, so that FastAPI's own pages, which load from a CDN,
    are not served)."""
    openapi_url = app.openapi_url
    if openapi_url is None:
        return
    title = app.title
    app.mount(ASSETS_URL, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-assets")

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = _root_path(request)
        return _with_policy(
            get_swagger_ui_html(
                openapi_url=root + openapi_url,
                title=f"{title} - Swagger UI",
                swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
                oauth2_redirect_url=root + OAUTH2_REDIRECT_URL,
                swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
            )
        )

    async def swagger_ui_redirect(request: Request) -> HTMLResponse:
        return _with_policy(get_swagger_ui_oauth2_redirect_html())

    async def redoc(request: Request) -> HTMLResponse:
        root = _root_path(request)
        return _with_policy(
            get_redoc_html(
                openapi_url=root + openapi_url,
                title=f"{title} - ReDoc",
                redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )

    app.add_route(DOCS_URL, swagger_ui, include_in_schema=False)
    app.add_route(OAUTH2_REDIRECT_URL, swagger_ui_redirect, include_in_schema=False)
    app.add_route(REDOC_URL, redoc, include_in_schema=False)


def _root_path(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def _with_policy(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = POLICY
    return page
