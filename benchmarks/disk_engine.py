"""Which engine for the shared tier (issue 23 §1, decision 0030): LMDB against files per object.

Run: taskset -c 1 .venv/bin/python -m benchmarks.disk_engine [--dir DIR] [--seconds 2]
     [--big-mib 256] [--entries 1000000]

Everything runs on this machine's disk (``--dir``, default a temporary directory under /var/tmp,
which is the disk here, not a tmpfs), each case for a few seconds:

- **a** the in-process cost of a 1 KiB hit: look the key up and read its bytes. LMDB: a read
  transaction, ``get`` and ``bytes()`` of the value (a copy out of the map). Files: nginx's
  layout, the path made from a hash of the key (the directory is the index), then
  open/read/close.
- **b** the same hit measured one by one in a reader process, with and without a writer process
  filling other keys as fast as it can (1 KiB to 64 KiB bodies; LMDB committing each fill,
  synced (``lmdb``) or not (``lmdb-nosync``): does a fill stall a hit? p50 and p99, and in
  brackets the fills the writer made meanwhile.
- **c** a 256 MiB body written and read back in 64 KiB chunks, each in a process of its own so
  its peak RSS is its own (``VmHWM``: not ``ru_maxrss``, which Linux carries across the
  ``exec`` from the forked parent). LMDB takes a value whole (py-lmdb has no MDB_RESERVE), so
  a large body is stored as chunk records; files are written and read with ``write`` and
  ``readinto``.
- **d** a store of ``--entries`` small LMDB entries: the time a new process takes from
  opening it to its first hit (no scan). Files are left out: their open is O(1) by
  construction (the path is the index), and making a million files takes minutes.

``--instructions N`` counts instead, with callgrind (so load on the machine does not move it),
the instructions of one 1 KiB lookup: the memory store's ``peek``, a bare LMDB ``get`` (+ copy),
and the shared tier's ``lookup``: each subject run twice, with 0 and N lookups, the
difference divided by N.

Then the shared tier built on the choice (``proxy/store/shared``), through its own calls:

- **e** a 1 KiB hit (``lookup``: the purge state, the record, its CRC, the response built),
  a 1 KiB fill (``Fill``: append and commit), and a clear (synced: what a purge waits for);
- **f** a 256 MiB body through ``Fill`` and back through ``read_body`` (every chunk checked),
  in a process of its own for its peak RSS;
- **g** ``--entries`` entries (loaded in bulk in the tier's record format): a new process's
  ``open_node`` to its first hit.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import multiprocessing as mp
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import lmdb

from proxy.core.cache.entry import StoredResponse
from proxy.store.memory import MemoryStore
from proxy.store.shared import Fill, SharedTier

KIB = 1024
MIB = 1024 * KIB
CHUNK = 64 * KIB
KEYS = 10_000  # keys the hit benchmarks read from


def _key(i: int) -> bytes:
    return f"example.com /objects/{i}.js".encode()


def _path(root: Path, key: bytes) -> Path:
    digest = hashlib.blake2b(key, digest_size=16).hexdigest()
    return root / digest[-1] / digest[-3:-1] / digest


def _open_lmdb(root: Path, *, map_size: int = 4 << 30, sync: bool = True) -> lmdb.Environment:
    root.mkdir(parents=True, exist_ok=True)
    return lmdb.open(str(root), map_size=map_size, max_dbs=4, sync=sync, metasync=sync)


def _fill_lmdb(root: Path, count: int, size: int) -> None:
    env = _open_lmdb(root)
    body = os.urandom(size)
    with env.begin(write=True) as txn:
        for i in range(count):
            txn.put(_key(i), body)
    env.close()


def _write_file(root: Path, key: bytes, body: bytes) -> None:
    path = _path(root, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        out.write(body)
    os.replace(tmp, path)


def _fill_files(root: Path, count: int, size: int) -> None:
    body = os.urandom(size)
    for i in range(count):
        _write_file(root, _key(i), body)


def _lmdb_hit(env: lmdb.Environment) -> Callable[[bytes], bytes]:
    def hit(key: bytes) -> bytes:
        with env.begin(buffers=True) as txn:
            value = txn.get(key)
            assert value is not None
            return bytes(value)

    return hit


def _file_hit(root: Path) -> Callable[[bytes], bytes]:
    def hit(key: bytes) -> bytes:
        with open(_path(root, key), "rb", buffering=0) as f:
            return f.read()

    return hit


def _timed_hits(hit: Callable[[bytes], bytes], seconds: float) -> list[float]:
    """Per-hit latencies in µs over ``seconds``, keys in a fixed pseudo-random order."""
    keys = [_key((i * 7919) % KEYS) for i in range(KEYS)]
    samples: list[float] = []
    clock = time.perf_counter_ns
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key in keys[:1000]:
            start = clock()
            hit(key)
            samples.append((clock() - start) / 1000)
        keys = keys[1000:] + keys[:1000]
    return samples


def _mean_hit(hit: Callable[[bytes], bytes], seconds: float) -> float:
    """Mean µs per hit over batches (no per-hit clock reads)."""
    keys = [_key((i * 7919) % KEYS) for i in range(KEYS)]
    done = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for key in keys:
            hit(key)
        done += len(keys)
    return (time.perf_counter() - start) / done * 1e6


# -- b: a writer in another process ----------------------------------------------------------


def _writer(engine: str, root: str, stop: Any, written: Any) -> None:
    _pin(0)
    bodies = [os.urandom(size) for size in (KIB, 8 * KIB, 64 * KIB)]
    nosync = engine == "lmdb-nosync"
    env = _open_lmdb(Path(root), sync=not nosync) if engine.startswith("lmdb") else None
    i = 0
    while not stop.is_set():
        key = f"example.com /fill/{i}".encode()
        body = bodies[i % 3]
        if env is not None:
            with env.begin(write=True) as txn:  # one commit per fill, synced or not
                txn.put(key, body)
        else:
            _write_file(Path(root), key, body)
        i += 1
    written.value = i
    if env is not None:
        env.close()


def _pin(cpu: int) -> None:
    """The writer on core 0, the reader on core 1: a stall measured is the store's, not a
    wait for the CPU."""
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {cpu})


def _reader(engine: str, root: str, seconds: float, out: Any) -> None:
    _pin(1)
    if engine.startswith("lmdb"):
        env = _open_lmdb(Path(root))
        samples = _timed_hits(_lmdb_hit(env), seconds)
    else:
        samples = _timed_hits(_file_hit(Path(root)), seconds)
    samples.sort()
    out.put((samples[len(samples) // 2], samples[int(len(samples) * 0.99)], len(samples)))


def _concurrent(engine: str, root: Path, seconds: float, with_writer: bool) -> tuple[Any, int]:
    ctx = mp.get_context("fork")
    stop, written, out = ctx.Event(), ctx.Value("q", 0), ctx.Queue()
    writer = ctx.Process(target=_writer, args=(engine, str(root), stop, written))
    if with_writer:
        writer.start()
    reader = ctx.Process(target=_reader, args=(engine, str(root), seconds, out))
    reader.start()
    result = out.get()
    reader.join()
    if with_writer:
        stop.set()
        writer.join()
    return result, int(written.value)


# -- c: a large body, streamed ---------------------------------------------------------------


def _big(engine: str, root: str, size: int, out: Any) -> None:
    chunk = os.urandom(CHUNK)
    count = size // CHUNK
    start = time.perf_counter()
    if engine == "lmdb":
        env = _open_lmdb(Path(root), map_size=size * 2 + 64 * MIB)
        with env.begin(write=True) as txn:
            for i in range(count):
                txn.put(b"big/%08d" % i, chunk)
        env.sync(True)
    else:
        fd = os.open(Path(root) / "big.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(count):
            os.write(fd, chunk)
        os.fsync(fd)
        os.close(fd)
    wrote = time.perf_counter() - start
    # Read back from the disk, not the page cache.
    fd = os.open(Path(root) / ("data.mdb" if engine == "lmdb" else "big.tmp"), os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    start = time.perf_counter()
    total = 0
    if engine == "lmdb":
        with env.begin(buffers=True) as txn:
            for i in range(count):
                value = txn.get(b"big/%08d" % i)
                assert value is not None
                total += len(bytes(value))
    else:
        buffer = bytearray(CHUNK)
        with open(Path(root) / "big.tmp", "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                total += n
    read = time.perf_counter() - start
    assert total == size
    out.put((size / MIB / wrote, size / MIB / read, _peak_rss_kib()))


def _peak_rss_kib() -> int:
    """This process's peak resident set since its ``exec`` (kB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _run_big(engine: str, root: Path, size: int) -> tuple[float, float, int]:
    ctx = mp.get_context("spawn")  # a fresh process: its peak RSS is the case's own
    out = ctx.Queue()
    root.mkdir(parents=True, exist_ok=True)
    process = ctx.Process(target=_big, args=(engine, str(root), size, out))
    process.start()
    result: tuple[float, float, int] = out.get()
    process.join()
    return result


# -- d: opening a large store ----------------------------------------------------------------


def _first_hit(root: str, out: Any) -> None:
    start = time.perf_counter()
    env = _open_lmdb(Path(root), map_size=1 << 30)
    with env.begin(buffers=True) as txn:
        value = txn.get(_key(123_457))
        assert value is not None
        body = bytes(value)
    out.put((time.perf_counter() - start, len(body)))


def _open_time(root: Path, entries: int) -> tuple[float, float]:
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    env = _open_lmdb(root, map_size=1 << 30)
    body = os.urandom(200)
    for base in range(0, entries, 100_000):
        with env.begin(write=True) as txn:
            for i in range(base, min(entries, base + 100_000)):
                txn.put(_key(i), body)
    env.close()
    filled = time.perf_counter() - start
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    process = ctx.Process(target=_first_hit, args=(str(root), out))
    process.start()
    seconds, _ = out.get()
    process.join()
    return filled, seconds


# -- e-h: the shared tier built on the choice (proxy/store/shared) ---------------------------


def _tier_fill(tier: SharedTier, target: str, data: bytes) -> bool:
    writer = Fill(
        tier, "example.com", target, _response(), tier.lookup("example.com", target).token
    )
    for offset in range(0, len(data), CHUNK):
        writer.append(data[offset : offset + CHUNK])
    return bool(writer.commit())


def _response() -> StoredResponse:
    headers = (("Content-Type", "application/javascript"), ("ETag", '"abc"'))
    return StoredResponse(
        status=200, reason="OK", headers=headers, body=b"", birth=time.time(),
        freshness_lifetime=3600.0,
    )  # fmt: skip


def _tier_hits(root: Path, seconds: float) -> tuple[float, float, float]:
    """Mean µs of a 1 KiB hit through SharedTier.lookup (+ the inline body), of a fill, and
    median ms of a clear (synced)."""
    tier = SharedTier.open_node(root, max_bytes=1 << 30)
    body = os.urandom(KIB)
    start = time.perf_counter()
    for i in range(KEYS):
        _tier_fill(tier, f"/objects/{i}.js", body)
    fill_us = (time.perf_counter() - start) / KEYS * 1e6
    targets = [f"/objects/{(i * 7919) % KEYS}.js" for i in range(KEYS)]
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for target in targets:
            (entry,) = tier.lookup("example.com", target).variants
            assert len(entry.response.body) == KIB
        done += len(targets)
    hit_us = (time.perf_counter() - start) / done * 1e6
    clears = []
    for _ in range(50):
        begin = time.perf_counter()
        tier.clear_domain("other.example")
        clears.append(time.perf_counter() - begin)
    tier.close()
    clears.sort()
    return hit_us, fill_us, clears[len(clears) // 2] * 1000


def _tier_big(root: str, size: int, out: Any) -> None:
    tier = SharedTier.open_node(root, max_bytes=size * 2)
    chunk = os.urandom(CHUNK)
    start = time.perf_counter()
    writer = Fill(tier, "example.com", "/big", _response(), 0)
    for _ in range(size // CHUNK):
        writer.append(chunk)
    assert writer.commit()
    wrote = time.perf_counter() - start
    (entry,) = tier.lookup("example.com", "/big").variants
    assert entry.path is not None
    fd = os.open(entry.path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    start = time.perf_counter()
    total = sum(len(piece) for piece in tier.read_body(entry))
    read = time.perf_counter() - start
    assert total == size
    tier.close()
    rss = _peak_rss_kib()
    out.put((size / MIB / wrote, size / MIB / read, rss))


def _tier_first_hit(root: str, out: Any) -> None:
    start = time.perf_counter()
    tier = SharedTier.open_node(root, max_bytes=4 << 30)
    (entry,) = tier.lookup("example.com", "/objects/123457.js").variants
    out.put((time.perf_counter() - start, len(entry.response.body)))
    tier.close()


def _tier_million(root: Path, entries: int) -> float:
    """Seconds from a new process's open of a tier holding ``entries`` 200-byte entries to
    its first hit (the entries are loaded in bulk, in the tier's record format)."""
    tier = SharedTier.open_node(root, max_bytes=4 << 30)
    response, body = _response(), os.urandom(200)
    token = tier.lookup("example.com", "/objects/0.js").token
    for base in range(0, entries, 100_000):  # a bulk load: a batch per transaction
        batch = []
        for i in range(base, min(entries, base + 100_000)):
            fill = Fill(tier, "example.com", f"/objects/{i}.js", response, token)
            fill.append(body)
            batch.append(fill)
        Fill.commit_all(tier, batch)
    tier.close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    process = ctx.Process(target=_tier_first_hit, args=(str(root), out))
    process.start()
    seconds, length = out.get()
    process.join()
    assert length == 200
    return float(seconds)


# -- i: instructions per lookup, by callgrind (load does not move them) -----------------------

COUNTED = 1000  # entries in the store a counted run looks up


def _count(subject: str, lookups: int, root: Path) -> None:
    """Fill a store with COUNTED 1 KiB entries, then make ``lookups`` lookups (run under
    callgrind by ``_instructions``, once with none and once with some)."""
    targets = [f"/objects/{(i * 7919) % COUNTED}.js" for i in range(COUNTED)]
    data = bytes(KIB)
    if subject == "memory":
        store = MemoryStore(max_bytes=1 << 30)

        async def fill_memory() -> None:
            for target in targets:
                found = await store.lookup("example.com", target)
                await store.put(found.key, replace(_response(), body=data))

        asyncio.run(fill_memory())
        for n in range(lookups):
            assert store.peek("example.com", targets[n % COUNTED]) is not None
        return
    if subject == "lmdb":
        env = _open_lmdb(root, sync=False)
        with env.begin(write=True) as txn:
            for target in targets:
                txn.put(target.encode(), data)
        hit = _lmdb_hit(env)
        for n in range(lookups):
            hit(targets[n % COUNTED].encode())
        return
    tier = SharedTier.open_node(root, max_bytes=1 << 30)
    for target in targets:
        _tier_fill(tier, target, data)
    for n in range(lookups):
        assert tier.lookup("example.com", targets[n % COUNTED]).variants
    tier.close()


def _instructions(lookups: int, base: Path) -> dict[str, float]:
    counts: dict[str, float] = {}
    for subject in ("memory", "lmdb", "tier"):
        totals = []
        for n in (0, lookups):
            out = base / f"callgrind-{subject}-{n}"
            argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
            argv += [sys.executable, "-m", "benchmarks.disk_engine"]
            argv += ["--count", subject, str(n), str(base / f"count-{subject}-{n}")]
            subprocess.run(argv, check=True, capture_output=True)
            match = re.search(r"^totals: (\d+)", out.read_text(), re.MULTILINE)
            assert match is not None
            totals.append(int(match.group(1)))
        counts[subject] = (totals[1] - totals[0]) / lookups
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/var/tmp")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--instructions", type=int, default=0, metavar="LOOKUPS")
    parser.add_argument("--count", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        subject, lookups, root = args.count
        _count(subject, int(lookups), Path(root))
        return
    if args.instructions:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="disk-engine-") as tmp:
            counts = _instructions(args.instructions, Path(tmp))
        print(f"i. instructions per 1 KiB lookup (callgrind, {args.instructions} lookups)")
        for subject, count in counts.items():
            print(f"   {subject:6} {count:9.0f}")
        return
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="disk-engine-") as tmp:
        base = Path(tmp)
        _fill_lmdb(base / "lmdb", KEYS, KIB)
        _fill_files(base / "files", KEYS, KIB)
        print("a. 1 KiB hit in process (mean µs, lookup + copy of the bytes)")
        env = _open_lmdb(base / "lmdb")
        print(f"   lmdb   {_mean_hit(_lmdb_hit(env), args.seconds):7.2f}")
        env.close()
        print(f"   files  {_mean_hit(_file_hit(base / 'files'), args.seconds):7.2f}")
        print("b. 1 KiB hit in a reader process, µs: p50 / p99 (hits) [fills by the writer]")
        for engine in ("lmdb", "lmdb-nosync", "files"):
            for with_writer in (False, True) if engine != "lmdb-nosync" else (True,):
                root = base / engine.split("-")[0]
                (p50, p99, n), fills = _concurrent(engine, root, args.seconds, with_writer)
                label = "with writer" if with_writer else "alone      "
                print(f"   {engine:11} {label} {p50:7.2f} / {p99:7.2f}  ({n} hits) [{fills}]")
        print(f"c. {args.big_mib} MiB body in 64 KiB chunks: write MB/s, read MB/s, peak RSS MiB")
        for engine in ("lmdb", "files"):
            wrote, read, rss = _run_big(engine, base / f"big-{engine}", args.big_mib * MIB)
            print(f"   {engine:6} {wrote:7.0f} {read:7.0f} {rss / 1024:7.0f}")
        print(f"d. LMDB with {args.entries} entries: fill s, open to first hit ms")
        filled, seconds = _open_time(base / "million", args.entries)
        print(f"   lmdb   {filled:7.1f} {seconds * 1000:7.2f}")
        print("e. SharedTier, 1 KiB: hit µs (lookup, judged, body), fill µs (commit), clear ms")
        hit, fill, clear = _tier_hits(base / "tier", args.seconds)
        print(f"   tier   {hit:7.2f} {fill:7.2f} {clear:7.2f}")
        print(f"f. SharedTier, {args.big_mib} MiB by Fill and read_body: MB/s, MB/s, peak RSS MiB")
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        process = ctx.Process(
            target=_tier_big, args=(str(base / "tier-big"), args.big_mib * MIB, out)
        )
        process.start()
        wrote, read, rss = out.get()
        process.join()
        print(f"   tier   {wrote:7.0f} {read:7.0f} {rss / 1024:7.0f}")
        print(f"g. SharedTier with {args.entries} entries: open to first hit ms (new process)")
        print(f"   tier   {_tier_million(base / 'tier-million', args.entries) * 1000:7.2f}")


if __name__ == "__main__":
    main()
