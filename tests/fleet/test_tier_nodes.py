"""A fleet whose edge node has a shared tier (decision 0040), on real processes: Valkey (without
persistence), a control plane, an edge node of two workers with ``cache.disk_path``, each node
reaching Valkey through a relay (benchmarks/fleet_cluster.py), and an origin that counts what
it is asked and answers If-None-Match with 304.

- A node killed (-9), or cut off from Valkey, while purges are answered 200 catches up before
  it serves from its tier again: after its restart or the heal, what the purges covered is
  fetched anew, the rest is still a hit.
- After Valkey lost its data (a new epoch), the tier's entries are revalidated, not dropped:
  the origin sees conditional requests and answers 304, the client gets the stored body
  byte-exact; content changed at the origin is served new; an entry without a validator is a
  miss; and a distrusted entry is never served as stale-while-revalidate or stale-if-error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import valkey.asyncio

from benchmarks.fleet_cluster import Cluster, Edge, large_body
from tests.polling import until

pytestmark = pytest.mark.slow  # real processes, killed and restarted

D0, D1 = "d0.test", "d1.test"
SAME, CHANGED, PLAIN, STALE, LARGE = "same", "changed", "plain", "stale", "large"
VALIDATED = (SAME, CHANGED, STALE, LARGE)  # answered with an ETag; PLAIN without one


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    started = Cluster(
        tmp_path, workers=(2,), disk=True, validated=VALIDATED, stale=(STALE,), large=(LARGE,)
    )
    try:
        await started.start()
        yield started
    finally:
        await started.close()


async def read(edge: Edge, domain: str, page: str) -> tuple[int, str, str]:
    """One GET on a connection of its own (either worker): status, body, Cache-Status."""
    status, body, cache = await read_bytes(edge, domain, page)
    return status, body.decode("latin-1"), cache


async def read_bytes(edge: Edge, domain: str, page: str) -> tuple[int, bytes, str]:
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as client,
        client.get(f"{edge.url}/{domain}/{page}", headers={"Host": domain}) as response,
    ):
        body = await response.read()
        return response.status, body, response.headers.get("Cache-Status", "")


async def fill(cluster: Cluster, domain: str, *pages: str) -> None:
    """Each page stored, and a hit on the node (from either worker's memory, or the tier)."""
    edge = cluster.edges[0]
    for page in pages:
        await read(edge, domain, page)

        async def hit(page: str = page) -> bool:
            return "hit" in (await read(edge, domain, page))[2].split(";")[1]

        await until(hit, every=0.01)


async def api(cluster: Cluster, endpoint: str, body: dict[str, object]) -> None:
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            f"{cluster.api_url}/api/v1/cdn/{endpoint}",
            json=body,
            headers={"Authorization": f"Bearer {cluster.token}"},
        ) as response,
    ):
        assert response.status == 200, await response.text()


def asked(cluster: Cluster, domain: str, page: str, since: int) -> list[tuple[str | None, int]]:
    """What the origin was asked for the page since ``since``: (If-None-Match, status)."""
    key = f"{domain}/{page}"
    return [(inm, status) for seen, inm, status in cluster.origin.seen[since:] if seen == key]


async def test_a_node_killed_while_purges_were_made_catches_up_before_serving_its_tier(
    cluster: Cluster,
) -> None:
    await fill(cluster, D0, SAME, CHANGED, PLAIN)
    await fill(cluster, D1, SAME, PLAIN)
    edge = cluster.edges[0]
    await edge.node.kill()
    # Answered 200 once the dead node's lease ran out in Valkey (it is not waited for).
    version = cluster.origin.bump(D0, [CHANGED])
    await api(cluster, "purge", {"domain": D0, "urls": [f"/{D0}/{CHANGED}"]})
    tagged = cluster.origin.bump(D0, [PLAIN])
    await api(cluster, "purge", {"domain": D0, "tags": [PLAIN], "soft": True})
    cleared = cluster.origin.bump(D1)
    await api(cluster, "clear-cache", {"domain": D1})
    since = len(cluster.origin.seen)
    await edge.node.start()
    # From its first answer on, nothing the purges covered comes from its tier.
    for _ in range(10):
        assert (await read(edge, D0, CHANGED))[:2] == (200, str(version))
        assert (await read(edge, D0, PLAIN))[:2] == (200, str(tagged))
        assert (await read(edge, D1, SAME))[:2] == (200, str(cleared))
        assert (await read(edge, D1, PLAIN))[:2] == (200, str(cleared))
    # What they did not cover is still on disk: served from the tier, the origin not asked.
    status, body, cache = await read(edge, D0, SAME)
    assert (status, body) == (200, "1")
    assert "hit" in cache, (cache, cluster.origin.seen)
    assert asked(cluster, D0, SAME, since) == []


async def test_a_node_cut_off_from_valkey_catches_up_before_serving_its_tier_again(
    cluster: Cluster,
) -> None:
    """Its traffic to Valkey black-holed while a URL purge is answered 200 (once its lease
    ran out), the node forwards what it would have served from cache; after the heal, the
    purged page never comes from its tier or memory, and the other page is a hit again."""
    await fill(cluster, D0, SAME, CHANGED)
    edge = cluster.edges[0]
    edge.relay.blackhole()
    version = cluster.origin.bump(D0, [CHANGED])
    await api(cluster, "purge", {"domain": D0, "urls": [f"/{D0}/{CHANGED}"]})
    status, body, cache = await read(edge, D0, SAME)
    assert (status, body) == (200, "1")
    assert "fenced" in cache, cache  # its lease ran out: nothing from either tier
    edge.relay.heal()

    async def hit_again() -> bool:
        assert (await read(edge, D0, CHANGED))[:2] == (200, str(version))
        return "hit" in (await read(edge, D0, SAME))[2]

    await until(hit_again, every=0.02)
    for _ in range(10):
        assert (await read(edge, D0, CHANGED))[:2] == (200, str(version))


async def test_after_valkey_lost_its_data_the_tier_is_revalidated_not_refilled(
    cluster: Cluster,
) -> None:
    await fill(cluster, D0, SAME, CHANGED, PLAIN, STALE, LARGE)
    edge = cluster.edges[0]
    before = {page: await read(edge, D0, page) for page in (SAME, CHANGED, PLAIN, STALE, LARGE)}
    assert all(status == 200 and "hit" in cache for status, _, cache in before.values())
    await cluster.restart_valkey()  # the acks are gone with the rest of its data
    # Both workers have adopted the new epoch (each acked in it after applying it).
    await until(lambda: members_acked(cluster), every=0.02)
    version = cluster.origin.bump(D0, [CHANGED])
    cluster.origin.failing.add(f"{D0}/{STALE}")
    since = len(cluster.origin.seen)

    # Unchanged: a conditional request, a 304, and the stored body, byte for byte.
    status, body, cache = await read(edge, D0, SAME)
    assert (status, body) == (200, before[SAME][1])
    assert cache == "cdn-proxy; fwd=stale; stored", cache  # revalidated, refreshed
    assert asked(cluster, D0, SAME, since) == [('"1"', 304)]
    # Trusted again: hits on either worker (each reads the refreshed entry from the tier).
    for _ in range(10):
        status, body, cache = await read(edge, D0, SAME)
        assert (status, body) == (200, before[SAME][1])
        assert "hit" in cache, cache
    assert asked(cluster, D0, SAME, since) == [('"1"', 304)]

    # A body in a file of the tier: the 304 keeps it, byte for byte.
    status, large, cache = await read_bytes(edge, D0, LARGE)
    assert (status, cache) == (200, "cdn-proxy; fwd=stale; stored")
    assert large == large_body(D0, LARGE, 1)
    assert asked(cluster, D0, LARGE, since) == [('"1"', 304)]
    assert (await read_bytes(edge, D0, LARGE))[1] == large  # and a hit of it after

    # Changed at the origin: the conditional request gets the new version, served.
    assert (await read(edge, D0, CHANGED))[:2] == (200, str(version))
    assert asked(cluster, D0, CHANGED, since) == [('"1"', 200)]
    # No validator: nothing to revalidate with, so a miss, asked unconditionally.
    status, body, cache = await read(edge, D0, PLAIN)
    assert (status, body) == (200, "1")
    assert "fwd=uri-miss" in cache, cache
    assert asked(cluster, D0, PLAIN, since) == [(None, 200)]
    # Allowed stale-while-revalidate and stale-if-error when stored, but distrusted: the
    # origin's 500 reaches the client, never the stored body.
    status, body, cache = await read(edge, D0, STALE)
    assert status == 500 and body != before[STALE][1], (status, body, cache)
    assert asked(cluster, D0, STALE, since) == [('"1"', 500)]


async def members_acked(cluster: Cluster) -> bool:
    """Whether both of the edge's workers have acked something in Valkey's current data set
    (a member acks after it applied what its sync read: here, the new epoch)."""
    client = valkey.asyncio.Valkey(port=cluster.valkey_port)
    try:
        acks = await client.hgetall("{cdn}:acks")  # type: ignore[misc]
    finally:
        await client.aclose()
    return sum(1 for m, ack in acks.items() if m.startswith(b"edge0/") and int(ack) > 0) == 2
