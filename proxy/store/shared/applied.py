"""What the shared tier has applied of a fleet's clears and purges, kept across restarts.

A fleet member starts knowing nothing (``NOTHING_APPLIED``), so its first sync clears every
domain (decision 0014: a new epoch to it). That is right for its memory tier, empty anyway,
but would empty the node's shared tier at every start of every worker. So each worker writes
here, after every batch it applied, the member's ``Applied`` (epoch, last clear number, the
domains' generations), and a worker that starts reads it back as its member's starting
point: its first sync then brings the shared tier only what happened since (the clears and
purges of the epoch it missed, or everything when the epoch changed: a Valkey that lost its
data), and every later sync goes on from there.

Why that is safe: the record is written only after the batch it describes returned, and a
batch's clears and purges are durable in the shared tier when each call returns
(proxy/store/tiered.py). A record that is lost, torn or behind (the kill came between the
batch and its record, or a slower worker wrote last) only makes the next start apply again
what was applied already, which is harmless: a purge applied twice covers what it covered.
Every worker applies every purge itself, so any worker's record is true of the tier.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from proxy.core.lease import Applied

APPLIED_FILE = "fleet-applied"


def load_applied(directory: Path) -> Applied | None:
    """The record, or None when there is none or it cannot be read (the first sync then
    clears every domain)."""
    try:
        record = json.loads((directory / APPLIED_FILE).read_text())
        epoch, seq, generations = record["epoch"], record["seq"], record["generations"]
        if not isinstance(epoch, str) or not isinstance(seq, int) or seq < 0:
            return None
        if not isinstance(generations, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in generations.items()
        ):
            return None
        return Applied(epoch=epoch, seq=seq, generations=generations)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_applied(directory: Path, applied: Applied) -> None:
    """Replace the record (write, rename: never torn). Not fsynced: after a power loss the
    entries are emptied anyway (decision 0030), and a record lost only applies more."""
    if applied.epoch is None:
        return
    # A learned domain (core/lease.py) is left out: a worker that starts from this record
    # learns it again, and clears it before it writes anything of it (decision 0052).
    generations = {d: g for d, g in applied.generations.items() if d not in applied.learned}
    record = {"epoch": applied.epoch, "seq": applied.seq, "generations": generations}
    tmp = directory / f"{APPLIED_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, directory / APPLIED_FILE)
