"""Peer fills on real processes (decision 0047): three ``cdn-proxy serve`` edge nodes with
``[fleet] peer_fill = true``, one Valkey, a control plane and one origin that counts what it
is asked (benchmarks/fleet_cluster.py).

- each object read through every node reaches the origin about once;
- a killed owner (kill -9) costs no client an error: the others go to the origin;
- a request that names the fleet in CDN-Loop is never sent to a peer;
- an owner's answer is used only with a usable purge label: a peer that answers with an
  older purge number, another epoch or no label is neither served nor stored, and after a
  purge answered 200 no node serves the old object through it. That owner is a stand-in
  (an HTTP server of the test, a real fleet member in Valkey), since a node of ours never
  answers with a label older than what it had applied.

The module starts two clusters, without a shared tier and with one (``disk``), and its tests
share them (issue 34: a cluster takes seconds to start). Each test starts from a known state:
every node running and listed, pages never read before (``fresh_page``), and figures taken
as the difference from before the test's own reads. A node a test killed or stopped runs
again for the next (``every_node_running``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import signal
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from benchmarks.fleet_cluster import Cluster, Edge, large_body
from benchmarks.peer_fill_latency import NODES, D, PeerCluster, fresh_page, read
from proxy.cli.trace import describe
from proxy.core.peer import PeerScheme, PurgeLabel, owner_of
from proxy.errors import WireError
from proxy.fleet.member import FleetMember
from proxy.fleet.peers import live_peers
from proxy.fleet.scripts import FleetScripts, MembersView
from proxy.wire.peer import LABEL_HEADER, SCHEME_HEADER, pack_label, pack_scheme
from proxy.wire.reports import unpack_member_info
from tests.fleet.conftest import settings
from tests.fleet.peer_support import StandInServer, live_stand_in
from tests.polling import until

# slow: real processes. One event loop for the module: its clusters outlive each test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PROXY = "127.0.0.2"  # the trusted proxy in front of every node (a loopback address)
# Pages edge1 owns: answered no-store; and of 300 kB, streamed into the shared tier as they
# arrive when there is one (benchmarks/fleet_cluster.py).
UNSTORED_PAGES = tuple(fresh_page(owned_by="edge1") for _ in range(3))
LARGE_PAGES = tuple(fresh_page(owned_by="edge1") for _ in range(3))


async def peers_ready(cluster: Cluster, nodes: tuple[str, ...], edges: list[Edge]) -> None:
    """Valkey lists ``nodes`` as the live peer nodes, each of ``edges`` has read its own list
    since, and has had a fill from every other node of the cluster (a node restarted by an
    earlier test on the module's cluster too)."""
    scripts = FleetScripts.of(settings(valkey_url(cluster)))
    try:

        async def listed() -> MembersView | None:
            view = await scripts.members()
            return view if set(live_peers(view)) == set(nodes) else None

        view = await until(listed, every=0.05)
        assert view is not None
    finally:
        await scripts.aclose()
    await lists_read(cluster, {edge.node.name for edge in edges}, view.now_ms)
    names = {edge.node.name for edge in cluster.edges}
    for edge in edges:
        for other in (n for n in nodes if n != edge.node.name and n in names):

            async def asked_a_peer(other: str = other, edge: Edge = edge) -> bool:
                page = fresh_page(owned_by=other, nodes=nodes)
                return f"peer={other}" in (await read(edge, page))[2]

            await until(asked_a_peer, every=0.05)


async def lists_read(cluster: Cluster, nodes: set[str], since_ms: int) -> None:
    """Each process of ``nodes`` has read the live peer list after Valkey's time
    ``since_ms``: it renewed after then, and once more (a sync renews, then reads the list;
    the next sync starts once that read is done: proxy/fleet/member.py)."""
    scripts = FleetScripts.of(settings(valkey_url(cluster)))
    lease_ms = round(cluster.timing.lease * 1000)

    async def renewed(after: dict[str, int]) -> dict[str, int] | None:
        """Each live process's lease expiry, once every node has one and every one has an
        expiry later than ``after`` gives for it (``since_ms`` and a lease when none)."""
        expiries, seen = {}, set()
        view = await scripts.members()
        for row in (row for row in view.members if row.expires_ms > view.now_ms):
            with contextlib.suppress(WireError):
                node = unpack_member_info(row.info).node
                if node in nodes:
                    expiries[row.member] = row.expires_ms
                    seen.add(node)
        later = all(
            expiry > after.get(member, since_ms + lease_ms) for member, expiry in expiries.items()
        )
        return expiries if seen == nodes and later else None

    try:
        first = await until(lambda: renewed({}), every=0.05)
        assert first is not None
        await until(lambda: renewed(first), every=0.05)
    finally:
        await scripts.aclose()


@contextlib.asynccontextmanager
async def started(cluster: PeerCluster) -> AsyncIterator[PeerCluster]:
    """Three edge nodes of one worker each, started; closed at the end."""
    cluster.peer_timeout = 3.0  # a loaded machine (CI runs two tests at once) is slow to answer
    # A client at 127.0.0.2 is a trusted proxy, which may say a request is https; the nodes
    # reach each other from 127.0.0.1, which is not.
    cluster.edge_extra = f'trusted_proxies = ["{PROXY}/32"]\n'
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.close()


def new_cluster(factory: pytest.TempPathFactory, *, disk: bool) -> PeerCluster:
    directory = factory.mktemp("disk" if disk else "memory")
    return PeerCluster(
        directory,
        domains=(D,),
        workers=(1, 1, 1),
        disk=disk,
        large=LARGE_PAGES,
        unstored=UNSTORED_PAGES,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def memory_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PeerCluster]:
    async with started(new_cluster(tmp_path_factory, disk=False)) as cluster:
        yield cluster


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def disk_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PeerCluster]:
    """With the shared tier on every node: started by the first test that asks for it."""
    async with started(new_cluster(tmp_path_factory, disk=True)) as cluster:
        yield cluster


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> PeerCluster:
    """The module's cluster with the shared tier (``disk``) when the test asks, else the one
    without."""
    kind = getattr(request, "param", "memory")
    found: PeerCluster = request.getfixturevalue(f"{kind}_cluster")
    return found


@pytest_asyncio.fixture(autouse=True, loop_scope="module")
async def every_node_running(cluster: PeerCluster) -> AsyncIterator[None]:
    """Every node runs when a test starts: one an earlier test killed (kill -9) starts again
    on the same ports (the test's ``peers_ready`` then waits until it is listed and answers
    as an owner), and one it stopped (SIGSTOP) is continued at its end."""
    for edge in cluster.edges:
        if not edge.node.running:
            await edge.node.start()
    yield
    for edge in cluster.edges:
        if edge.node.stopped:
            edge.node.signal(signal.SIGCONT)


def unread(cluster: PeerCluster) -> int:
    """The version of a page never read before: its domain's (a test before may have
    cleared the domain on the module's cluster, after the origin's bump)."""
    return cluster.origin.versions[D]


def valkey_url(cluster: Cluster) -> str:
    return f"redis://127.0.0.1:{cluster.valkey_port}/0"


def origin_asks(cluster: Cluster, page: str) -> int:
    return sum(1 for seen, _, _ in cluster.origin.seen if seen == f"{D}/{page}")


@pytest.mark.parametrize("cluster", ["memory", "disk"], indirect=True)
async def test_each_object_read_through_every_node_reaches_the_origin_about_once(
    cluster: PeerCluster,
) -> None:
    await peers_ready(cluster, NODES, cluster.edges)
    pages = [fresh_page(owned_by=NODES[i % len(NODES)]) for i in range(30)]
    for page in pages:
        for edge in cluster.edges:
            status, body, cache = await read(edge, page)
            assert (status, body) == (200, str(unread(cluster))), cache
    asks = sum(origin_asks(cluster, page) for page in pages)
    # Without peer fills: 90. On a failure, say why: a peer answer slower than peer_timeout
    # (kind "timeout") or refused ("label") in the nodes' reports, or revalidations (a node
    # that lost its lease under load distrusts its shared tier: decision 0040).
    conditional = [seen for seen in cluster.origin.seen if seen[1] is not None]
    # +2: a node whose renewal is late by more than its lease drops out of the others' owner
    # lists until it renews (decision 0047, the renewal flicker): a key asked meanwhile
    # costs one more origin request, never a wrong answer.
    assert asks <= len(pages) + 2, (asks, await peer_errors(cluster), conditional)
    # A non-owner's fill names its owner; its copy is then a local hit.
    page = fresh_page(owned_by="edge1")
    assert 'detail="peer=edge1"' in (await read(cluster.edges[0], page))[2]
    assert "hit" in (await read(cluster.edges[0], page))[2]
    assert origin_asks(cluster, page) == 1


async def test_a_killed_owner_costs_no_client_an_error(cluster: PeerCluster) -> None:
    await peers_ready(cluster, NODES, cluster.edges)
    dead = cluster.edges[2]
    pages = [fresh_page(owned_by="edge2") for _ in range(10)]
    await dead.node.kill()
    for page in pages:  # while the others still list it, and after
        for edge in cluster.edges[:2]:
            status, body, cache = await read(edge, page)
            assert (status, body) == (200, str(unread(cluster))), cache
            assert "peer=edge2" not in cache
    # A node that finds nothing listening at the owner passes it over and asks the key's
    # next owner (the same on both nodes) at once: one origin request a key for the fleet.
    asks = [origin_asks(cluster, page) for page in pages]
    assert asks == [1] * len(pages), (asks, await peer_errors(cluster))


async def peer_errors(cluster: Cluster) -> list[str]:
    return [line for line in (await metrics(cluster)).splitlines() if "peer_errors_total{" in line]


async def metrics(cluster: Cluster) -> str:
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"{cluster.api_url}/metrics") as response,
    ):
        return await response.text()


async def api_post(cluster: Cluster, call: str, body: dict[str, object]) -> None:
    """``POST /api/v1/cdn/<call>`` with the cluster's token, answered 200."""
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            f"{cluster.api_url}/api/v1/cdn/{call}",
            json=body,
            headers={"Authorization": f"Bearer {cluster.token}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()


async def purge(cluster: Cluster, *pages: str) -> None:
    await api_post(cluster, "purge", {"domain": D, "urls": [f"/{D}/{page}" for page in pages]})


@pytest.mark.parametrize("cluster", ["memory", "disk"], indirect=True)
async def test_a_purge_answered_200_holds_through_the_owner(cluster: PeerCluster) -> None:
    """Every node holds the old object (the owner from the origin, the others from it);
    after a URL purge answered 200 no node serves it again, through the owner or its own
    copy: with the owner running, and with the owner stopped (SIGSTOP) across the purge,
    then continued."""
    await peers_ready(cluster, NODES, cluster.edges)
    running, stopped = fresh_page(owned_by="edge1"), fresh_page(owned_by="edge1")
    for page in (running, stopped):
        for edge in cluster.edges:
            assert (await read(edge, page))[:2] == (200, str(unread(cluster)))
    version = cluster.origin.bump(D, [running])
    await purge(cluster, running)
    for edge in cluster.edges:
        for _ in range(2):  # the first read fills (through the owner), the second is a hit
            status, body, cache = await read(edge, running)
            assert (status, body) == (200, str(version)), cache
    owner = cluster.edges[1]
    owner.node.signal(signal.SIGSTOP)
    try:
        version = cluster.origin.bump(D, [stopped])
        await purge(cluster, stopped)  # answered once the stopped owner's lease ran out
        for edge in (cluster.edges[0], cluster.edges[2]):
            status, body, cache = await read(edge, stopped)
            assert (status, body) == (200, str(version)), cache
    finally:
        owner.node.signal(signal.SIGCONT)
    for edge in cluster.edges:  # the owner woken: fenced until it has applied the purge
        for _ in range(2):
            status, body, cache = await read(edge, stopped)
            assert (status, body) == (200, str(version)), cache


async def test_a_tag_purge_covers_the_copy_a_node_filled_from_the_owner(
    cluster: PeerCluster,
) -> None:
    """The owner sends the entry's tags with its answer (the origin tags each page with its
    name, in Surrogate-Key), so the asking node's copy is found by a tag purge too."""
    await peers_ready(cluster, NODES, cluster.edges)
    page = fresh_page(owned_by="edge1")
    edge = cluster.edges[0]
    status, body, cache = await read(edge, page)
    assert (status, body) == (200, str(unread(cluster))) and "peer=edge1" in cache, cache
    assert "hit" in (await read(edge, page))[2]
    version = cluster.origin.bump(D, [page])
    await api_post(cluster, "purge", {"domain": D, "tags": [page]})
    status, body, cache = await read(edge, page)
    assert (status, body) == (200, str(version)), cache


_stand_ins = itertools.count()


class StandIn(StandInServer):
    """An owner that answers every GET with ``body`` and the label it is set to. Each is a
    node of a name of its own (``fake0``, ``fake1``...), so that the figures of a test name
    its own stand-in (the module's clusters outlive the tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.node = f"fake{next(_stand_ins)}"
        self.body = "stale"
        self.label: str | None = None
        self.asked: list[tuple[str, str | None]] = []  # path, CDN-Loop

    async def _handle(self, request: web.Request) -> web.Response:
        self.asked.append((request.path, request.headers.get("CDN-Loop")))
        headers = {"Cache-Control": "max-age=600"}
        if self.label is not None:
            headers[LABEL_HEADER] = self.label
        return web.Response(text=self.body, headers=headers)


@pytest_asyncio.fixture(loop_scope="module")  # the test's loop, which serves it
async def stand_in(cluster: PeerCluster) -> AsyncIterator[tuple[StandIn, FleetMember]]:
    """The stand-in owner, a live member of the fleet as its node taking peer fills."""
    server = StandIn()
    url = valkey_url(cluster)
    async with live_stand_in(server, url, node=server.node, domains=(D,)) as member:
        yield server, member


async def test_an_owners_answer_is_used_only_with_a_usable_label(
    cluster: PeerCluster, stand_in: tuple[StandIn, FleetMember]
) -> None:
    server, member = stand_in
    nodes = (*NODES, server.node)
    edge = cluster.edges[0]
    await peers_ready(cluster, nodes, [edge])
    # A purge answered 200: every node applied it; the stand-in's labels say otherwise.
    version = cluster.origin.bump(D)
    await clear(cluster)
    epoch, number = member.applied.epoch, member.applied.seq
    assert epoch is not None and number > 0
    for label in (
        None,  # no label (an older build, or an answer not made from a stored entry)
        pack_label(PurgeLabel(epoch, number - 1)),  # made before the purge
        pack_label(PurgeLabel("another-epoch", number + 5)),  # before a Valkey restart
        "peer-label/9 " + epoch + f" {number}",  # a later version this build cannot read
    ):
        server.label = label
        page = fresh_page(owned_by=server.node, nodes=nodes)
        before = len(server.asked)
        for _ in range(2):  # neither served nor stored: the second read is the origin's copy
            status, body, cache = await read(edge, page)
            assert (status, body) == (200, str(version)), (label, cache)
        assert len(server.asked) == before + 1, label  # asked once, then a local hit
        assert origin_asks(cluster, page) == 1
    # The control: a label at or above what the node applied is used, and the body kept.
    server.label = pack_label(PurgeLabel(epoch, member.applied.seq))
    page = fresh_page(owned_by=server.node, nodes=nodes)
    status, body, cache = await read(edge, page)
    assert (status, body) == (200, "stale") and f'detail="peer={server.node}"' in cache, cache
    assert "hit" in (await read(edge, page))[2]
    assert origin_asks(cluster, page) == 0
    assert server.asked[-1] == (f"/{D}/{page}", "cdn-proxy")  # marked for the loop guard

    async def counted() -> bool:  # /metrics: the answers refused, by asking node and peer
        text = await metrics(cluster)
        labels = f'{{kind="label",node="edge0",peer="{server.node}"}}'
        return f"cdn_proxy_peer_errors_total{labels} 4.0" in text

    await until(counted, every=0.1)
    labels = f'{{node="edge0",peer="{server.node}"}}'
    assert f"cdn_proxy_peer_requests_total{labels} 5.0" in await metrics(cluster)


async def clear(cluster: Cluster) -> None:
    await api_post(cluster, "clear-cache", {"domain": D})


async def test_a_request_marked_with_the_fleets_cdn_loop_never_goes_to_a_peer(
    cluster: PeerCluster, stand_in: tuple[StandIn, FleetMember]
) -> None:
    server, member = stand_in
    nodes = (*NODES, server.node)
    edge = cluster.edges[0]
    await peers_ready(cluster, nodes, [edge])
    server.label = pack_label(PurgeLabel(member.applied.epoch or "", 10**9))
    asked = len(server.asked)
    page = fresh_page(owned_by=server.node, nodes=nodes)
    status, body, cache = await read(edge, page, **{"CDN-Loop": "other, cdn-proxy; v=1"})
    assert (status, body) == (200, str(unread(cluster))), cache
    assert "peer=" not in cache
    assert len(server.asked) == asked  # the stand-in owner was not asked
    assert origin_asks(cluster, page) == 1
    assert LABEL_HEADER.lower() in {n.lower() for n in await headers_of(edge, page)}


async def headers_of(edge: Edge, page: str) -> list[str]:
    """The answer's field names to a marked request (the node answers it as an owner)."""
    async with (
        aiohttp.ClientSession() as client,
        client.get(
            f"{edge.url}/{D}/{page}", headers={"Host": D, "CDN-Loop": "cdn-proxy"}
        ) as response,
    ):
        await response.read()
        return list(response.headers)


async def read_https(edge: Edge, page: str) -> tuple[int, str, str]:
    """One GET from the trusted proxy, which says its client's request was https."""
    connector = aiohttp.TCPConnector(local_addr=(PROXY, 0))
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(
            f"{edge.url}/{D}/{page}",
            headers={"Host": D, "X-Forwarded-For": "127.0.0.9", "X-Forwarded-Proto": "https"},
        ) as response,
    ):
        body = await response.text()
        return response.status, body, response.headers.get("Cache-Status", "")


def https_page(*, owned_by: str) -> str:
    """A fresh page whose https key (decision 0041) ``owned_by`` owns."""
    while True:
        page = fresh_page(owned_by=owned_by)  # never read before
        if owner_of(f"{D}\0https:/{D}/{page}".encode(), NODES) == owned_by:
            return page


async def test_an_https_keyed_miss_is_filled_by_the_owner_of_its_https_key(
    cluster: PeerCluster,
) -> None:
    """The owner keys, fills and tells its origin the scheme the asking node keyed by,
    which it believes only with the fleet's peer key."""
    await peers_ready(cluster, NODES, cluster.edges)
    page = https_page(owned_by="edge1")
    status, body, cache = await read_https(cluster.edges[0], page)
    assert (status, body) == (200, str(unread(cluster))) and 'detail="peer=edge1"' in cache, cache
    assert "hit" in (await read_https(cluster.edges[0], page))[2]  # its copy, keyed https
    assert "hit" in (await read_https(cluster.edges[1], page))[2]  # the owner's https copy
    assert cluster.origin.schemes.count((f"{D}/{page}", "https")) == 1
    assert origin_asks(cluster, page) == 1
    # The http variant is another key: the owner's https copy is not it.
    assert "hit" not in (await read(cluster.edges[1], page))[2]
    assert cluster.origin.schemes.count((f"{D}/{page}", "http")) == 1


async def test_a_scheme_claim_without_the_fleets_peer_key_is_refused(
    cluster: PeerCluster,
) -> None:
    """A client cannot choose the variant an owner fills: its claim gets a 403, and no
    origin request. ("False": the key every member but the first held while SET NX GET
    was read as SET's flag.)"""
    await peers_ready(cluster, NODES, cluster.edges)
    page = fresh_page(owned_by="edge1")
    for guessed in ("guessed", "False"):
        claim = pack_scheme(PeerScheme("https", guessed))
        status, _, _ = await read(
            cluster.edges[1], page, **{"CDN-Loop": "cdn-proxy", SCHEME_HEADER: claim}
        )
        assert status == 403, guessed
    assert origin_asks(cluster, page) == 0


@pytest.mark.parametrize("cluster", ["memory", "disk"], indirect=True)
async def test_an_answer_the_owner_does_not_store_costs_the_origin_one_request(
    cluster: PeerCluster,
) -> None:
    """The owner relays what it fetched for the peer, labelled (its origin request came
    after the purges the label names), so the asking node need not ask the origin again.
    A no-store answer is neither stored by the owner nor by the asking node."""
    await peers_ready(cluster, NODES, cluster.edges)
    edge = cluster.edges[0]
    page = UNSTORED_PAGES[0]
    for asked in (1, 2):  # each miss: one origin request, through the owner
        status, body, cache = await read(edge, page)
        assert (status, body) == (200, str(unread(cluster))) and "peer=edge1" in cache, cache
        assert origin_asks(cluster, page) == asked


@pytest.mark.parametrize("cluster", ["memory", "disk"], indirect=True)
async def test_a_large_object_through_its_owner_is_byte_exact_and_fetched_once(
    cluster: PeerCluster,
) -> None:
    """300 kB, read whole or streamed into a shared tier (decision 0039): one origin
    request for the fleet, the same bytes from every node."""
    await peers_ready(cluster, NODES, cluster.edges)
    page = LARGE_PAGES[0]
    expected = large_body(D, page, unread(cluster))
    for edge in (cluster.edges[0], cluster.edges[2], cluster.edges[0]):
        async with (
            aiohttp.ClientSession() as client,
            client.get(f"{edge.url}/{D}/{page}", headers={"Host": D}) as response,
        ):
            assert response.status == 200
            assert await response.read() == expected
    assert origin_asks(cluster, page) == 1


def samples(text: str, name: str) -> dict[str, float]:
    """The samples of metric ``name`` in an exposition: labels text -> value."""
    found = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line[len(name) :].rpartition(" ")
            found[labels] = float(value)
    return found


async def test_metrics_show_owner_load_origin_requests_avoided_and_the_origin_offload(
    cluster: PeerCluster,
) -> None:
    """12 objects read through all three nodes: each read a peer filled (Cache-Status names
    the owner) is an origin request avoided and one answer in the owner's load; most bytes
    served did not come from the origin. The figures are counted from a scrape before the
    reads (the module's cluster served other tests before)."""
    await peers_ready(cluster, NODES, cluster.edges)

    async def reported() -> str | None:  # a scrape with every node's report in it
        text = await metrics(cluster)
        served = samples(text, "cdn_proxy_served_bytes_total")
        return text if all(f'{{node="{node}"}}' in served for node in NODES) else None

    before = await until(reported, every=0.1)
    assert before is not None

    def grown(text: str, name: str) -> dict[str, float]:
        earlier = samples(before, name)
        return {
            labels: value - earlier.get(labels, 0) for labels, value in samples(text, name).items()
        }

    pages = [fresh_page(owned_by=node) for node in NODES for _ in range(4)]
    through: collections.Counter[str] = collections.Counter()  # owner -> peer fills used
    for page in pages:
        for edge in cluster.edges:
            status, body, cache = await read(edge, page)
            assert (status, body) == (200, str(unread(cluster))), cache
            if "peer=" in cache:
                through[cache.split("peer=")[1].split('"')[0]] += 1
    # 24 when every node lists every other all along (a node late to renew leaves the
    # others' lists for a moment on a loaded machine: that miss goes to the origin).
    assert sum(through.values()) >= 20, through
    assert sum(origin_asks(cluster, page) for page in pages) <= 2 * len(pages)

    async def counted() -> str | None:  # each used peer fill, in the reports
        text = await reported()
        if text is None:
            return None
        avoided = grown(text, "cdn_proxy_origin_requests_avoided_total")
        answers = grown(text, "cdn_proxy_peer_answers_total")
        done = sum(avoided.values()) >= sum(through.values()) and all(
            answers.get(f'{{node="{node}"}}', 0) >= count for node, count in through.items()
        )
        return text if done else None

    after = await until(counted, every=0.1)
    assert after is not None
    # The gauge: the share over every report listed ...
    served = sum(samples(after, "cdn_proxy_served_bytes_total").values())
    origin = sum(samples(after, "cdn_proxy_origin_bytes_total").values())
    offload = samples(after, "cdn_proxy_origin_offload")[""]
    assert offload == pytest.approx(1 - origin / served), (offload, served, origin)
    # ... and over this test's reads: most bytes served did not come from the origin.
    served = sum(grown(after, "cdn_proxy_served_bytes_total").values())
    origin = sum(grown(after, "cdn_proxy_origin_bytes_total").values())
    assert 0.5 < 1 - origin / served <= 1.0, (served, origin)


async def test_peers_misses_during_the_owners_fill_follow_it(cluster: PeerCluster) -> None:
    """The owner's fill began before the peers' requests arrived, and no purge was applied
    in between: they take its answer (one origin request), as any request would."""
    await peers_ready(cluster, NODES, cluster.edges)
    page = fresh_page(owned_by="edge1")
    held = cluster.origin.held[f"{D}/{page}"] = asyncio.Event()
    reads = [asyncio.create_task(read(cluster.edges[1], page))]  # the owner's own client
    await until(lambda: origin_asks(cluster, page) == 1, every=0.01)
    reads += [
        asyncio.create_task(read(edge, page)) for edge in (cluster.edges[0], cluster.edges[2])
    ]
    # A peer's request that did not follow the flight would ask the origin: give it time to.
    with contextlib.suppress(AssertionError):
        await until(lambda: origin_asks(cluster, page) > 1, every=0.01, within=2.0)
    held.set()
    for status, body, cache in await asyncio.gather(*reads):
        assert (status, body) == (200, str(unread(cluster))), cache
    assert origin_asks(cluster, page) == 1


async def trace_of(cluster: Cluster, page: str) -> dict[str, object]:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            f"{cluster.api_url}/api/v1/cdn/trace",
            json={"url": f"http://{D}/{D}/{page}"},
            headers={"Authorization": f"Bearer {cluster.token}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        answer: dict[str, object] = await response.json()
        return answer


async def test_the_trace_names_the_keys_owner_and_whether_it_answered(
    cluster: PeerCluster,
) -> None:
    """Asked with only-if-cached, so the trace makes the owner fill nothing."""
    await peers_ready(cluster, NODES, cluster.edges)
    page = fresh_page(owned_by="edge2")

    def word(answered: str) -> dict[str, object]:
        return {"node": "edge2", "among": list(NODES), "answered": answered}

    async def traced(answered: str) -> dict[str, object] | None:
        """The trace, once it says so (the control plane reads the live nodes from Valkey:
        on a loaded machine a node may miss a renewal, and be left out for a moment)."""
        answer = await trace_of(cluster, page)
        said.append(answer.get("owner"))
        return answer if answer.get("owner") == word(answered) else None

    said: list[object] = []

    try:
        await until(lambda: traced("does not hold it"), every=0.1)
    except AssertionError:
        raise AssertionError(said[-3:]) from None
    assert origin_asks(cluster, page) == 0  # the trace filled nothing
    assert (await read(cluster.edges[2], page))[:2] == (
        200,
        str(unread(cluster)),
    )  # the owner fills it
    try:
        answer = await until(lambda: traced("holds it"), every=0.1)
    except AssertionError:
        raise AssertionError(said[-3:]) from None
    assert answer is not None
    assert "  owner: edge2, asked: holds it" in describe(answer).splitlines()  # cdn-proxy trace
    await cluster.edges[2].node.kill()
    answered = (await trace_of(cluster, page))["owner"]
    assert isinstance(answered, dict)
    assert answered["answered"] != "holds it"  # no answer, or another owner once it left
