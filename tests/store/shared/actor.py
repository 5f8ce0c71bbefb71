"""Another process on the shared tier, for the tests: ``python -m tests.store.shared.actor``.

Each command prints one line per step it finished, so the test can wait for a step by reading
the line (no sleeps), and then kill it or let it end:

- ``read DIR INSTANCE DOMAIN TARGET``: as a worker, "miss" or "hit <sha256 of the body>".
- ``read-twice DIR INSTANCE DOMAIN TARGET``: as ``read``, then wait for a line on stdin, and
  read again (a process that has read the domain's purge state already).
- ``fill DIR INSTANCE DOMAIN TARGET SIZE SEED``: as a worker, store SIZE bytes of ``body(SEED)``.
- ``fill-hang DIR INSTANCE DOMAIN TARGET SIZE SEED``: as ``fill``, but after half the body it
  prints "half" and waits for its stdin to close (the test kills it first).
- ``node DIR DOMAIN TARGET SIZE SEED [PURGE...]``: as the node, store the body (born now, fresh
  for an hour), then apply each
  PURGE (``clear`` or ``kind:soft|hard:item``), print "done" and wait for stdin to close.
- ``serve DIR INSTANCE DOMAIN MAX_BYTES``: as a worker of a tier of MAX_BYTES, for each line
  "TARGET SIZE" on stdin look TARGET up: print "hit", or fill SIZE bytes and print "miss
  <the bytes the tier counted for it>" (kept or not); until stdin closes.
- ``fleet DIR INSTANCE EPOCH SEQ DOMAIN WRITE``: as a worker, apply a fleet batch of one write
  of DOMAIN numbered SEQ in EPOCH (``clear``, ``distrust``, ``every``: a distrust of every
  domain, or ``kind:soft|hard:item``) and print "written <parts written>".
- ``retire DIR INSTANCE``: as a worker, retire every URL purge record, however young
  (retire.py), and print "retired <URLs>".
- ``second-node DIR``: try to open DIR as a node: "opened" or "locked <message>".
- ``read-only DIR``: as the node, store /a, print "filled", wait for a line on stdin (the test
  gives the directory to nobody), become nobody, store /before and print how it went; wait for
  a line again (the test makes the directory read-only), then store /b (small) and /c
  (large), look /a up, and print what each gave and the tier's status as JSON.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import sys
import time

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import purge_request
from proxy.errors import CacheDirectoryLocked
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.node_writes import FleetBatch, NodeWrite
from proxy.store.shared.retire import retire

MAX_BYTES = 1 << 30
CHUNK = 64 * 1024


def body(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def response(tags: tuple[str, ...] = (), birth: float = 1_000_000.0) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "application/octet-stream"), ("ETag", '"v1"')),
        body=b"",
        birth=birth,
        freshness_lifetime=3600.0,
        tags=tags,
    )


def fill(
    tier: SharedTier,
    domain: str,
    target: str,
    data: bytes,
    *,
    hang: bool = False,
    birth: float = 1_000_000.0,
) -> bool:
    token = tier.lookup(domain, target).token
    writer = Fill(tier, domain, target, response(("t1",), birth), token)
    for offset in range(0, len(data), CHUNK):
        writer.append(data[offset : offset + CHUNK])
        if hang and offset >= len(data) // 2:
            print("half", flush=True)
            sys.stdin.read()
    return writer.commit()


def fleet_batch(epoch: str, seq: int, domain: str, write: str) -> FleetBatch:
    """A fleet batch of one write (``fleet``'s WRITE), as a member hands it to its tier."""
    if write == "every":
        return FleetBatch(epoch, seq, (), every=f"{epoch} {seq}")
    if write in ("clear", "distrust"):
        return FleetBatch(epoch, seq, (NodeWrite(domain, seq, distrust=write == "distrust"),))
    kind, hardness, item = write.split(":", 2)
    purge = purge_request(kind, [item], soft=hardness == "soft")
    return FleetBatch(epoch, seq, (NodeWrite(domain, seq, purge),))


def serve(directory: str, instance: str, domain: str, max_bytes: int) -> None:
    tier = SharedTier.open_member(directory, max_bytes=max_bytes, instance=instance)
    for line in sys.stdin:
        target, size = line.split()
        lookup = tier.lookup(domain, target)
        if lookup.variants:
            print("hit", flush=True)
            continue
        writer = Fill(tier, domain, target, response(), lookup.token)
        writer.append(bytes(int(size)))
        writer.commit()  # False for a large object's first fill: still a miss
        print(f"miss {writer.cost}", flush=True)
    tier.close()


def main(command: str, *args: str) -> None:
    if command == "second-node":
        try:
            SharedTier.open_node(args[0], max_bytes=MAX_BYTES)
        except CacheDirectoryLocked as error:
            print(f"locked {error}", flush=True)
            return
        print("opened", flush=True)
        return
    if command == "read-only":
        tier = SharedTier.open_node(args[0], max_bytes=MAX_BYTES)
        fill(tier, "example.com", "/a", b"a")
        print("filled", flush=True)
        sys.stdin.readline()  # the test gives the directory to nobody
        os.setgid(65534)
        os.setuid(65534)  # nobody: the permissions apply now
        before = fill(tier, "example.com", "/before", body(2, 300_000))
        print(json.dumps({"before": before, "uid": os.getuid()}), flush=True)
        sys.stdin.readline()  # the test makes the directory read-only
        result = {
            "small": fill(tier, "example.com", "/b", b"b"),
            "large": fill(tier, "example.com", "/c", body(1, 300_000)),
            "hit": [v.response.body.decode() for v in tier.lookup("example.com", "/a").variants],
            "status": dataclasses.asdict(tier.status()),
        }
        print(json.dumps(result), flush=True)
        tier.close()
        return
    if command == "node":
        directory, domain, target, size, seed, *purges = args
        tier = SharedTier.open_node(directory, max_bytes=MAX_BYTES)
        fill(tier, domain, target, body(int(seed), int(size)), birth=time.time())
        for purge in purges:
            if purge == "clear":
                tier.clear_domain(domain)
                continue
            kind, hardness, item = purge.split(":", 2)
            items = [item] if kind != "all" else []
            tier.purge(domain, purge_request(kind, items, soft=hardness == "soft"))
        print("done", flush=True)
        sys.stdin.read()
        return
    if command == "serve":
        serve(args[0], args[1], args[2], int(args[3]))
        return
    if command == "fleet":
        directory, instance, epoch, seq, domain, write = args
        tier = SharedTier.open_member(directory, max_bytes=MAX_BYTES, instance=instance)
        print(f"written {tier.apply_fleet(fleet_batch(epoch, int(seq), domain, write))}")
        tier.close()
        return
    if command == "retire":  # every URL purge record, however young (retire.py)
        directory, instance = args
        tier = SharedTier.open_member(directory, max_bytes=MAX_BYTES, instance=instance)
        print(f"retired {retire(tier, time.time() + 3600)}")
        tier.close()
        return
    directory, instance, domain, target, *rest = args
    tier = SharedTier.open_member(directory, max_bytes=MAX_BYTES, instance=instance)
    if command in ("read", "read-twice"):
        for _ in range(1 if command == "read" else 2):
            variants = tier.lookup(domain, target).variants
            data = tier.read_all(variants[0]) if variants else None
            print("miss" if data is None else f"hit {hashlib.sha256(data).hexdigest()}", flush=True)
            if command == "read-twice":
                sys.stdin.readline()
    else:
        data = body(int(rest[1]), int(rest[0]))
        stored = fill(tier, domain, target, data, hang=command == "fill-hang")
        print("stored" if stored else "dropped", flush=True)
    tier.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
