"""A browser gets HTTP/2 from the edge (issue 26): Debian's Chromium, driven by Playwright,
loads a page and its resources over the TLS listener; every one comes over h2 (the protocol
Chromium reports), the page is byte for byte what HTTP/1.1 gets, and its resources are hits
the second time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import async_playwright

from proxy.process.service import Service, running
from tests.conftest import Origin
from tests.dashboard.live import CHROMIUM, CHROMIUM_ARGS
from tests.edge.tls_support import Certificates, get, pair_keys, tls_config

pytestmark = pytest.mark.slow

PAGE = b"""<!doctype html>
<html><head><title>h2</title><link rel="stylesheet" href="/style.css">
<link rel="icon" href="data:,"></head>
<body><p id="p">over HTTP/2</p><script src="/app.js"></script></body></html>
"""
STYLE = b"p { color: green }\n"
SCRIPT = b"document.getElementById('p').dataset.ran = 'yes';\n"
CACHEABLE = "max-age=60"


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def service(tmp_path: Path, origin: Origin, certs: Certificates) -> AsyncIterator[Service]:
    for path, body, kind in (
        ("/", PAGE, "text/html"),
        ("/style.css", STYLE, "text/css"),
        ("/app.js", SCRIPT, "text/javascript"),
    ):
        headers = {"Cache-Control": CACHEABLE, "Content-Type": kind}
        origin.reply(path, body, headers=headers)
    config = tls_config(tmp_path, origin.url, edge=pair_keys(certs.issue("example.com")))
    async with running(config) as running_service:
        yield running_service


async def test_chromium_loads_a_page_over_http2(
    service: Service, origin: Origin, certs: Certificates
) -> None:
    assert service.tls_url is not None
    port = service.tls_url.rpartition(":")[2]
    url = f"https://example.com:{port}/"
    args = [*CHROMIUM_ARGS, "--host-resolver-rules=MAP example.com 127.0.0.1"]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=args, headless=True
        )
        try:
            context = await browser.new_context(ignore_https_errors=True)
            page = await context.new_page()
            for visit in range(2):
                response = await page.goto(url)
                assert response is not None and response.status == 200
                assert await response.body() == PAGE
                protocols = await page.evaluate(
                    "() => performance.getEntries()"
                    ".filter(e => e.nextHopProtocol !== undefined)"
                    ".map(e => [new URL(e.name).pathname, e.nextHopProtocol])"
                )
                assert sorted(protocols) == [["/", "h2"], ["/app.js", "h2"], ["/style.css", "h2"]]
                assert await page.get_attribute("#p", "data-ran") == "yes"  # the script ran
                if visit == 1:  # a new navigation (not a reload, which revalidates)
                    assert response.headers["cache-status"] == "cdn-proxy; hit"
        finally:
            await browser.close()
    # The same page over HTTP/1.1 (aiohttp offers no ALPN), to the byte.
    async with aiohttp.ClientSession() as session:
        status, headers, body = await get(
            session, service.tls_url + "/", certs.client(), sni="example.com"
        )
    assert (status, body, headers["Cache-Status"]) == (200, PAGE, "cdn-proxy; hit")
    assert [origin.count(path) for path in ("/", "/style.css", "/app.js")] == [1, 1, 1]
