"""The peer list (decision 0047): each member of a fleet with ``peer_fill`` writes where its
node's edge is reached, and reads, at each renewal, the live nodes that take peer fills."""

from __future__ import annotations

from proxy.fleet.member import FleetMember
from proxy.fleet.peers import live_peers
from proxy.fleet.scripts import FleetScripts, MemberRow, MembersView
from proxy.store.memory import MemoryStore
from proxy.wire.reports import MemberInfo, pack_member_info, unpack_member_info
from tests.fleet.conftest import DOMAINS, Fleet, settings
from tests.polling import until


def member(fleet: Fleet, node: str, *, peer_fill: bool, advertise: str = "") -> FleetMember:
    made = FleetMember(
        settings=settings(fleet.server.url, peer_fill=peer_fill),
        store=MemoryStore(max_bytes=1 << 20),
        domains=DOMAINS,
        node=node,
        advertise=advertise,
    )
    return made


async def test_members_list_the_live_nodes_that_take_peer_fills(fleet: Fleet) -> None:
    one = member(fleet, "edge-1", peer_fill=True, advertise="http://127.0.0.1:8001")
    two = member(fleet, "edge-2", peer_fill=True, advertise="http://127.0.0.1:8002")
    plain = member(fleet, "edge-3", peer_fill=False, advertise="http://127.0.0.1:8003")
    members = [one, two, plain]
    try:
        for each in members:
            await each.start()
        both = {"edge-1": "http://127.0.0.1:8001", "edge-2": "http://127.0.0.1:8002"}

        async def listed() -> bool:
            return one.peers == both and two.peers == both

        await until(listed, every=0.02)
        assert plain.peers == {}  # peer_fill off: it reads no list, and is in none
        await two.close()  # its lease runs out: it leaves the others' list

        async def left() -> bool:
            return one.peers == {"edge-1": "http://127.0.0.1:8001"}

        await until(left, every=0.02)
    finally:
        for each in members:
            await each.close()


def row(info: MemberInfo, *, expires_ms: int = 2000, text: str | None = None) -> MemberRow:
    return MemberRow("m", pack_member_info(info) if text is None else text, expires_ms, 0)


def test_the_list_leaves_out_dead_unreadable_and_unwilling_members() -> None:
    good = MemberInfo(node="a", peer_fill=True, advertise="http://10.0.0.1:80")
    view = MembersView(
        now_ms=1000,
        members=(
            row(good),
            row(MemberInfo(node="a", peer_fill=True, advertise="http://10.0.0.9:80")),
            row(MemberInfo(node="b", peer_fill=True, advertise="http://10.0.0.2:80"), expires_ms=0),
            row(MemberInfo(node="d", peer_fill=False, advertise="")),
            row(good, text="not json"),
        ),
    )
    assert live_peers(view) == {"a": "http://10.0.0.1:80"}


def test_a_member_renewed_late_is_listed_by_its_live_lease() -> None:
    """A member writes its info at the start of the sync that renews it: after a late renewal
    the info says ``fenced`` though the lease is live and the member serves again. The lease
    decides, or the node would drop out of every owner list for a whole renewal, and each of
    its keys cost the origin one more request (decision 0047, the renewal flicker)."""
    late = MemberInfo(node="c", peer_fill=True, advertise="http://10.0.0.3:80", fenced=True)
    assert live_peers(MembersView(now_ms=1000, members=(row(late),))) == {"c": "http://10.0.0.3:80"}
    ended = MembersView(now_ms=1000, members=(row(late, expires_ms=1000),))
    assert live_peers(ended) == {}


def test_an_older_builds_info_reads_as_taking_no_peer_fills() -> None:
    old = '{"node":"a","worker":0,"pid":1,"address":"","fenced":false,"applied":3,"purges":1}'
    info = unpack_member_info(old)
    assert (info.peer_fill, info.advertise) == (False, "")
    new = pack_member_info(MemberInfo(node="a", peer_fill=True, advertise="http://10.0.0.1:80"))
    assert '"purges":0' in new  # the purge script's plain search still finds the key
    assert unpack_member_info(new).advertise == "http://10.0.0.1:80"


async def test_every_member_holds_the_one_peer_key_valkey_holds(fleet: Fleet) -> None:
    """The first member to ask sets the fleet's peer key; every other, and the first again
    at its next renewal, reads that one (SET NX GET answers the value held: it was read as
    SET's "OK" flag, so every member but the first held the text "False", a key any client
    could send). The control plane reads it without setting one."""
    scripts = FleetScripts.of(settings(fleet.server.url))
    try:
        assert await scripts.read_peer_key() is None  # none set: the control plane sets none
        assert await scripts.read_peer_key() is None
        one = member(fleet, "edge-1", peer_fill=True, advertise="http://127.0.0.1:8001")
        two = member(fleet, "edge-2", peer_fill=True, advertise="http://127.0.0.1:8002")
        try:
            for each in (one, two):
                await each.start()

            async def agreed() -> bool:
                return one.peer_key is not None and one.peer_key == two.peer_key

            await until(agreed, every=0.02)
            held = await scripts.read_peer_key()
            assert held is not None and len(held) >= 32, held
            assert one.peer_key == held
            assert await scripts.peer_key("another") == held  # a later member's offer loses
        finally:
            for each in (one, two):
                await each.close()
    finally:
        await scripts.aclose()
