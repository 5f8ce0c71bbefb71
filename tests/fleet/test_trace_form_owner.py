"""The dashboard's trace form names the key's owner as the trace endpoint does (decision 0047,
proxy/api/trace.py ``with_owner``): the control plane reads the live nodes that take peer
fills and the fleet's peer key from a real Valkey, and asks the owner with only-if-cached;
an https key with the scheme claimed with the peer key.

The owner is a stand-in (a real HTTP server of the test, a real fleet member in Valkey) that
answers as an owner answers a peer: 200 when it holds the path, 504 when not, 403 to a
scheme claim without the fleet's key. The real owner's side: tests/fleet/test_peer_trace_https.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from proxy.core.peer import PeerScheme
from proxy.fleet.figures import FleetFigures
from proxy.fleet.member import FleetMember
from proxy.fleet.scripts import FleetScripts, connect
from proxy.wire.peer import SCHEME_HEADER, pack_scheme, unpack_scheme
from tests.dashboard.support import DashboardFactory, Page
from tests.fleet.conftest import DOMAINS, LEASE, Fleet
from tests.fleet.peer_support import StandInServer, live_stand_in
from tests.polling import until

TRACE = "/dashboard/domains/trace"


class Owner(StandInServer):
    """A stand-in owner: ``held`` paths answer 200 to a peer's only-if-cached request."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()
        self.key: str | None = None  # the fleet's peer key, once the member has read it
        self.asked: list[tuple[str, str | None, str | None]] = []  # path, CDN-Loop, claim

    async def _handle(self, request: web.Request) -> web.Response:
        claim = request.headers.get(SCHEME_HEADER)
        self.asked.append((request.path, request.headers.get("CDN-Loop"), claim))
        scheme = "http"
        if claim is not None:
            said = unpack_scheme(claim)
            if said is None or self.key is None or said.key != self.key:
                return web.Response(status=403)
            scheme = said.scheme
        assert request.headers.get("Cache-Control") == "only-if-cached"
        return web.Response(status=200 if f"{scheme}:{request.path}" in self.held else 504)


@pytest.fixture
async def owner(fleet: Fleet) -> AsyncIterator[tuple[Owner, FleetMember]]:
    """The stand-in, a live member of the fleet as node ``edge-7`` taking peer fills."""
    server = Owner()
    async with live_stand_in(server, fleet.server.url, node="edge-7", domains=DOMAINS) as member:
        yield server, member


@pytest.fixture
async def figures(fleet: Fleet) -> AsyncIterator[FleetFigures]:
    made = FleetFigures(
        FleetScripts(connect(fleet.server.url, timeout=0.5), timeout=0.5), lease=LEASE
    )
    yield made
    await made.close()


def owner_shown(page: Page) -> str:
    assert page.status == 200, page.text
    return " ".join(page.html.find(data_testid="owner").text.split())


async def test_the_trace_form_names_and_asks_the_keys_owner(
    owner: tuple[Owner, FleetMember], figures: FleetFigures, make_dashboard: DashboardFactory
) -> None:
    server, member = owner

    async def listed() -> bool:
        return await figures.peer_nodes() == {"edge-7": server.url} and member.peer_key is not None

    await until(listed, every=0.02)
    server.key = member.peer_key
    dashboard = await make_dashboard(fleet=figures)
    await dashboard.sign_in()

    async def trace(url: str) -> str:
        return owner_shown(await dashboard.act(TRACE, {"url": url, "headers": ""}))

    assert await trace("http://example.com/p") == "edge-7, asked: does not hold it (among edge-7)"
    assert await trace("https://example.com/p") == "edge-7, asked: does not hold it (among edge-7)"
    server.held.add("https:/p")
    assert await trace("https://example.com/p") == "edge-7, asked: holds it (among edge-7)"
    assert await trace("http://example.com/p") == "edge-7, asked: does not hold it (among edge-7)"
    # The https key asked with the request-target and the scheme, said with the fleet's key.
    claim = pack_scheme(PeerScheme("https", server.key or ""))
    assert server.asked[1] == ("/p", "cdn-proxy", claim)
    assert [(path, claim is None) for path, _, claim in server.asked] == [
        ("/p", True),
        ("/p", False),
        ("/p", False),
        ("/p", True),
    ]
