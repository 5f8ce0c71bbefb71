"""What the purge API tests share: posting a purge to the app under test, and purgers that
fail the way a fleet can (the fleet's own tests run a real one)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.core.purge.purges import Purge, PurgeResult
from proxy.errors import ClearNotConfirmed, FleetUnavailable, NotReplicated, PurgeUnsupported
from proxy.store.base import ClearResult
from tests.api.support import DOMAIN, Answer, ApiUnderTest
from tests.edge.test_purges_end_to_end import URLS, Versioned
from tests.nodes import Node, cli, write_config

PURGE = "/api/v1/cdn/purge"


async def post_purge(
    api: ApiUnderTest,
    body: bytes | dict[str, Any] | None = None,
    *,
    token: str | None = "deploy",
    content_type: str | None = "application/json",
    headers: dict[str, str] | None = None,
) -> Answer:
    """POST to the purge endpoint. ``body``: JSON for a dict, as is for bytes; by default a
    purge of the URL /x of example.com. ``token`` is a token *name* from ``api.tokens``."""
    if body is None:
        body = {"domain": DOMAIN, "urls": ["/x"]}
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return await api.post(data, token=token, content_type=content_type, headers=headers, path=PURGE)


def receipt_of(answer: Answer) -> dict[str, Any]:
    assert answer.status == 200, answer.body
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.headers["Cache-Control"] == "no-store"
    data = json.loads(answer.body)
    assert isinstance(data, dict)
    return data


class FailingPurger:
    """A purger every clear and purge of which fails with ``error``, as a fleet's can."""

    name = None

    def __init__(self, error: Exception) -> None:
        self._error = error

    async def clear_domain(self, domain: str) -> ClearResult:
        raise self._error

    async def purge(self, domain: str, purge: Purge) -> PurgeResult:
        raise self._error


FAILURES = {
    "unavailable": FleetUnavailable("Valkey did not answer"),
    "not_replicated": NotReplicated("1 of 2 replicas"),
    "unconfirmed": ClearNotConfirmed(domain=DOMAIN, number=7, acked=1, live=2, retry_after=3),
    "broken": RuntimeError("a bug"),
    "unsupported": PurgeUnsupported(2),
}


# -- a real node -------------------------------------------------------------------------------


@dataclass
class PurgeNode:
    """``cdn-proxy serve`` in a child process in front of a real origin whose every answer
    carries its version (tests/edge/test_purges_end_to_end.Versioned), with a token."""

    node: Node
    config: Path
    token: str
    origin: Versioned
    session: aiohttp.ClientSession

    async def get(self, url: str) -> tuple[str, bytes]:
        """GET ``url`` of example.com through the edge: its Cache-Status and body."""
        async with self.session.get(
            self.node.edge + url, headers={"Host": DOMAIN}, allow_redirects=False
        ) as response:
            assert response.status == 200, url
            return response.headers["Cache-Status"], await response.read()

    async def purge(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST ``body`` to the node's purge endpoint: the status and the JSON answer."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.session.post(self.node.api + PURGE, json=body, headers=headers) as response:
            data = await response.json(content_type=None)
            assert isinstance(data, dict)
            return response.status, data


@asynccontextmanager
async def purge_node(
    tmp_path: Path, aiohttp_server: Callable[..., Awaitable[TestServer]]
) -> AsyncIterator[PurgeNode]:
    origin = Versioned()
    app = web.Application()

    async def handler(request: web.Request) -> web.StreamResponse:
        return await origin(request)

    app.router.add_route("GET", "/{tail:.*}", handler)
    server = await aiohttp_server(app)
    config = write_config(tmp_path, f"http://127.0.0.1:{server.port}")
    status, token, err = await cli(
        "token", "create", "deploy", "--all-domains", "--config", str(config)
    )
    assert status == 0, err
    node = await Node.start(config, log=tmp_path / "serve.log")
    try:
        async with aiohttp.ClientSession() as session:
            yield PurgeNode(node, config, token.strip(), origin, session)
    finally:
        await node.kill()


async def assert_purged(
    node: PurgeNode,
    covered: set[str],
    served: dict[str, bytes],
    fetched: dict[str, int],
    label: object,
) -> None:
    """After a purge's 200: each covered URL answers the origin's new version, fetched once;
    every other URL is still a hit on what it served before, and the origin was not asked."""
    for _ in range(2):
        for url in URLS:
            cache_status, got = await node.get(url)
            if url in covered:
                assert got == f"{url} v{node.origin.version}".encode(), (label, url)
            else:
                assert (cache_status, got) == ("cdn-proxy; hit", served[url]), url
    assert node.origin.full == {url: fetched[url] + (url in covered) for url in URLS}, label


async def warm(node: PurgeNode) -> dict[str, bytes]:
    """Every URL a hit (fetched first if it must be): what each is served as."""
    served = {}
    for url in URLS:
        status, body = await node.get(url)
        if status != "cdn-proxy; hit":
            status, body = await node.get(url)
        assert status == "cdn-proxy; hit", url
        served[url] = body
    return served
