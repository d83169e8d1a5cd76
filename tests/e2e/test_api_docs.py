"""/docs (Swagger UI) and /redoc work with no internet: the pages name only the service's own
URLs, every asset they load is served by it, their Content-Security-Policy lets a browser load
nothing from elsewhere, and in headless Chromium that may load nothing from another origin both
pages draw the API."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from playwright import sync_api as playwright

from tests.e2e.test_viewer_browser import CHROMIUM, _tab

PAGES = ("/docs", "/redoc")
# Any absolute URL, or one relative to the scheme (//host/...), in an attribute or a script.
_EXTERNAL = re.compile(r"(?:https?:)?//[^\s'\"<>]+", re.I)


class _References(HTMLParser):
    """The URLs a page makes the browser load: scripts, stylesheets, icons, images, and the
    OpenAPI document ReDoc reads."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and name in {"src", "href", "spec-url"}:
                self.urls.append(value)


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    parser.close()
    return parser.urls


@pytest.mark.parametrize("path", PAGES)
def test_the_page_and_its_assets_come_from_the_service(client: httpx.Client, path: str) -> None:
    page = client.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and not _EXTERNAL.findall(policy)
    assert _EXTERNAL.findall(page.text) == []
    references = _references(page.text)
    assert any(url.endswith(".js") for url in references), references
    base = str(client.base_url) + path
    for url in references:
        absolute = urljoin(base, url)
        assert urlsplit(absolute).netloc == urlsplit(base).netloc, url
        asset = client.get(absolute)
        assert asset.status_code == 200, url
        assert asset.content, url
        if url.endswith(".js"):
            assert "javascript" in asset.headers["content-type"], url
        elif url.endswith(".css"):
            assert asset.headers["content-type"].startswith("text/css"), url


def test_swagger_ui_loads_the_openapi_document_of_the_service(client: httpx.Client) -> None:
    page = client.get("/docs").text
    (spec_url,) = re.findall(r"url: '([^']*)'", page)
    assert spec_url == "/openapi.json"
    assert client.get(spec_url).json()["info"]["title"] == "Citegate"
    assert '"validatorUrl": null' in page  # no badge asked of an outside validator


def test_a_missing_asset_is_a_problem(client: httpx.Client) -> None:
    asset = client.get(urljoin(str(client.base_url), _asset_prefix(client) + "nothing.js"))
    assert asset.status_code == 404
    assert asset.headers["content-type"] == "application/problem+json"
    assert asset.json()["code"] == "not_found"


def _asset_prefix(client: httpx.Client) -> str:
    script = next(url for url in _references(client.get("/docs").text) if url.endswith(".js"))
    return script.rsplit("/", 1)[0] + "/"


@pytest.fixture
def tab(client: httpx.Client) -> Iterator[Any]:
    """A wide tab that may load only from Citegate's origin (any other request fails it). The
    console's errors must all be the page's policy refusing another origin (ReDoc's bundle
    asks for Redocly's logo): nothing else may go wrong."""
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield from _watched(_tab(browser, client), str(client.base_url))
        browser.close()


def _watched(tabs: Iterator[Any], origin: str) -> Iterator[Any]:
    console: list[str] = []
    for tab in tabs:
        tab.set_viewport_size({"width": 1280, "height": 900})  # ReDoc's menu shown
        tab.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        yield tab
    for error in console:
        refused = re.search(r"(?:Refused to load|Loading) the \w+ '([^']*)'", error)
        assert refused and not refused.group(1).startswith(origin), error


def test_swagger_ui_draws_the_api_offline(tab: Any, client: httpx.Client) -> None:
    tab.goto(f"{client.base_url}/docs")
    title = tab.locator(".swagger-ui .info .title")
    title.wait_for()
    assert title.inner_text().startswith("Citegate")
    tab.locator("#operations-documents-listDocuments").wait_for()


def test_redoc_draws_the_api_offline(tab: Any, client: httpx.Client) -> None:
    tab.goto(f"{client.base_url}/redoc")
    heading = tab.locator("h1")
    heading.first.wait_for()
    assert heading.first.inner_text().startswith("Citegate")
    tab.locator("h2", has_text="List documents, newest first").wait_for()
    tab.locator("input[placeholder='Search...']").fill("chunks")  # search runs in a worker
    tab.locator("[role=search] li", has_text="chunks").first.wait_for(state="attached")
