"""The Trace form in a real browser (Debian's Chromium, Playwright) against the whole service
with a real origin behind the edge: a stored object traces as a hit, and "fetch from the
origin" says whether the origin's answer would be stored, without storing it. The fixtures
are test_browser.py's; the targets are this module's own."""

# The fixtures are imported, so the tests' parameters of the same names redefine them.
# ruff: noqa: F811

from __future__ import annotations

import pytest
from aiohttp import web
from playwright.sync_api import Page, expect

from tests.dashboard.live import Live
from tests.dashboard.test_browser import (  # noqa: F401  (fixtures, shared)
    CACHEABLE,
    browser,
    context,
    edge_get,
    live,
    page,
    signed_in,
)

# slow: a real Chromium; not in the quick subset (README)
pytestmark = pytest.mark.slow


def trace(page: Page, url: str, headers: str = "", *, fetch: bool = False) -> None:
    page.get_by_role("link", name="Domains", exact=True).click()
    page.get_by_label("URL", exact=True).fill(url)
    page.get_by_label("Request headers").fill(headers)
    if fetch:
        page.get_by_label("Fetch from the origin").check()
    page.get_by_role("button", name="Trace").click()


def test_the_trace_form_shows_a_hit_then_an_origin_answer_it_would_not_store(
    page: Page, live: Live
) -> None:
    fetched: list[str] = []

    async def stored(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"traced", headers=CACHEABLE)

    async def private(request: web.Request) -> web.StreamResponse:
        fetched.append(request.raw_path)
        return web.Response(body=b"mine", headers={"Cache-Control": "private"})

    live.origin.route("/trace/stored", stored)
    live.origin.route("/trace/private", private)
    edge_get(live, "/trace/stored")
    signed_in(page)

    trace(page, "http://example.com/trace/stored", "Accept: text/html")
    expect(page.get_by_role("heading", name="Trace", exact=True)).to_be_visible()
    expect(page.get_by_test_id("outcome")).to_have_text("hit")
    expect(page.get_by_test_id("why")).to_have_text("stored and fresh")
    expect(page.get_by_test_id("lifetime")).to_have_text("300.0 s")
    expect(page.get_by_test_id("lifetime-source")).to_have_text("origin")
    expect(page.get_by_label("URL", exact=True)).to_have_value("http://example.com/trace/stored")

    trace(page, "http://example.com/trace/private", fetch=True)
    expect(page.get_by_test_id("outcome")).to_have_text("miss")
    expect(page.get_by_test_id("storable")).to_have_text("no")
    expect(page.get_by_test_id("why-not")).to_contain_text("private")
    assert fetched == ["/trace/private"]  # one fetch, and nothing stored from it
    assert "miss" in edge_get(live, "/trace/private") and len(fetched) == 2

    trace(page, "http://example.com/p", "Cookie session")
    expect(page.get_by_role("alert")).to_contain_text("Header line 1 is not “Name: value”")
    expect(page.get_by_test_id("trace-report")).to_have_count(0)
