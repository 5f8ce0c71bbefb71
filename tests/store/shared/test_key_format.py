"""The entry keys' layout is named in the tier, and entries of another layout are never read
(decision 0041): the layout before it marked the https key with a suffix (" https") that an
http request-target could spell, so its records start empty, once, at the node's next start.
"""

from __future__ import annotations

from pathlib import Path

import lmdb

from proxy.core.cache.keys import cache_target
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.records import KEY_FORMAT
from tests.store.shared.actor import body, response
from tests.store.shared.conftest import body_files

DOMAIN = "example.com"
MAX = 64 << 20


def stored(tier: SharedTier, target: str, data: bytes) -> bool:
    writer = Fill(tier, DOMAIN, target, response(), tier.lookup(DOMAIN, target).token)
    assert writer.append(data)
    return writer.commit()


def layout_of(directory: Path) -> bytes | None:
    env = lmdb.open(str(directory / "entries"), max_dbs=12)
    try:
        with env.begin() as txn:
            return txn.get(b"format", db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def as_the_layout_before(directory: Path) -> None:
    """Make the directory's entries look as the code before decision 0041 left them."""
    env = lmdb.open(str(directory / "entries"), max_dbs=12)
    try:
        with env.begin(write=True) as txn:
            txn.delete(b"format", db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def test_a_node_names_the_layout_and_keeps_its_entries_across_a_restart(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    tier = SharedTier.open_node(directory, max_bytes=MAX)
    assert stored(tier, "/kept", b"x" * 100_000)  # a body in a file
    tier.close()
    assert layout_of(directory) == KEY_FORMAT
    tier = SharedTier.open_node(directory, max_bytes=MAX)
    try:
        assert [e.length for e in tier.lookup(DOMAIN, "/kept").variants] == [100_000]
    finally:
        tier.close()


def test_entries_of_the_layout_before_are_never_read(tmp_path: Path) -> None:
    """Under the old layout ``/p https`` was the https key of ``/p``: an http request for the
    target ``/p https`` would have read it. After the step, nothing of it is read, and its
    body files are gone."""
    directory = tmp_path / "cache"
    tier = SharedTier.open_node(directory, max_bytes=MAX)
    assert stored(tier, "/p https", body(1, 100_000))  # the old https key of /p
    assert stored(tier, "/p", b"plain")
    tier.close()
    as_the_layout_before(directory)
    tier = SharedTier.open_node(directory, max_bytes=MAX)
    try:
        for target in ("/p https", "/p", cache_target("/p", True)):
            assert tier.lookup(DOMAIN, target).variants == (), target
        assert body_files(directory / "bodies") == []
        assert tier.stats().entries == 0
        assert stored(tier, "/p", b"new")  # and the tier stores again
        assert [e.response.body for e in tier.lookup(DOMAIN, "/p").variants] == [b"new"]
    finally:
        tier.close()
    assert layout_of(directory) == KEY_FORMAT
