"""The dashboard's pages on a real node with ``workers = 2`` (issue 34 §3): History after a dry
run (B1: it answered 500), the purge preview's words for the edge processes (B5: they must
agree with ``cdn-proxy purge``'s), and the Domains page (B8).

Real processes: the node (``cdn-proxy serve``) with its workers and embedded Valkey, an admin
made with ``cdn-proxy admin create``, a real origin; the dashboard is read over HTTP with a
cookie jar, as a browser signs in and posts its forms.

The tests share the module's node and signed-in session (issue 34: a node of two workers
takes seconds to start); each reads what its own steps changed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from tests.conftest import Origin
from tests.dashboard.support import ADMIN, PASSWORD, Element, parse_html
from tests.nodes import ENV, Node, write_config
from tests.polling import until
from tests.test_shared_tier import get_fresh, serve, served

# slow: a node of real processes. One event loop for the module: its node outlives each test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
CLI = (sys.executable, "-m", "proxy")


@dataclass
class Browser:
    """A signed-in dashboard session: GET and POST return the status and the parsed page."""

    client: aiohttp.ClientSession
    node: Node
    origin: Origin

    @property
    def api(self) -> str:
        return self.node.api

    async def get(self, path: str) -> tuple[int, Element]:
        async with self.client.get(self.api + path) as response:
            return response.status, parse_html(await response.text())

    async def post(self, path: str, fields: dict[str, str]) -> tuple[int, Element]:
        csrf = await self.csrf()
        async with self.client.post(self.api + path, data={"csrf": csrf, **fields}) as response:
            return response.status, parse_html(await response.text())

    async def csrf(self, path: str = "/dashboard/domains") -> str:
        status, page = await self.get(path)
        assert status == 200, page.text
        return page.find_all("input", name="csrf")[0].attrs["value"]


async def admin(config: Path) -> None:
    made = await asyncio.create_subprocess_exec(
        *CLI,
        "admin",
        "create",
        ADMIN,
        "--password-stdin",
        "--config",
        str(config),
        stdin=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=ENV,
    )
    _, err = await made.communicate((PASSWORD + "\n").encode())
    assert made.returncode == 0, err.decode()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def signed_in(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Browser]:
    directory = tmp_path_factory.mktemp("node")
    async with served(Origin()) as origin:
        serve(origin, *(f"/page/{n}" for n in range(4)))
        config = write_config(
            directory,
            origin.url,
            workers=2,
            cache=f'disk_path = "{directory / "cache"}"\ndisk_max_bytes = "64MiB"',
            extra='backup_origins = ["http://127.0.0.1:9"]',
        )
        await admin(config)
        node = await Node.start(config)
        try:
            jar = aiohttp.CookieJar(unsafe=True)  # cookies of 127.0.0.1
            async with aiohttp.ClientSession(cookie_jar=jar) as client:
                async with client.get(node.api + "/dashboard/sign-in") as response:
                    form = parse_html(await response.text())
                signin = {
                    "csrf": form.find("input", name="csrf").attrs["value"],
                    "username": ADMIN,
                    "password": PASSWORD,
                }
                async with client.post(node.api + "/dashboard/sign-in", data=signin) as response:
                    assert response.status == 200, await response.text()
                yield Browser(client, node, origin)
        finally:
            await node.kill()


async def history_rows(browser: Browser) -> list[Element]:
    """The records the History page shows, newest first (not its "Nothing has been cleared
    yet" row)."""
    status, page = await browser.get("/dashboard/history")
    assert status == 200, page.text
    rows: list[Element] = page.find("table", class_="history").find("tbody").find_all("tr")
    return [row for row in rows if row.find_all(data_testid="kind")]


async def test_history_shows_a_dry_run_of_a_node_with_workers(signed_in: Browser) -> None:
    """B1 and B5: the purge preview names the edge processes that counted, in the words of
    ``cdn-proxy purge`` ("counted in the caches of 2 of 2 live edge processes"), and History
    shows the dry run (it answered 500: the record has no ``acked``)."""
    node = signed_in.node
    for n in range(4):
        assert (await get_fresh(node, f"/page/{n}"))[0] == 200
    before = len(await history_rows(signed_in))
    status, page = await signed_in.post(
        "/dashboard/domains/purge",
        {"domain": "example.com", "kind": "prefix", "items": "/page/"},
    )
    assert status == 200, page.text
    edge = page.find(data_testid="edge").text
    assert edge == "counted in the caches of 2 of 2 live edge processes", edge
    rows = await history_rows(signed_in)
    assert len(rows) == before + 1  # the dry run's record, and nothing else
    row = rows[0]
    assert "dry run" in row.find(data_testid="kind").text
    assert row.find(data_testid="edge").text == "2 of 2 counted"


def cell(page: Element, domain: str, test_id: str) -> str:
    row = page.find("tr", data_domain=domain)
    return row.find(data_testid=test_id).text


async def test_the_domains_page_after_a_clear_shows_what_can_still_answer(
    signed_in: Browser,
) -> None:
    """B8: right after its own "Cache cleared" banner the Domains page showed the entries of
    the edge processes' last reports, made before the clear ("12 entries, 112.0 KiB"). What a
    report made before the clear counts can never answer again: it now counts none. The page
    also names every origin server, and says where the shared tier (disk) is counted."""
    node, origin = signed_in.node, signed_in.origin

    async def stored() -> bool:
        for n in range(4):
            await get_fresh(node, f"/page/{n}")
        _, page = await signed_in.get("/dashboard/domains")
        return int(cell(page, "example.com", "entries")) >= 4

    await until(stored, within=30, every=0.2)
    csrf = await signed_in.csrf()
    async with signed_in.client.post(
        node.api + "/dashboard/domains/clear", data={"csrf": csrf, "domain": "example.com"}
    ) as response:
        assert response.status == 200 and "cleared=" in str(response.url)
        page = parse_html(await response.text())
    assert page.find("p", class_="notice").text == "Cache cleared for example.com."
    assert cell(page, "example.com", "entries") == "0"
    assert cell(page, "example.com", "bytes") == "0 B"
    origins = cell(page, "example.com", "origins")
    assert origin.url in origins and "http://127.0.0.1:9 (backup)" in origins
    assert "shared tier" in page.find(data_testid="disk-note").text


async def test_the_nodes_page_says_clear_numbers_as_the_times_they_stand_for(
    signed_in: Browser,
) -> None:
    """B3 (in part): the Nodes page showed each process's last clear as a 16-digit number
    (a fleet numbers its clears by Valkey's clock in microseconds). It says the time that
    number stands for, to the millisecond, with the number itself in the cell's title."""
    csrf = await signed_in.csrf()
    async with signed_in.client.post(
        signed_in.api + "/dashboard/domains/clear", data={"csrf": csrf, "domain": "example.com"}
    ) as response:
        assert response.status == 200

    async def shown() -> list[Element]:
        _, page = await signed_in.get("/dashboard/nodes")
        cells = page.find_all(data_testid="applied")
        return cells if len(cells) == 2 and all("UTC" in c.text for c in cells) else []

    cells = await until(shown, within=30, every=0.2)
    for cell in cells:
        number = int(cell.attrs["title"].removeprefix("clear number "))
        assert number > 10**15
        stamp = datetime.fromtimestamp(number / 1_000_000, UTC)
        assert cell.text == stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


async def test_a_purge_with_workers_shows_one_series_of_numbers(signed_in: Browser) -> None:
    """B3 (in part): the preview of a dry run showed one worker's own purge number (3), the
    receipt the fleet's (1795943780587952). The preview names the fleet's latest number,
    which the purge's is above; both are said as the time they stand for."""
    node = signed_in.node
    for n in range(4):
        await get_fresh(node, f"/page/{n}")
    fields = {"domain": "example.com", "kind": "url", "items": "/page/1"}
    status, preview = await signed_in.post("/dashboard/domains/purge", fields)
    assert status == 200, preview.text
    shown = preview.find(data_testid="number")
    before = int(shown.attrs["title"].removeprefix("purge number "))
    assert before > 10**15 and shown.text.endswith(" UTC"), shown
    confirm = {"domain": "example.com", "kind": "url", "item": "/page/1"}
    status, receipt = await signed_in.post("/dashboard/domains/purge/confirm", confirm)
    assert status == 200, receipt.text
    cell = receipt.find(data_testid="number")
    number = int(cell.attrs["title"].removeprefix("purge number "))
    assert number > before
    stamp = datetime.fromtimestamp(number / 1_000_000, UTC)
    assert cell.text == stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
    newest = (await history_rows(signed_in))[0]
    assert f"purge {cell.text}" in newest.find(data_testid="receipt").text
