"""Stand-in owners for the peer-fill tests (decision 0047): a small HTTP server that plays a
fleet node's edge, and a live fleet member that advertises it, so that real nodes list it as
a peer and send it their misses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from aiohttp import web

from proxy.fleet.member import FleetMember
from proxy.store.memory import MemoryStore
from tests.fleet.conftest import settings

STAND_IN_LEASE = 3.0


class StandInServer:
    """An HTTP server on loopback whose every GET goes to ``_handle`` (subclasses answer)."""

    def __init__(self) -> None:
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/{rest:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError


@asynccontextmanager
async def live_stand_in(
    server: StandInServer, valkey_url: str, *, node: str, domains: Sequence[str]
) -> AsyncIterator[FleetMember]:
    """``server`` started, and a live member of the fleet at ``valkey_url`` as ``node``,
    taking peer fills at the server's URL; both closed at the end.

    Its lease is long (3 s, not the fleet tests' 0.6 s): on a loaded machine a renewal late by
    more than 0.6 s drops the stand-in from the nodes' owner lists for a moment (decision
    0047, the renewal flicker), and a test that counts what the stand-in was asked would fail
    for it. It still renews every 0.15 s and applies every purge, as any member."""
    await server.start()
    member = FleetMember(
        settings=settings(valkey_url, peer_fill=True, lease=STAND_IN_LEASE),
        store=MemoryStore(max_bytes=1 << 20),
        domains=tuple(domains),
        node=node,
        advertise=server.url,
    )
    try:
        await member.start()
        yield member
    finally:
        await member.close()
        await server.close()
