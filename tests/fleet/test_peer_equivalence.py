"""Through a peer as against the origin (issue 33, decision 0047): conditional requests,
Range, HEAD, Vary, compressed copies and soft purges answer a client of a node the same when
the key's owner is another node (a peer fill) as when the node owns the key (it asks the
origin itself).

Three real edge nodes with peer fills (compressing into br and gzip), one Valkey, a control
plane and one origin. Each request shape is sent to edge0 twice: for a page edge1 owns, and for
a page of the same origin behaviour that edge0 owns. The two answers must agree on status, body
and the fields a client acts on; only Date, Age and Cache-Status (which names the peer) may
differ.

The tests share the module's cluster (issue 34: a cluster takes seconds to start): each
reads pages of its own shapes only, and purges only those.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import aiohttp
import brotli
import pytest
import pytest_asyncio

from benchmarks.fleet_cluster import Edge
from benchmarks.peer_fill_latency import NODES, D, PeerCluster, fresh_page
from tests.fleet.test_peer_nodes import api_post, origin_asks, peers_ready

# slow: real processes. One event loop for the module: its cluster outlives each test.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

# The fields a client acts on, compared between the two answers.
COMPARED = (
    "Content-Length",
    "Content-Range",
    "Content-Encoding",
    "ETag",
    "Vary",
    "Cache-Control",
    "Accept-Ranges",
)

# For each shape: a page edge1 owns (a peer fill for edge0) and one edge0 owns (its own).
SHAPES = ("conditional", "range", "head", "vary", "soft", "compressed")
PAGES = {shape: (fresh_page(owned_by="edge1"), fresh_page(owned_by="edge0")) for shape in SHAPES}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PeerCluster]:
    started = PeerCluster(
        tmp_path_factory.mktemp("peers"),
        domains=(D,),
        workers=(1, 1, 1),
        validated=[page for shape in ("conditional", "soft") for page in PAGES[shape]],
        varied=PAGES["vary"],
        wordy=PAGES["compressed"],
    )
    started.peer_timeout = 3.0  # a loaded machine is slow to answer
    started.domain_extra = 'compress = ["br", "gzip"]\n'

    try:
        await started.start()
        yield started
    finally:
        await started.close()


Answer = tuple[int, bytes, dict[str, str | None], str]


async def ask(edge: Edge, page: str, method: str = "GET", **headers: str) -> Answer:
    """One request: status, body, the compared fields, and Cache-Status."""
    async with (
        aiohttp.ClientSession(auto_decompress=False) as client,
        client.request(
            method, f"{edge.url}/{D}/{page}", headers={"Host": D, **headers}
        ) as response,
    ):
        body = await response.read()
        fields = {name: response.headers.get(name) for name in COMPARED}
        return response.status, body, fields, response.headers.get("Cache-Status", "")


async def both(edge: Edge, shape: str, method: str = "GET", **headers: str) -> list[Answer]:
    """The same request for the page another node owns, then for the page ``edge`` owns."""
    return [await ask(edge, page, method, **headers) for page in PAGES[shape]]


def same(answers: list[Answer]) -> Answer:
    """The two answers agree but for Cache-Status; returns the peer's."""
    through_peer, own = answers
    assert through_peer[:3] == own[:3], answers
    return through_peer


async def test_requests_through_a_peer_answer_as_through_the_origin(
    cluster: PeerCluster,
) -> None:
    await peers_ready(cluster, NODES, cluster.edges)
    edge = cluster.edges[0]
    peer_page, own_page = PAGES["conditional"]

    # Conditional: on a miss, and on the node's copy.
    status, body, fields, cache = same(await both(edge, "conditional", **{"If-None-Match": '"1"'}))
    assert (status, body, fields["ETag"]) == (304, b"", '"1"'), cache
    assert "peer=edge1" in cache  # the miss did go through the owner
    assert same(await both(edge, "conditional"))[:2] == (200, b"1")
    assert same(await both(edge, "conditional", **{"If-None-Match": '"1"'}))[0] == 304
    assert same(await both(edge, "conditional", **{"If-None-Match": '"0"'}))[:2] == (200, b"1")

    # Range: on a miss, sent to the origin as it is (this origin ignores Range: a 200), then
    # from the node's copy.
    assert same(await both(edge, "range", Range="bytes=0-0"))[:2] == (200, b"1")
    assert same(await both(edge, "range"))[:2] == (200, b"1")
    ranged = same(await both(edge, "range", Range="bytes=0-0"))
    assert ranged[:2] == (206, b"1") and ranged[2]["Content-Range"] == "bytes 0-0/1", ranged
    assert same(await both(edge, "range", Range="bytes=5-9"))[0] == 416

    # HEAD: on a miss, and on the node's copy once a GET filled it.
    head = same(await both(edge, "head", "HEAD"))
    assert head[:2] == (200, b"") and head[2]["Content-Length"] == "1", head
    assert same(await both(edge, "head"))[:2] == (200, b"1")
    assert same(await both(edge, "head", "HEAD"))[:2] == (200, b"")

    # Vary: each language its own variant, through the owner as from the origin.
    for language in ("en", "fr", "en"):
        varied = same(await both(edge, "vary", **{"Accept-Language": language}))
        assert varied[:2] == (200, f"1 {language}".encode()), varied
        assert varied[2]["Vary"] == "Accept-Language"
    for page in PAGES["vary"]:  # one origin request a language, for the fleet
        assert origin_asks(cluster, page) == 2, page

    # Compressed copies: each coding asked, the same bytes through the owner as from the
    # node's own fill (the edge compresses once per coding, decision 0035).
    text = b"version 1. " * 400
    for coding, expected in (("gzip", gzip.decompress), ("br", brotli.decompress)):
        for _ in range(2):  # the fill, then the node's copy
            answer = same(await both(edge, "compressed", **{"Accept-Encoding": coding}))
            assert answer[2]["Content-Encoding"] == coding, answer[2]
            assert expected(answer[1]) == text
    plain = same(await both(edge, "compressed", **{"Accept-Encoding": "identity"}))
    assert plain[:2] == (200, text) and plain[2]["Content-Encoding"] is None

    # The origin was asked the same number of times for both pages of each shape.
    for shape in ("conditional", "head", "vary", "compressed"):
        peer, own = PAGES[shape]
        assert origin_asks(cluster, peer) == origin_asks(cluster, own), shape
    assert origin_asks(cluster, peer_page) >= 1 and origin_asks(cluster, own_page) >= 1


async def test_a_soft_purge_through_a_peer_revalidates_as_through_the_origin(
    cluster: PeerCluster,
) -> None:
    """A soft URL purge marks the copies stale: the next read revalidates (the origin
    answers 304 to the stored ETag) and is served, through the owner as from the origin; a
    version bumped before the purge is fetched anew."""
    await peers_ready(cluster, NODES, cluster.edges)
    edge = cluster.edges[0]
    assert same(await both(edge, "soft"))[:2] == (200, b"1")
    urls = [f"/{D}/{page}" for page in PAGES["soft"]]
    await api_post(cluster, "purge", {"domain": D, "urls": urls, "soft": True})
    assert same(await both(edge, "soft"))[:2] == (200, b"1")
    for page in PAGES["soft"]:  # revalidated with the origin, never served as it was
        assert any(
            asked == '"1"' for seen, asked, _ in cluster.origin.seen if seen == f"{D}/{page}"
        )
    version = cluster.origin.bump(D, PAGES["soft"])
    await api_post(cluster, "purge", {"domain": D, "urls": urls, "soft": True})
    assert same(await both(edge, "soft"))[:2] == (200, str(version).encode())
