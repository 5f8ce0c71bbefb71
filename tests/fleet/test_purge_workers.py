"""Purges through the fleet on real processes: ``cdn-proxy serve`` with two edge workers and
its embedded Valkey, a real origin whose bodies carry a version the test bumps, and purges
sent to the node's ``POST /api/v1/cdn/purge`` with a token. After the 200, no read of a
covered page gets its old version, on either worker; the pages it does not cover are still
hits on both (the origin sees no new request for them).

The tests share the module's node (issue 34: a node of two workers takes seconds to start):
each reads and purges pages of its own, under a path and with tags named for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from tests.conftest import Origin
from tests.nodes import Node, cli, write_config
from tests.test_shared_tier import served

# slow: nodes of several worker processes; not in the quick subset (README). One event loop
# for the module: its node outlives each test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

HOST = {"Host": "example.com"}
CONNECTIONS = 200  # fresh connections to reach both workers (the kernel spreads them)
PAGES = {"/assets/a.css": "t-a", "/assets/b.css": "t-b", "/index.html": "t-index"}


class Pages:
    """Origin routes whose body is their current version, tagged with Surrogate-Key: PAGES
    under ``/SPACE``, their tags prefixed ``SPACE-``."""

    def __init__(self, origin: Origin, space: str) -> None:
        self.space = space
        self.versions = {self.target(page): 1 for page in PAGES}
        self.tags = {self.target(page): self.tag(tag) for page, tag in PAGES.items()}
        for target in self.versions:
            origin.route(target, self.handle)

    def target(self, page: str) -> str:
        return f"/{self.space}{page}"

    def tag(self, tag: str) -> str:
        return f"{self.space}-{tag}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        target = request.path
        headers = {"Cache-Control": "max-age=600", "Surrogate-Key": self.tags[target]}
        return web.Response(text=f"v{self.versions[target]}", headers=headers)


@dataclass
class Running:
    """The module's node of two workers (and its embedded Valkey), its origin and a token."""

    node: Node
    origin: Origin
    token: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    async with served(Origin()) as origin:
        config = write_config(tmp_path_factory.mktemp("node"), origin.url, workers=2)
        status, out, err = await cli(
            "token", "create", "deploy", "--all-domains", "--config", str(config)
        )
        assert status == 0, err
        node = await Node.start(config)
        try:
            yield Running(node, origin, out.strip())
        finally:
            await node.kill()


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


async def fill_both_workers(node: Node, origin: Origin, space: str) -> Pages:
    """Every page of ``space`` with v1 in both workers' caches (the origin saw two fills of
    each)."""
    pages = Pages(origin, space)
    for target in pages.versions:
        for _ in range(CONNECTIONS):
            assert (await read(node, target))[0] == "v1"
            if origin.count(target) == 2:
                break
        assert origin.count(target) == 2, "the connections all reached one worker"
    return pages


async def test_a_dry_run_through_the_api_is_counted_by_both_workers_and_changes_nothing(
    running: Running,
) -> None:
    """Each worker has its own cache, and both hold the two pages under /dry/assets/."""
    node, origin, token = running.node, running.origin, running.token
    pages = await fill_both_workers(node, origin, "dry")
    receipt = await purge(node, token, {"prefixes": ["/dry/assets/"], "dry_run": True})
    assert (receipt["entries"], receipt["exact"], receipt["dry_run"]) == (4, True, True)
    assert (receipt["live"], receipt["reported"], receipt["acked"]) == (2, 2, None), receipt
    assert sorted(receipt["sample"]) == ["/dry/assets/a.css", "/dry/assets/b.css"]  # type: ignore[call-overload]
    for target in pages.versions:
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
    running: Running,
    kind: str,
    items: list[str],
    soft: bool,
    covered: set[str],
) -> None:
    """The items and pages under ``/KIND`` (tags ``KIND-...``)."""
    node, origin, token = running.node, running.origin, running.token
    pages = await fill_both_workers(node, origin, kind)  # each worker's own cache holds v1
    for page in covered:
        pages.versions[pages.target(page)] = 2

    field = {"url": "urls", "prefix": "prefixes", "tag": "tags"}.get(kind)
    named = [pages.tag(item) if kind == "tag" else pages.target(item) for item in items]
    body: dict[str, object] = {field: named} if field else {"all": True}
    receipt = await purge(node, token, {**body, "soft": soft})
    assert (receipt["kind"], receipt["soft"]) == (kind, soft)
    assert (receipt["acked"], receipt["live"], receipt["reported"]) == (2, 2, 2)

    for page in PAGES:
        target = pages.target(page)
        seen = {await read(node, target) for _ in range(CONNECTIONS // 5)}
        bodies = {body for body, _ in seen}
        if page in covered:
            assert bodies == {"v2"}, target
            assert origin.count(target) <= 4  # each worker fetched v2 once (at most)
        else:
            assert bodies == {"v1"}, target
            assert all("hit" in status for _, status in seen), seen
            assert origin.count(target) == 2  # still the two fills: hits on both workers
