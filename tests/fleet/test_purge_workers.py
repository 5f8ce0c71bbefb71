"""Purges through the fleet on real processes: ``cdn-proxy serve`` with two edge workers and
its embedded Valkey, a real origin whose bodies carry a version the test bumps, and purges
sent to the node's ``POST /api/v1/cdn/purge`` with a token. After the 200, no read of a
covered page gets its old version, on either worker; the pages it does not cover are still
hits on both (the origin sees no new request for them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, cli, write_config

# slow: nodes of several worker processes; not in the quick subset (README)
pytestmark = pytest.mark.slow

HOST = {"Host": "example.com"}
CONNECTIONS = 200  # fresh connections to reach both workers (the kernel spreads them)
PAGES = {"/assets/a.css": "t-a", "/assets/b.css": "t-b", "/index.html": "t-index"}


class Pages:
    """Origin routes whose body is their current version, tagged with Surrogate-Key."""

    def __init__(self, origin: Origin) -> None:
        self.versions = dict.fromkeys(PAGES, 1)
        for target in PAGES:
            origin.route(target, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        target = request.path
        headers = {"Cache-Control": "max-age=600", "Surrogate-Key": PAGES[target]}
        return web.Response(text=f"v{self.versions[target]}", headers=headers)


@pytest.fixture
async def config(tmp_path: Path, origin: Origin) -> Path:
    return write_config(tmp_path, origin.url, workers=2)


@pytest.fixture
async def token(config: Path) -> str:
    status, out, err = await cli(
        "token", "create", "deploy", "--all-domains", "--config", str(config)
    )
    assert status == 0, err
    return out.strip()


@pytest.fixture
async def node(config: Path, token: str) -> AsyncIterator[Node]:
    started = await Node.start(config)
    yield started
    await started.kill()


async def purge(node: Node, token: str, body: dict[str, object]) -> dict[str, object]:
    """POST ``body`` to the node's purge API: its receipt, after checking the 200."""
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            node.api + "/api/v1/cdn/purge",
            json={"domain": "example.com", **body},
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        receipt = await response.json(content_type=None)
        assert response.status == 200, receipt
        assert isinstance(receipt, dict)
        return receipt


async def read(node: Node, target: str) -> tuple[str, str]:
    """One GET on a connection of its own (either worker): body and Cache-Status."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(node.edge + target, headers=HOST) as response,
    ):
        assert response.status == 200
        assert "Surrogate-Key" not in response.headers
        return await response.text(), response.headers.get("Cache-Status", "")


async def fill_both_workers(node: Node, origin: Origin) -> Pages:
    """Every page with v1 in both workers' caches (the origin saw two fills of each)."""
    pages = Pages(origin)
    for target in PAGES:
        for _ in range(CONNECTIONS):
            assert (await read(node, target))[0] == "v1"
            if origin.count(target) == 2:
                break
        assert origin.count(target) == 2, "the connections all reached one worker"
    return pages


async def test_a_dry_run_through_the_api_is_counted_by_both_workers_and_changes_nothing(
    node: Node, origin: Origin, token: str
) -> None:
    """Each worker has its own cache, and both hold the two pages under /assets/."""
    await fill_both_workers(node, origin)
    receipt = await purge(node, token, {"prefixes": ["/assets/"], "dry_run": True})
    assert (receipt["entries"], receipt["exact"], receipt["dry_run"]) == (4, True, True)
    assert (receipt["live"], receipt["reported"], receipt["acked"]) == (2, 2, None), receipt
    assert sorted(receipt["sample"]) == ["/assets/a.css", "/assets/b.css"]  # type: ignore[call-overload]
    for target in PAGES:
        seen = {await read(node, target) for _ in range(CONNECTIONS // 10)}
        assert {body for body, _ in seen} == {"v1"}
        assert all("hit" in status for _, status in seen), seen
        assert origin.count(target) == 2


@pytest.mark.parametrize(
    ("kind", "items", "soft", "covered"),
    [
        ("url", ["/assets/a.css"], False, {"/assets/a.css"}),
        ("prefix", ["/assets/"], True, {"/assets/a.css", "/assets/b.css"}),
        ("tag", ["t-index", "t-b"], False, {"/index.html", "/assets/b.css"}),
        ("all", [], True, set(PAGES)),
    ],
)
async def test_a_purge_is_true_on_both_workers(
    node: Node,
    origin: Origin,
    token: str,
    kind: str,
    items: list[str],
    soft: bool,
    covered: set[str],
) -> None:
    pages = await fill_both_workers(node, origin)  # each worker's own cache holds v1
    for target in covered:
        pages.versions[target] = 2

    field = {"url": "urls", "prefix": "prefixes", "tag": "tags"}.get(kind)
    body: dict[str, object] = {field: items} if field else {"all": True}
    receipt = await purge(node, token, {**body, "soft": soft})
    assert (receipt["kind"], receipt["soft"]) == (kind, soft)
    assert (receipt["acked"], receipt["live"], receipt["reported"]) == (2, 2, 2)

    for target in PAGES:
        seen = {await read(node, target) for _ in range(CONNECTIONS // 5)}
        bodies = {body for body, _ in seen}
        if target in covered:
            assert bodies == {"v2"}, target
            assert origin.count(target) <= 4  # each worker fetched v2 once (at most)
        else:
            assert bodies == {"v1"}, target
            assert all("hit" in status for _, status in seen), seen
            assert origin.count(target) == 2  # still the two fills: hits on both workers
