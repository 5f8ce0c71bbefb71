"""Targets too long for an LMDB key (issue 31 item 5, "Long URLs"): a URL of about 500 bytes
or more made the key past LMDB's 511-byte limit, so one GET marked the tier degraded and such
URLs were never stored. The key now names such a target by its hash, and the record keeps the
target, which a read checks."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from proxy.core.cache.keys import cache_target
from proxy.core.purge.purges import purge_request
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.records import KEY_MAX, entry_prefix
from tests.store.shared.actor import body, response

DOMAIN = "example.com"
LONG = "/search?q=" + "x" * 2_000
LONGER = "/search?q=" + "y" * 600


def stored(tier: SharedTier, target: str, data: bytes) -> bool:
    writer = Fill(tier, DOMAIN, target, response(), tier.lookup(DOMAIN, target).token)
    assert writer.append(data)
    return writer.commit()


@pytest.mark.parametrize("target", [LONG, LONGER, cache_target(LONGER, True), "/é" * 300])
@pytest.mark.parametrize("size", [100, 100_000])
def test_a_long_target_is_stored_and_found_with_no_fault(
    tier: SharedTier, target: str, size: int
) -> None:
    assert len(entry_prefix(DOMAIN, target)) + 8 <= KEY_MAX
    assert stored(tier, target, body(1, size))
    (entry,) = tier.lookup(DOMAIN, target).variants
    assert tier.read_all(entry) == body(1, size)
    assert tier.status().faults == 0 and tier.status().degraded is None
    for other in (target[:-1], target + "z", LONG + "/"):  # its neighbours are not it
        assert tier.lookup(DOMAIN, other).variants == ()


def test_a_purge_of_a_long_target_covers_it(tier: SharedTier) -> None:
    assert stored(tier, LONG, b"x")
    tier.purge(DOMAIN, purge_request("url", [LONG]))
    assert tier.lookup(DOMAIN, LONG).variants == ()


def test_a_record_under_a_long_targets_hash_that_keeps_another_target_is_not_served(
    tier: SharedTier, tmp_path: Path
) -> None:
    """What a hash collision would look like: the record under LONG's key names LONGER."""
    assert stored(tier, LONGER, b"the other one")
    env: lmdb.Environment = tier._env
    with env.begin(write=True, db=tier.db_entries) as txn:
        record = txn.get(entry_prefix(DOMAIN, LONGER))
        assert record is not None
        txn.put(entry_prefix(DOMAIN, LONG), record)
    assert tier.lookup(DOMAIN, LONG).variants == ()
    assert tier.peek(DOMAIN, LONG) is None
    assert [e.response.body for e in tier.lookup(DOMAIN, LONGER).variants] == [b"the other one"]
