"""The page a share link opens, in headless Chromium (Debian's, driven by Playwright): each
citation's highlight covers the cited characters, for a PDF and for a text document; nothing
is loaded from another origin."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from PIL import Image
from playwright import sync_api as playwright

from tests.e2e.test_seeing import (
    QUESTION,
    _ask,
    _citations,
    _covered,
    _pdf,
    _pdfium_centres,
    _share,
    _text,
)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def page(client: httpx.Client) -> Iterator[Any]:
    """A phone-sized tab that may load only from Citegate's origin. Started after ``client``:
    Playwright's driver keeps an event loop running in this thread while it is open."""
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield from _tab(browser, client)
        browser.close()


def _tab(browser: Any, client: httpx.Client) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    tab = context.new_page()
    origin = str(client.base_url)
    foreign: list[str] = []

    def only_this_origin(route: Any) -> None:
        if route.request.url.startswith(origin):
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    tab.route("**/*", only_this_origin)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert not foreign and not errors


def test_each_pdf_citation_highlights_its_words(
    page: Any, client: httpx.Client, tmp_path: Any
) -> None:
    document = _pdf(client)
    answer = _ask(client, QUESTION, document["id"])
    citations = _citations(answer)
    assert citations
    page.goto(_share(client, answer["id"]))
    for number, citation in enumerate(citations, start=1):
        page.keyboard.press("Tab")  # by keyboard: the markers come first in tab order
        marker = page.locator(f'a.cite[data-n="{number}"]')
        marker.focus()
        page.keyboard.press("Enter")
        figure = page.locator(".viewer .page").first
        figure.locator("img").wait_for()
        page.wait_for_function("() => [...document.images].every((i) => i.complete)")
        shown = page.evaluate(
            """() => [...document.querySelectorAll('.viewer .page')].flatMap((figure, i) => {
                const area = figure.querySelector('img').getBoundingClientRect();
                return [...figure.querySelectorAll('.box')].map((box) => {
                    const r = box.getBoundingClientRect();
                    return {page: i, x0: (r.left - area.left) / area.width,
                            y0: (r.top - area.top) / area.height,
                            x1: (r.right - area.left) / area.width,
                            y1: (r.bottom - area.top) / area.height};
                });
            })"""
        )
        first = citation["span"]["start_page"]
        boxes = [{**box, "page": box["page"] + first} for box in shown]
        assert boxes and _covered(_pdfium_centres(citation), boxes)
        assert page.locator(".viewer h2").inner_text().startswith(f"[{number}]")
        # The screenshot shows the highlight: the box's orange outline is on the picture.
        box = page.locator(".viewer .box").first
        box.scroll_into_view_if_needed()
        shot = tmp_path / f"citation-{number}.png"
        box.screenshot(path=str(shot))
        picture = Image.open(shot).convert("RGB")
        pixels = picture.tobytes()
        orange = sum(
            1
            for at in range(0, len(pixels), 3)
            if pixels[at] > 200 and 60 < pixels[at + 1] < 160 and pixels[at + 2] < 60
        )
        assert orange > 0


def test_a_text_citation_marks_its_passage(page: Any, client: httpx.Client) -> None:
    document = _text(client)
    answer = _ask(client, "What colour is the sky?", document["id"])
    [citation, *_] = _citations(answer)
    page.goto(_share(client, answer["id"]))
    page.locator('a.cite[data-n="1"]').click()
    mark = page.locator(".viewer .text mark")
    span = citation["span"]
    assert (
        mark.inner_text()
        == document_text(client, document["id"])[span["start_char"] : span["end_char"]]
    )
    assert mark.is_visible()


def document_text(client: httpx.Client, document_id: str) -> str:
    chunks = client.get(f"/v1/documents/{document_id}/chunks", params={"limit": 100}).json()
    return "".join(chunk["text"] for chunk in chunks["data"])


def test_an_expired_or_unknown_link_is_a_plain_page(page: Any, client: httpx.Client) -> None:
    response = page.goto(f"{client.base_url}/share/not-a-token")
    assert response.status == 404
    assert page.locator("h1").inner_text() == "Not found"
