"""The purge form in a real browser (Debian's Chromium, Playwright) against the whole service
with a real origin behind the edge: preview, Confirm, Cancel, errors, escaping and History.
The fixtures are test_browser.py's; each test uses URLs of its own, so tests sharing the
module's service do not purge each other's entries."""

# The fixtures are imported, so the tests' parameters of the same names redefine them.
# ruff: noqa: F811

from __future__ import annotations

import os
import tempfile
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web
from playwright.sync_api import Dialog, Locator, Page, expect

from tests.dashboard.live import Live
from tests.dashboard.test_browser import (  # noqa: F401  (fixtures, shared)
    CACHEABLE,
    browser,
    context,
    live,
    page,
    signed_in,
)

# slow: a real Chromium; not in the quick subset (README)
pytestmark = pytest.mark.slow

# Where screenshots go, to be looked at (CDN_PROXY_SCREENSHOTS, else the temporary directory).
SCREENSHOTS = Path(os.environ.get("CDN_PROXY_SCREENSHOTS") or tempfile.gettempdir())
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Counter:
    """Origin answers for a set of targets: "<target> v<version>", cacheable."""

    def __init__(self, live: Live, *targets: str, tags: str = "") -> None:
        self.version = 1
        headers = {**CACHEABLE, **({"Surrogate-Key": tags} if tags else {})}

        async def handler(request: web.Request) -> web.StreamResponse:
            body = f"{request.raw_path} v{self.version}".encode()
            return web.Response(body=body, headers=headers)

        for target in targets:
            live.origin.route(target, handler)


def edge(live: Live, path: str) -> tuple[str, str]:
    """GET ``path`` of example.com through the edge: its Cache-Status and body."""
    request = urllib.request.Request(live.edge_url + path, headers={"Host": "example.com"})
    with _DIRECT.open(request, timeout=10) as response:
        return str(response.headers["Cache-Status"]), response.read().decode()


def warm(live: Live, *paths: str) -> None:
    for path in paths:
        edge(live, path)
        assert edge(live, path) == ("cdn-proxy; hit", f"{path} v1"), path


def purge_form(page: Page, domain: str = "example.com") -> Locator:
    page.get_by_role("link", name="Domains").click()
    row = page.locator(f'tr[data-purge-for="{domain}"]')
    row.get_by_text("Purge…").click()
    return row


def fill(row: Locator, kind: str, items: str, *, soft: bool = False) -> None:
    row.get_by_label("Kind").select_option(label=kind)
    row.get_by_label("Items, one per line").fill(items)
    if soft:
        row.get_by_label("Soft").check()
    row.get_by_role("button", name="Preview purge").click()


def test_a_prefix_purge_is_previewed_then_confirmed(page: Page, live: Live) -> None:
    counter = Counter(live, "/b1/a.css", "/b1/b.js", "/b1x")
    warm(live, "/b1/a.css", "/b1/b.js", "/b1x")
    counter.version = 2
    fill(purge_form(signed_in(page)), "Prefixes", "/b1/")

    expect(page.get_by_role("heading", name="Purge preview")).to_be_visible()
    expect(page.get_by_test_id("amount")).to_contain_text("2 entries")
    expect(page.get_by_test_id("sample").get_by_role("listitem")).to_have_text(
        ["/b1/a.css", "/b1/b.js"], ignore_case=False
    )
    assert edge(live, "/b1/a.css") == ("cdn-proxy; hit", "/b1/a.css v1")  # nothing changed yet

    page.get_by_role("button", name="Confirm purge").click()
    expect(page.get_by_role("heading", name="Purge receipt")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("purged 1 prefix of example.com")
    expect(page.get_by_test_id("amount")).to_contain_text("not counted, among the domain's")
    assert edge(live, "/b1/a.css")[1] == "/b1/a.css v2"
    assert edge(live, "/b1/b.js")[1] == "/b1/b.js v2"
    assert edge(live, "/b1x") == ("cdn-proxy; hit", "/b1x v1")

    page.get_by_role("link", name="History").click()
    page.get_by_label("Kind").select_option("prefix")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.history tbody tr")
    expect(rows.first.get_by_test_id("kind")).to_have_text("prefix")
    expect(rows.nth(1).get_by_test_id("kind")).to_have_text("prefix dry run")
    rows.first.get_by_text("Receipt").click()
    expect(rows.first.locator("details")).to_contain_text("purged 1 prefix of example.com")


def test_a_soft_tag_purge_says_it_marks_stale(page: Page, live: Live) -> None:
    counter = Counter(live, "/b2/one", tags="b2-tag")
    warm(live, "/b2/one")
    counter.version = 2
    fill(purge_form(signed_in(page)), "Tags", "b2-tag", soft=True)
    expect(page.get_by_text("A soft purge marks them stale")).to_be_visible()
    expect(page.get_by_test_id("kind")).to_have_text("Tags (soft)")
    page.get_by_role("button", name="Confirm purge").click()
    expect(page.get_by_role("status")).to_contain_text("soft-purged 1 tag of example.com")
    assert edge(live, "/b2/one")[1] == "/b2/one v2"  # revalidated: the origin moved on


def test_cancel_leaves_everything_as_it_was(page: Page, live: Live) -> None:
    Counter(live, "/b3")
    warm(live, "/b3")
    fill(purge_form(signed_in(page)), "URLs", "/b3")
    expect(page.get_by_test_id("amount")).to_contain_text("1 entry")
    page.get_by_role("link", name="Cancel").click()
    expect(page.get_by_role("heading", name="Domains")).to_be_visible()
    assert edge(live, "/b3") == ("cdn-proxy; hit", "/b3 v1")


def test_bad_input_shows_the_error_in_the_open_form(page: Page, live: Live) -> None:
    row = purge_form(signed_in(page), "other.test")
    fill(row, "Tags", "a,b\nfine")
    row = page.locator('tr[data-purge-for="other.test"]')
    expect(row.get_by_role("alert")).to_contain_text("Tag 'a,b' must be")
    expect(row.get_by_label("Items, one per line")).to_have_value("a,b\nfine")
    expect(row.get_by_label("Kind")).to_have_value("tag")


def test_items_with_markup_are_shown_as_text(page: Page, live: Live) -> None:
    dialogs: list[str] = []

    def opened(dialog: Dialog) -> None:  # a script that ran would open one
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", opened)
    markup = '/b4"><svg/onload=alert(1)><script>alert(2)</script>'
    fill(purge_form(signed_in(page)), "URLs", markup)
    expect(page.get_by_test_id("items")).to_have_text(markup)
    page.get_by_role("button", name="Confirm purge").click()
    expect(page.get_by_test_id("items")).to_have_text(markup)
    page.get_by_role("link", name="History").click()
    expect(page.locator("table.history tbody tr").first).to_contain_text('/b4"><svg')
    assert dialogs == []
    assert page.locator("svg").count() == 0


def test_history_fits_a_1280_px_window(page: Page, live: Live) -> None:
    """Issue 34: the History table ran 70 px past a 1280 px window (a horizontal scroll bar
    on a laptop). With a purge, its dry run and a soft purge in it, nothing passes the
    window's right edge."""
    Counter(live, "/w1/aVeryLongStylesheetNameWithNoPlaceToBreakIt.min.css", "/w1/b.js")
    warm(live, "/w1/aVeryLongStylesheetNameWithNoPlaceToBreakIt.min.css", "/w1/b.js")
    page.set_viewport_size({"width": 1280, "height": 800})
    row = purge_form(signed_in(page))
    fill(
        row, "URLs", "/w1/aVeryLongStylesheetNameWithNoPlaceToBreakIt.min.css\n/w1/b.js", soft=True
    )
    page.get_by_role("button", name="Confirm purge").click()
    expect(page.get_by_role("heading", name="Purge receipt")).to_be_visible()
    page.get_by_role("link", name="History").click()
    expect(page.locator("table.history tbody tr").first.get_by_test_id("kind")).to_contain_text(
        "url"
    )
    page.screenshot(path=str(SCREENSHOTS / "history-1280.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    # The table within the page's column too (main's content box), not only the window.
    spill = page.evaluate(
        """() => {
            const table = document.querySelector('table.history');
            const main = table.closest('main');
            const inner = main.getBoundingClientRect().right
                - parseFloat(getComputedStyle(main).paddingRight);
            return table.getBoundingClientRect().right - inner;
        }"""
    )
    assert width <= 1280 and spill <= 0.5, (width, spill)
