"""How the shared tier chooses what to evict: the ``Evictor`` hook and its plainest policy.

A fill's commit (fill.py) is one LMDB write transaction. In it, the tier's evictor is told of
the new entry (``admit``: which entries to evict first, and whether to keep the new one at
all) and of every entry removed for another reason (``removed``: replaced, purged, found
corrupt). A hit, in any process, is ``hit(sequence)``: never a write transaction (decision
0030), so an evictor keeps what hits tell it outside LMDB (s3fifo.py: a shared map of
counters). Whatever an evictor decides, the commit then evicts oldest first (the ``order``
database) while the tier is still over ``max_bytes``: entries an evictor does not know
(stored before it was plugged in) still go, and the bound always holds.

``S3FifoEvictor`` (s3fifo.py) is the tier's policy (decision 0029); ``OldestFirst`` leaves
everything to that last step.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple, Protocol

import lmdb

from proxy.store.shared.health import Health


class Admission(NamedTuple):
    admitted: bool  # False: the new entry is not kept (its body file is removed)
    victims: list[tuple[bytes, int]]  # (entry key, sequence) to evict, in order


class Evictor(Protocol):
    def open(self, env: lmdb.Environment, directory: Path, capacity: int, health: Health) -> None:
        """Open what the policy keeps in the tier's entries environment (its own databases)
        and directory, for a tier of ``capacity`` bytes. Once, when the tier opens."""

    def next_sequence(self, txn: lmdb.Transaction, last: int) -> int:
        """The sequence for the entry being committed, above ``last`` (the last one given):
        its body file's name, its place in the ``order`` database, and what ``hit`` gets."""

    def hit(self, sequence: int) -> None:
        """A lookup found the entry stored under ``sequence``: in the caller's thread, in
        any process of the node, while other processes write. No LMDB write."""

    def admit(self, txn: lmdb.Transaction, key: bytes, sequence: int, cost: int) -> Admission:
        """A fill of ``cost`` bytes is committed under ``key`` (a key stored already: its new
        record replaces the old, which the policy knows as held)."""

    def kept_if_filled(self, txn: lmdb.Transaction, key: bytes, cost: int) -> bool:
        """Whether a fill of about ``cost`` bytes under ``key`` would be kept if it were
        committed now (read only): a large body the policy would refuse is then not written
        at all (store/shared/fill.py, ``would_keep``)."""

    def remember(self, txn: lmdb.Transaction, key: bytes, cost: int) -> None:
        """A fill ``kept_if_filled`` refused, and so never written, is remembered as ``admit``
        remembers one it refuses: its next fill is kept."""

    def removed(self, txn: lmdb.Transaction, key: bytes) -> None:
        """The entry at ``key`` was removed for another reason than this policy's choice (a
        key not held: nothing to do)."""

    def committed(self) -> None:
        """The write transaction the last calls ran in committed: apply what the policy
        keeps outside LMDB (S3-FIFO's counters), as those calls left it."""

    def aborted(self) -> None:
        """It aborted: forget what those calls would have changed outside LMDB."""

    def close(self) -> None: ...


class OldestFirst:
    """The entries stored first go first: the commit's last step does it all."""

    def open(self, env: lmdb.Environment, directory: Path, capacity: int, health: Health) -> None:
        pass

    def next_sequence(self, txn: lmdb.Transaction, last: int) -> int:
        return last + 1

    def hit(self, sequence: int) -> None:
        pass

    def admit(self, txn: lmdb.Transaction, key: bytes, sequence: int, cost: int) -> Admission:
        return Admission(True, [])

    def kept_if_filled(self, txn: lmdb.Transaction, key: bytes, cost: int) -> bool:
        return True  # the fill itself stops past the tier's size

    def remember(self, txn: lmdb.Transaction, key: bytes, cost: int) -> None:
        pass

    def removed(self, txn: lmdb.Transaction, key: bytes) -> None:
        pass

    def committed(self) -> None:
        pass

    def aborted(self) -> None:
        pass

    def close(self) -> None:
        pass
