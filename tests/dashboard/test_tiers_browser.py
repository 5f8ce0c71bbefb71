"""The Overview and Nodes pages show both tiers of a node with ``workers = 2`` (issue 23 §7-8)
in a real browser (Debian's Chromium, Playwright): the memory tier's and the shared tier's
objects and hits, summed over the two workers, each worker's own row, and the shared tier
degraded once its directory is gone. On a memory-only node, the Trace form lists each
worker's outcome (decision 0038).

Real processes: the node (``cdn-proxy serve``) with its workers and embedded Valkey, an admin
made with ``cdn-proxy admin create``, a real origin on its own event loop in a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import Origin
from tests.dashboard.live import ADMIN, PASSWORD, launch
from tests.nodes import ENV, write_config

# slow: a node of real processes and a real Chromium; not in the quick subset (README)
pytestmark = pytest.mark.slow

TARGETS = [f"/tiered/{n}" for n in range(5)]
REQUESTS = 6  # per target, each on a connection of its own (the kernel picks the worker)
CLI = (sys.executable, "-m", "proxy")
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@contextmanager
def origin_in_thread() -> Iterator[Origin]:
    """A real origin answering every target cacheably, on an event loop of its own."""
    origin = Origin()
    loop = asyncio.new_event_loop()
    ready: concurrent.futures.Future[web.AppRunner] = concurrent.futures.Future()

    async def cacheable(request: web.Request) -> web.StreamResponse:
        return web.Response(
            text=f"body of {request.path}", headers={"Cache-Control": "max-age=600"}
        )

    async def start() -> web.AppRunner:
        origin.default = cacheable
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", origin.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        origin.url = f"http://{host}:{port}"
        return runner

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            ready.set_result(loop.run_until_complete(start()))
        except BaseException as exc:  # reported to the test through the future
            ready.set_exception(exc)
            return
        loop.run_forever()

    thread = threading.Thread(target=main, name="origin", daemon=True)
    thread.start()
    runner = ready.result(30)
    try:
        yield origin
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@contextmanager
def node(config: Path) -> Iterator[dict[str, str]]:
    """``cdn-proxy serve`` in its own process group: the addresses it printed."""
    process = subprocess.Popen(
        [*CLI, "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=ENV,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        addresses: dict[str, str] = {}
        while len(addresses) < 2:
            line = process.stdout.readline().decode()
            assert line, "the node exited before it was listening"
            name, _, url = line.strip().partition(" ")
            addresses[name] = url
        yield addresses
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def with_admin(config: Path) -> None:
    made = subprocess.run(
        [*CLI, "admin", "create", ADMIN, "--password-stdin", "--config", str(config)],
        input=PASSWORD + "\n",
        capture_output=True,
        text=True,
        env=ENV,
        check=False,
    )
    assert made.returncode == 0, made.stderr


def signed_in(browser: Browser, api: str) -> Page:
    page = browser.new_context(base_url=api).new_page()
    page.goto("/dashboard/sign-in")
    page.get_by_label("Username").fill(ADMIN)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    return page


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    tmp_path = tmp_path_factory.mktemp("tiers")
    with origin_in_thread() as origin:
        config = write_config(
            tmp_path,
            origin.url,
            workers=2,
            cache=f'disk_path = "{tmp_path / "cache"}"\ndisk_max_bytes = "64MiB"',
        )
        with_admin(config)
        with node(config) as addresses:
            yield addresses, tmp_path / "cache"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    expect.set_options(timeout=15_000)
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


def fresh_get(edge: str, target: str) -> str:
    """One GET on a connection of its own: its Cache-Status."""
    request = urllib.request.Request(edge + target, headers={"Host": "example.com"})
    with _DIRECT.open(request, timeout=10) as response:
        response.read()
        return str(response.headers.get("Cache-Status", ""))


def shows(page: Page, path: str, test_id: str, scope: str, wanted: str) -> None:
    """Load ``path`` until the cell ``test_id`` in ``scope`` reads ``wanted``: the workers
    report every 0.5 s and the node reads them every second (a deadline, not a sleep)."""
    deadline = time.monotonic() + 15
    while True:
        page.goto(path)
        cell = page.locator(scope).get_by_test_id(test_id)
        if cell.count() and cell.first.inner_text().strip() == wanted:
            return
        if time.monotonic() > deadline:
            expect(cell.first).to_have_text(wanted)  # fails, naming what it shows
        page.wait_for_timeout(200)  # between two loads of the page: a poll's period


def test_overview_and_nodes_show_both_tiers_summed_over_the_workers(
    browser: Browser, tiered: tuple[dict[str, str], Path]
) -> None:
    addresses, cache = tiered
    statuses = [fresh_get(addresses["edge"], t) for t in TARGETS for _ in range(REQUESTS)]
    disk = statuses.count('cdn-proxy; hit; detail="disk"')
    hits = sum(1 for s in statuses if s.startswith("cdn-proxy; hit"))
    assert disk >= 1 and hits == len(statuses) - len(TARGETS), statuses
    page = signed_in(browser, addresses["api"])

    shows(page, "/dashboard", "hits", "tr[data-tier=shared]", str(disk))
    shows(page, "/dashboard", "hits", "tr[data-tier=memory]", str(hits - disk))
    expect(page.locator("tr[data-tier=shared]").get_by_test_id("entries")).to_have_text(
        str(len(TARGETS))
    )
    expect(page.locator("tr[data-tier=shared]").get_by_test_id("state")).to_have_text("ok")
    expect(page.get_by_test_id("collapsed")).to_have_text("0")

    # The Nodes page: the same tiers, and each worker's own part.
    page.get_by_role("link", name="Nodes", exact=True).click()
    expect(page.locator("tr[data-tier=shared]").get_by_test_id("hits")).to_have_text(str(disk))
    rows = page.locator("table.nodes tbody tr")
    expect(rows).to_have_count(2)
    per_worker = [int(rows.nth(n).get_by_test_id("disk-hits").inner_text()) for n in range(2)]
    assert sum(per_worker) == disk, per_worker

    # The Domains page: the origin server's requests, summed over the workers (one per fill).
    page.get_by_role("link", name="Domains", exact=True).click()
    server = page.locator("table.origin-servers tbody tr")
    expect(server.get_by_test_id("requests")).to_have_text(str(len(TARGETS)))
    expect(server.get_by_test_id("state")).to_have_text("up")

    # The directory gone: both pages say the shared tier is stopped, and why.
    shutil.rmtree(cache)
    page.goto("/dashboard")
    expect(page.get_by_test_id("tier-degraded")).to_contain_text("stopped")
    expect(page.get_by_test_id("tier-degraded")).to_contain_text("cache directory deleted")
    expect(page.locator("tr[data-tier=shared]").get_by_test_id("state")).to_have_text("stopped")
    page.goto("/dashboard/nodes")
    expect(page.get_by_test_id("tier-degraded")).to_contain_text("stopped")
    page.context.close()


def test_the_trace_form_of_a_memory_only_node_lists_each_workers_outcome(
    browser: Browser, tmp_path: Path
) -> None:
    with origin_in_thread() as origin:
        config = write_config(tmp_path, origin.url, workers=2)
        with_admin(config)
        with node(config) as addresses:
            assert fresh_get(addresses["edge"], "/traced") == "cdn-proxy; fwd=uri-miss; stored"
            page = signed_in(browser, addresses["api"])
            page.get_by_role("link", name="Domains", exact=True).click()
            page.get_by_label("URL", exact=True).fill("http://example.com/traced")
            page.get_by_role("button", name="Trace").click()
            # One worker filled it: the next request's worker decides.
            expect(page.get_by_test_id("outcome")).to_have_text("mixed")
            workers = page.get_by_test_id("workers").locator("tbody tr")
            expect(workers).to_have_count(2)
            outcomes = sorted(workers.nth(n).locator("td").nth(1).inner_text() for n in range(2))
            assert outcomes == ["hit", "miss"], outcomes
            page.context.close()
