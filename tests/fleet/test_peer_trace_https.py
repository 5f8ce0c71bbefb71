"""The trace names an https key's owner, and asks it (issue 33, decision 0047), on real
processes: three edge nodes with peer fills and a real TLS listener each (trustme), Valkey,
a control plane and an origin.

An https request is keyed by its scheme (decision 0041), and so is its owner: the owner is
chosen from the normalised cache key, which carries the scheme. The owner believes a
peer's scheme only with the fleet's peer key; the control plane reads it from Valkey as the
members do, and asks the owner with it, with ``only-if-cached`` so the trace fills nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from benchmarks.fleet_cluster import Edge, free_port
from benchmarks.peer_fill_latency import NODES, D, PeerCluster
from proxy.core.peer import owner_of
from tests.edge.tls_support import Certificates
from tests.fleet.test_peer_nodes import https_page, origin_asks, peers_ready

pytestmark = pytest.mark.slow  # real processes


class TlsPeerCluster(PeerCluster):
    """A PeerCluster whose edge nodes each have a TLS listener for ``D`` (``tls_urls``)."""

    def __init__(self, directory: Path, certs: Certificates) -> None:
        super().__init__(directory, domains=(D,), workers=(1, 1, 1))
        self.pair = certs.issue(D)
        self.tls_urls: dict[str, str] = {}

    async def _new_edge(self, index: int, count: int) -> Edge:
        edge = await super()._new_edge(index, count)
        port = free_port()
        config = edge.node.config
        text = config.read_text().replace("[edge]\n", f'[edge]\ntls_listen = "127.0.0.1:{port}"\n')
        tls = f'tls_cert = "{self.pair.cert}"\ntls_key = "{self.pair.key}"\n'
        text = text.replace(
            f'origin = "{self.origin.url}"\n', f'origin = "{self.origin.url}"\n{tls}'
        )
        config.write_text(text)
        self.tls_urls[edge.node.name] = f"https://127.0.0.1:{port}"
        return edge


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return Certificates(tmp_path)


@pytest.fixture
async def cluster(tmp_path: Path, certs: Certificates) -> AsyncIterator[TlsPeerCluster]:
    started = TlsPeerCluster(tmp_path, certs)
    started.peer_timeout = 3.0  # a loaded machine is slow to answer
    try:
        await started.start()
        yield started
    finally:
        await started.close()


async def read_tls(
    cluster: TlsPeerCluster, certs: Certificates, node: str, page: str
) -> tuple[int, str, str]:
    """One GET over TLS to ``node``'s TLS listener (SNI: D): status, body, Cache-Status."""
    async with (
        aiohttp.ClientSession() as client,
        client.get(
            f"{cluster.tls_urls[node]}/{D}/{page}",
            headers={"Host": D},
            ssl=certs.client(),
            server_hostname=D,
        ) as response,
    ):
        return response.status, await response.text(), response.headers.get("Cache-Status", "")


async def owner_said(cluster: TlsPeerCluster, url: str) -> dict[str, object]:
    """The trace's ``owner`` field for ``url`` (POST /api/v1/cdn/trace)."""
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            f"{cluster.api_url}/api/v1/cdn/trace",
            json={"url": url},
            headers={"Authorization": f"Bearer {cluster.token}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        answer = await response.json()
        owner = answer.get("owner")
        assert isinstance(owner, dict), answer
        return owner


async def test_the_trace_names_and_asks_the_owner_of_an_https_key(
    cluster: TlsPeerCluster, certs: Certificates
) -> None:
    await peers_ready(cluster, NODES, cluster.edges)
    page = https_page(owned_by="edge1")
    http_owner = owner_of(f"{D}\0/{D}/{page}".encode(), NODES)
    https_url, http_url = f"https://{D}/{D}/{page}", f"http://{D}/{D}/{page}"
    assert await owner_said(cluster, https_url) == {
        "node": "edge1",
        "among": list(NODES),
        "answered": "does not hold it",
    }
    assert origin_asks(cluster, page) == 0  # the trace filled nothing
    # A client's https request on a node that does not own the key: filled by its owner.
    status, body, cache = await read_tls(cluster, certs, "edge0", page)
    assert (status, body) == (200, "1") and 'detail="peer=edge1"' in cache, cache
    assert cluster.origin.schemes.count((f"{D}/{page}", "https")) == 1
    assert (await owner_said(cluster, https_url))["answered"] == "holds it"
    # The http key of the same URL is another key, with its owner: nobody holds it.
    assert await owner_said(cluster, http_url) == {
        "node": http_owner,
        "among": list(NODES),
        "answered": "does not hold it",
    }
    assert origin_asks(cluster, page) == 1
