"""The whole fleet on the control plane: each edge process reports its figures with every sync,
and the control plane sums them for /metrics and the dashboard, and lists the processes on
the Nodes page."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from functools import partial

import pytest

from proxy.api.dashboard.pages import clear_number
from proxy.core.lease import Applied
from proxy.core.observe.traffic import HIT, MISS
from proxy.edge.origin import OriginResponse
from proxy.edge.peer_fill import PeerFills
from proxy.fleet.figures import FleetFigures, edge_report
from proxy.fleet.member import FleetMember
from proxy.fleet.scripts import FleetScripts, connect
from proxy.observe.telemetry import Telemetry
from proxy.store.memory import MemoryStore
from tests.dashboard.support import DashboardFactory
from tests.fleet.conftest import DOMAINS, LEASE, Fleet, response, settings


@pytest.fixture
async def figures(fleet: Fleet) -> AsyncIterator[FleetFigures]:
    url = fleet.server.url
    made = FleetFigures(FleetScripts(connect(url, timeout=0.5), timeout=0.5), lease=LEASE)
    yield made
    await made.close()


async def reporting_member(fleet: Fleet, node: str, hits: int) -> FleetMember:
    """A member whose process served ``hits`` hits and one miss of a.test and stores one
    entry of it, and has reported that in a sync."""
    memory = MemoryStore(max_bytes=1 << 20)
    telemetry = Telemetry(store=memory, domains=DOMAINS)
    for _ in range(hits):
        telemetry.request("a.test", HIT)
    telemetry.request("a.test", MISS)
    member = FleetMember(
        settings=settings(fleet.server.url),
        store=memory,
        domains=DOMAINS,
        node=node,
        report=lambda: edge_report(telemetry, memory, DOMAINS, time.time()),
    )
    await member.start()  # joining a new epoch empties the store: fill it after
    found = await memory.lookup("a.test", "/x")
    assert await memory.put(found.key, response(b"x"))
    assert await member.sync()  # reports the figures as they are now
    return member


async def test_the_control_plane_sums_every_edge_process(
    fleet: Fleet, figures: FleetFigures
) -> None:
    members = [await reporting_member(fleet, "n1", 3), await reporting_member(fleet, "n2", 4)]
    try:
        await figures.refresh()
        assert figures.outcomes()["a.test"][HIT] == 7
        assert figures.outcomes()["a.test"][MISS] == 2
        assert (await figures.domain_stats("a.test")).entries == 2
        assert (await figures.domain_stats("b.test")).entries == 0
        assert (await figures.stats()).max_bytes == 2 << 20
        assert figures.live_and_fenced() == (2, 0)
        control = Telemetry(store=figures, domains=DOMAINS, remote=figures)
        counts = control.domain_counts("a.test")
        assert (counts.hits, counts.misses) == (7, 2)
        exposition = (await control.exposition()).decode()
        assert 'cdn_proxy_requests_total{cache_status="hit",domain="a.test"} 7.0' in exposition
        assert "cdn_proxy_fleet_live_processes 2.0" in exposition
        assert 'cdn_proxy_domain_entries{domain="a.test"} 2.0' in exposition
        rows = figures.processes()
        assert [(row.node, row.fenced) for row in rows] == [("n1", False), ("n2", False)]
        assert all(row.lease_age is not None and row.lease_age < LEASE for row in rows)
    finally:
        for member in members:
            await member.close()


async def test_the_nodes_page_lists_every_edge_process(
    fleet: Fleet, figures: FleetFigures, make_dashboard: DashboardFactory
) -> None:
    member = await reporting_member(fleet, "edge-7", 1)
    try:
        await figures.refresh()
        dashboard = await make_dashboard(fleet=figures)
        await dashboard.sign_in()
        page = await dashboard.get("/dashboard/nodes")
        assert page.status == 200
        [row] = page.html.find("table").find_all("tr", data_member=member.name)
        cells = [cell.text for cell in row.find_all("td")]
        assert cells[0] == "edge-7"
        assert cells[7] == "serving"
        # The clear's number as the time it stands for, the number itself in the title.
        assert cells[5] == clear_number(member.applied.seq) != str(member.applied.seq)
        assert row.find_all("td")[5].attrs["title"] == f"clear number {member.applied.seq}"
    finally:
        await member.close()


@pytest.mark.slow
async def test_without_a_fleet_the_nodes_page_says_so(make_dashboard: DashboardFactory) -> None:
    dashboard = await make_dashboard()
    await dashboard.sign_in()
    page = await dashboard.get("/dashboard/nodes")
    assert page.status == 200
    assert "there is no fleet to show" in page.words


@pytest.mark.parametrize(
    "info",
    [
        "not json",
        '{"pid":"7","counts":{"a.test":{"hit":100}}}',  # a field of the wrong type
        '{"v":2,"counts":{"a.test":{"hit":100}}}',  # a later build's version
    ],
)
async def test_a_process_whose_info_cannot_be_read_is_listed_but_left_out_of_the_sums(
    fleet: Fleet, figures: FleetFigures, info: str
) -> None:
    """Its lease is registered by the real sync script with that info (decision 0027)."""
    member = await reporting_member(fleet, "n1", 3)
    odd = FleetScripts(fleet.client(), timeout=1.0)
    await odd.sync(member="odd", lease_ms=60_000, epoch=None, applied=0, info=info, domains=[])
    try:
        await figures.refresh()
        assert figures.outcomes()["a.test"][HIT] == 3  # the readable report only
        rows = {row.member: row for row in figures.processes()}
        assert rows.keys() == {member.name, "odd"}
        assert (rows["odd"].node, rows["odd"].pid, rows["odd"].fenced) == ("", 0, False)
        assert figures.live_and_fenced() == (2, 0)
    finally:
        await member.close()


async def test_the_nodes_page_shows_each_nodes_share_of_keys_and_its_peer_errors(
    fleet: Fleet, figures: FleetFigures, make_dashboard: DashboardFactory
) -> None:
    """decision 0047: with peer fills, each node's share of the key space (rendezvous among
    the live nodes that take them), the peers' requests it answered and its peer errors."""
    members = []
    for node, url in (("n1", "http://127.0.0.1:1"), ("n2", "http://127.0.0.1:2")):
        memory = MemoryStore(max_bytes=1 << 20)
        telemetry = Telemetry(store=memory, domains=DOMAINS)
        fills = PeerFills(view=_NoView(), name="cdn-proxy", timeout=0.3, ask_origin=_never)
        fills.requests["n2" if node == "n1" else "n1"] += 5
        if node == "n1":
            fills.errors["n2", "timeout"] += 2
        fills.answers = 7 if node == "n2" else 3
        telemetry.peer_fills = fills
        member = FleetMember(
            settings=settings(fleet.server.url, peer_fill=True),
            store=memory,
            domains=DOMAINS,
            node=node,
            advertise=url,
            report=partial(edge_report, telemetry, memory, DOMAINS, time.time()),
        )
        await member.start()
        members.append(member)
    try:
        for member in members:
            assert await member.sync()
        await figures.refresh()
        dashboard = await make_dashboard(fleet=figures)
        await dashboard.sign_in()
        page = await dashboard.get("/dashboard/nodes")
        assert page.status == 200
        table = page.html.find("table", class_="peers")
        cells = {
            n: [c.text for c in table.find_all("tr", data_node=n)[0].find_all("td")]
            for n in ("n1", "n2")
        }
        shares = [float(cells[n][1].removesuffix("%")) for n in cells]
        assert abs(sum(shares) - 100) < 0.2 and all(40 < s < 60 for s in shares), shares
        assert cells["n1"][2:] == ["3", "5", "timeout 2"]  # answered, sent, errors
        assert cells["n2"][2:] == ["7", "5", "none"]
    finally:
        for member in members:
            await member.close()


class _NoView:
    node = "n0"
    peers: dict[str, str] = {}
    applied = Applied(None, 0, {})
    peer_key = None


def _never(*args: object) -> AbstractAsyncContextManager[OriginResponse]:
    raise AssertionError("no fill here")
