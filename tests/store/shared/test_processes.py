"""The shared tier across real processes: one node's workers share it, it stays warm across a
restart and a kill -9, a fill cut short is never served, purges survive a kill -9 right after
they return, and a second node is refused (decision 0030)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from proxy.core.purge.purges import purge_request
from proxy.errors import CacheDirectoryLocked
from proxy.store.shared import SharedTier
from tests.store.shared.actor import body, fill
from tests.store.shared.conftest import Actor, body_files, run_actor

DOMAIN = "example.com"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.slow
def test_a_fill_by_one_process_is_a_hit_for_another(tier: SharedTier) -> None:
    directory = tier.directory
    assert fill(tier, DOMAIN, "/by-node", body(1, 300_000))
    assert run_actor("read", directory, tier.instance, DOMAIN, "/by-node") == (
        f"hit {sha(body(1, 300_000))}"
    )
    out = run_actor("fill", directory, tier.instance, DOMAIN, "/by-worker", 2_000, 2)
    assert out == "stored"
    (entry,) = tier.lookup(DOMAIN, "/by-worker").variants
    assert tier.read_all(entry) == body(2, 2_000)
    assert run_actor("read", directory, tier.instance, DOMAIN, "/nothing") == "miss"


@pytest.mark.slow
def test_a_purge_by_the_node_holds_in_another_process(tier: SharedTier) -> None:
    assert fill(tier, DOMAIN, "/a", b"a")
    assert run_actor("read", tier.directory, tier.instance, DOMAIN, "/a") == f"hit {sha(b'a')}"
    tier.clear_domain(DOMAIN)
    assert run_actor("read", tier.directory, tier.instance, DOMAIN, "/a") == "miss"


@pytest.mark.slow
@pytest.mark.parametrize("purge", ["clear", "tag", "prefix", "url"])
def test_a_purge_holds_in_a_worker_that_has_read_before(tier: SharedTier, purge: str) -> None:
    """A worker keeps each domain's parsed purge state while nothing is committed: a purge
    committed by the node must reach its next lookup (a URL purge: read on from the URL log
    where the worker stopped, decision 0048)."""
    assert fill(tier, DOMAIN, "/a", b"a")
    tier.purge(DOMAIN, purge_request("url", ["/unrelated"]))  # the domain has a state record
    worker = Actor("read-twice", tier.directory, tier.instance, DOMAIN, "/a")
    assert worker.line() == f"hit {sha(b'a')}"
    if purge == "clear":
        tier.clear_domain(DOMAIN)
    else:
        items = {"tag": ["t1"], "url": ["/a"]}.get(purge, ["/"])
        tier.purge(DOMAIN, purge_request(purge, items))
    worker.say("again")
    assert worker.line() == "miss"
    worker.say("done")
    assert worker.returncode() == 0


def test_warm_after_a_restart(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    assert fill(tier, DOMAIN, "/small", b"small")
    assert fill(tier, DOMAIN, "/big", body(3, 1_000_000))
    tier.close()
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    try:
        assert tier.lookup(DOMAIN, "/small").variants[0].response.body == b"small"
        assert tier.read_all(tier.lookup(DOMAIN, "/big").variants[0]) == body(3, 1_000_000)
    finally:
        tier.close()


@pytest.mark.slow
def test_warm_after_kill_9_of_the_node(tmp_path: Path) -> None:
    node = Actor("node", tmp_path, DOMAIN, "/big", 1_000_000, 4)
    assert node.line() == "done"
    node.kill()
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    try:
        (entry,) = tier.lookup(DOMAIN, "/big").variants
        assert tier.read_all(entry) == body(4, 1_000_000)
    finally:
        tier.close()


@pytest.mark.slow
def test_a_fill_killed_half_way_is_never_served(tier: SharedTier) -> None:
    assert fill(tier, DOMAIN, "/big", body(5, 4_000_000))  # the version before
    writer = Actor("fill-hang", tier.directory, tier.instance, DOMAIN, "/big", 8_000_000, 6)
    assert writer.line() == "half"
    writer.kill()
    (entry,) = tier.lookup(DOMAIN, "/big").variants
    assert entry.length == 4_000_000
    assert tier.read_all(entry) == body(5, 4_000_000)
    writer = Actor("fill-hang", tier.directory, tier.instance, DOMAIN, "/new", 8_000_000, 7)
    assert writer.line() == "half"
    writer.kill()
    assert tier.lookup(DOMAIN, "/new").variants == ()
    assert len(body_files(tier.bodies / "tmp")) == 2  # what the killed writers left


@pytest.mark.slow
def test_the_node_sweeps_what_killed_writers_left(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    writer = Actor("fill-hang", tmp_path, tier.instance, DOMAIN, "/big", 8_000_000, 9)
    assert writer.line() == "half"
    writer.kill()
    assert len(body_files(tier.bodies / "tmp")) == 1
    tier.close()
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    try:
        assert body_files(tier.bodies) == []
        assert tier.lookup(DOMAIN, "/big").variants == ()
        assert fill(tier, DOMAIN, "/big", body(9, 200_000))  # and it still fills
    finally:
        tier.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("purges", "gone"),
    [
        (["clear"], True),
        (["url:hard:/a"], True),
        (["prefix:hard:/"], True),
        (["tag:hard:t1"], True),
        (["all:soft:"], False),
        (["tag:soft:t1"], False),
        (["url:hard:/other"], None),
    ],
)
def test_a_purge_survives_kill_9_right_after_it_returns(
    tmp_path: Path, purges: list[str], gone: bool | None
) -> None:
    node = Actor("node", tmp_path, DOMAIN, "/a", 1000, 8, *purges)
    assert node.line() == "done"
    node.kill()
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    try:
        variants = tier.lookup(DOMAIN, "/a").variants
        if gone:
            assert variants == ()
        elif gone is None:  # a purge of something else
            assert variants[0].response.freshness_lifetime == 3600.0
        else:  # soft: kept, but its hour of freshness ended at the purge, just after the fill
            assert variants[0].response.body == body(8, 1000)
            assert variants[0].response.freshness_lifetime < 60.0
    finally:
        tier.close()


def test_a_second_node_is_refused_naming_the_directory_and_holder(tier: SharedTier) -> None:
    out = run_actor("second-node", tier.directory)
    assert out.startswith(f"locked cache directory {tier.directory} is locked by pid ")
    assert tier.instance is not None and tier.instance in out
    with pytest.raises(CacheDirectoryLocked, match=str(tier.directory)):
        SharedTier.open_node(tier.directory, max_bytes=1 << 20)


@pytest.mark.slow
def test_a_worker_must_name_the_node_that_holds_the_directory(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    instance = tier.instance
    wrong = Actor("read", tmp_path, "0123456789abcdef", DOMAIN, "/a")
    assert wrong.returncode() != 0  # CacheDirectoryLocked: not that node's
    tier.close()
    late = Actor("read", tmp_path, instance, DOMAIN, "/a")
    assert late.returncode() != 0  # the node is gone
    assert run_actor("second-node", tmp_path) == "opened"  # the lock was released
