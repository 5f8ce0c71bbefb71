"""S3-FIFO in the shared tier (decision 0029, proxy/store/shared/s3fifo.py): the tier misses on
the same requests as the pure policy, across a restart and with hits from two processes; its
queues survive a restart; a large object is kept from its second fill; eviction never scans."""

from __future__ import annotations

import random
from pathlib import Path

import lmdb
import pytest

from proxy.store.eviction import LRU, S3FIFO, EvictionPolicy
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.hits import FILE, slots_for
from proxy.store.shared.s3fifo import _Queues
from tests.store.shared.actor import response
from tests.store.shared.conftest import Actor

DOMAIN = "example.com"
Trace = list[tuple[str, int]]


def zipf_trace(requests: int, popular: int, seed: int, large: int = 0) -> Trace:
    """Zipf(0.9) over ``popular`` objects, 20% of the requests one-hit wonders, and a scan of
    5% of them in a row in the middle. ``large`` popular objects get a size of 30,000 (for
    a tier of about 150 KB: over its small queue)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** 0.9 for rank in range(popular)]
    sizes = [rng.choice([100, 400, 1_500, 4_000]) for _ in range(popular)]
    for n in rng.sample(range(popular), large):
        sizes[n] = 30_000
    trace = [(f"/{n}", sizes[n]) for n in rng.choices(range(popular), weights, k=requests)]
    for n in rng.sample(range(len(trace)), len(trace) // 5):
        trace[n] = (f"/once/{n}", 700)
    middle = len(trace) // 2
    scan = [(f"/scan/{n}", 900) for n in range(requests // 20)]
    return trace[:middle] + scan + trace[middle:]


def store(tier: SharedTier, target: str, size: int, token: int) -> tuple[bool, int]:
    """Fill ``size`` bytes: whether the tier kept it, and the bytes it counts for it."""
    writer = Fill(tier, DOMAIN, target, response(), token)
    assert writer.append(bytes(size))
    kept = writer.commit()
    return kept, writer.cost


class Replay:
    """The pure policies beside the tier: each request a hit or a miss that admits it, at
    the cost the tier counted for the object (the same every time it is filled)."""

    def __init__(self, capacity: int) -> None:
        self.policies: dict[str, EvictionPolicy[str]] = {
            "s3fifo": S3FIFO[str](capacity, remember_large=True),
            "lru": LRU[str](capacity),
        }
        self.misses = dict.fromkeys(("tier", *self.policies), 0)
        self.costs: dict[str, int] = {}

    def request(self, target: str, tier_hit: bool, cost: int | None) -> None:
        if cost is not None:
            self.costs[target] = cost
        self.misses["tier"] += not tier_hit
        for name, policy in self.policies.items():
            if target in policy:
                policy.hit(target)
            else:
                self.misses[name] += 1
                policy.admit(target, self.costs[target])


@pytest.mark.slow
def test_the_tier_misses_as_often_as_pure_s3fifo_across_a_restart(tmp_path: Path) -> None:
    trace = zipf_trace(12_000, 1_500, seed=23, large=3)
    capacity = 150_000
    tier = SharedTier.open_node(tmp_path, max_bytes=capacity)
    replay = Replay(tier.capacity)  # its size less the reserve for free pages (pages.py)
    try:
        for n, (target, size) in enumerate(trace):
            if n == len(trace) // 2 + 100:  # a restart in the middle, in the scan
                tier.close()
                tier = SharedTier.open_node(tmp_path, max_bytes=capacity)
            lookup = tier.lookup(DOMAIN, target)
            cost = None if lookup.variants else store(tier, target, size, lookup.token)[1]
            replay.request(target, bool(lookup.variants), cost)
            assert tier.stats().bytes <= capacity
        misses = replay.misses
        assert misses["tier"] == misses["s3fifo"], misses
        assert misses["s3fifo"] < misses["lru"] * 0.97, misses
        held = {t for t in replay.costs if tier.lookup(DOMAIN, t).variants}
        assert held == set(replay.policies["s3fifo"])
        assert tier.stats().evictions > 1_000
    finally:
        tier.close()


def test_hits_from_two_processes_count_alike(tier_dir: Path) -> None:
    """The node and a worker take turns: each looks up, and fills on a miss. A hit in either
    process counts for the eviction the other one's commit makes."""
    trace = zipf_trace(3_000, 600, seed=7)
    # Large enough that the trees' own pages (branch pages) stay within the reserve: the
    # tier's measured trim (pages.py) never evicts in place of the policy.
    capacity = 200_000
    tier = SharedTier.open_node(tier_dir, max_bytes=capacity)
    worker = Actor("serve", tier_dir, tier.instance, DOMAIN, capacity)
    replay = Replay(tier.capacity)
    try:
        for n, (target, size) in enumerate(trace):
            if n % 2:
                worker.say(f"{target} {size}")
                answer = worker.line().split()
                hit, cost = answer[0] == "hit", (None if answer[0] == "hit" else int(answer[1]))
            else:
                lookup = tier.lookup(DOMAIN, target)
                hit = bool(lookup.variants)
                cost = None if hit else store(tier, target, size, lookup.token)[1]
            replay.request(target, hit, cost)
        assert replay.misses["tier"] == replay.misses["s3fifo"], replay.misses
        assert replay.misses["s3fifo"] < replay.misses["lru"], replay.misses
    finally:
        tier.close()


@pytest.fixture
def tier_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_a_key_hit_in_another_process_survives_a_scan(tier_dir: Path) -> None:
    tier = SharedTier.open_node(tier_dir, max_bytes=100_000)
    try:
        for target in ("/hot", "/cold"):
            store(tier, target, 1_000, tier.lookup(DOMAIN, target).token)
        worker = Actor("serve", tier_dir, tier.instance, DOMAIN, 100_000)
        for _ in range(2):
            worker.say("/hot 1000")
            assert worker.line() == "hit"
        for n in range(200):  # a scan, many times the tier's size
            store(tier, f"/scan/{n}", 2_000, tier.lookup(DOMAIN, f"/scan/{n}").token)
        assert tier.lookup(DOMAIN, "/hot").variants  # moved to main by the worker's hits
        assert not tier.lookup(DOMAIN, "/cold").variants
    finally:
        tier.close()


def test_a_large_object_is_kept_from_its_first_fill_up_to_half_the_tier(tmp_path: Path) -> None:
    """libCacheSim's S3-FIFO never admits an object of 10% of the capacity or more; the tier
    keeps one up to half its capacity at its first fill (straight into the main queue), and
    one larger from its second fill (remembered in the ghost when refused)."""
    tier = SharedTier.open_node(tmp_path, max_bytes=1_000_000)
    try:
        big = 300_000  # a body file; over the small queue's 100,000 bytes
        assert store(tier, "/big", big, tier.lookup(DOMAIN, "/big").token)[0] is True
        assert tier.lookup(DOMAIN, "/big").variants
        assert len(list((tmp_path / "bodies").glob("*.body"))) == 1
        larger = 600_000  # over half the tier: refused once, its file gone with it
        assert store(tier, "/larger", larger, tier.lookup(DOMAIN, "/larger").token)[0] is False
        assert not tier.lookup(DOMAIN, "/larger").variants
        assert len(list((tmp_path / "bodies").glob("*.body"))) == 1
        for n in range(5):
            store(tier, f"/small/{n}", 1_000, tier.lookup(DOMAIN, f"/small/{n}").token)
        assert store(tier, "/larger", larger, tier.lookup(DOMAIN, "/larger").token)[0] is True
        assert tier.lookup(DOMAIN, "/larger").variants
        # Larger than the ghost (90% of the tier): never remembered, so never kept.
        for _ in range(2):
            assert store(tier, "/huge", 950_000, tier.lookup(DOMAIN, "/huge").token)[0] is False
        assert tier.lookup(DOMAIN, "/larger").variants
    finally:
        tier.close()


def test_a_refill_keeps_its_place_and_counts_as_a_hit(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=100_000)
    try:
        store(tier, "/again", 1_000, tier.lookup(DOMAIN, "/again").token)
        for _ in range(2):  # filled twice more (revalidated, say): two hits' credit
            store(tier, "/again", 1_200, tier.lookup(DOMAIN, "/again").token)
        for n in range(200):
            store(tier, f"/scan/{n}", 2_000, tier.lookup(DOMAIN, f"/scan/{n}").token)
        (entry,) = tier.lookup(DOMAIN, "/again").variants
        assert entry.length == 1_200
        assert tier.stats().entries == len(list(_keys(tier, b"s3.place")))  # each one placed
    finally:
        tier.close()


def _keys(tier: SharedTier, name: bytes) -> list[bytes]:
    env: lmdb.Environment = tier._env
    with env.begin(db=env.open_db(name)) as txn:
        return [bytes(key) for key in txn.cursor().iternext(values=False)]


@pytest.mark.parametrize("held", [100, 1_000])
def test_eviction_takes_the_oldest_keys_never_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: int
) -> None:
    """What a commit takes from the queues is what it evicts (and what it moves on), however
    many entries are held: the same few steps for 100 entries as for 1,000."""
    tier = SharedTier.open_node(tmp_path, max_bytes=held * 4_400)  # costs in pages: 3.2 KB
    try:
        # Targets of one length: each new entry costs what an evicted one freed (pages.py)
        for n in range(held * 2):  # full, and warm: both queues in use
            store(tier, f"/{n:06}", 1_000, tier.lookup(DOMAIN, f"/{n:06}").token)
        steps: list[int] = []
        pop = _Queues._pop

        def counted(queues: _Queues, queue: int) -> tuple[bytes, int, int] | None:
            steps.append(queue)
            return pop(queues, queue)

        monkeypatch.setattr(_Queues, "_pop", counted)
        for n in range(50):
            before = tier.stats().evictions
            steps.clear()
            store(tier, f"/new{n:03}", 1_000, tier.lookup(DOMAIN, f"/new{n:03}").token)
            assert tier.stats().evictions - before == len(steps) == 1
    finally:
        tier.close()


def test_the_counters_file_is_sized_by_the_tier_and_never_shrinks(tmp_path: Path) -> None:
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 30)
    tier.close()
    assert (tmp_path / FILE).stat().st_size == slots_for(1 << 30) == 1 << 20
    tier = SharedTier.open_node(tmp_path, max_bytes=1 << 20)
    try:
        assert (tmp_path / FILE).stat().st_size == 1 << 20  # another process may map it
        assert tier.status().degraded is None
    finally:
        tier.close()


def test_without_a_counters_file_eviction_still_works(tmp_path: Path) -> None:
    (tmp_path / FILE).mkdir(parents=True)  # cannot be opened as a file
    tier = SharedTier.open_node(tmp_path, max_bytes=100_000)
    try:
        degraded = tier.status().degraded
        assert degraded is not None and degraded.startswith("hit counters")
        store(tier, "/hot", 1_000, tier.lookup(DOMAIN, "/hot").token)
        for _ in range(2):
            assert tier.lookup(DOMAIN, "/hot").variants  # this process's own counters
        for n in range(200):
            store(tier, f"/scan/{n}", 2_000, tier.lookup(DOMAIN, f"/scan/{n}").token)
        assert tier.lookup(DOMAIN, "/hot").variants
        assert tier.stats().bytes <= 100_000
    finally:
        tier.close()


@pytest.mark.parametrize("database", [b"s3.state", b"s3.small", b"s3.place"])
def test_a_damaged_eviction_state_is_emptied_and_the_bound_still_holds(
    tmp_path: Path, database: bytes
) -> None:
    """The queues carry no checksum (the entries do): a value that does not parse empties
    them in the commit that finds it, counted as corrupt, and the entries stored until
    then are evicted oldest first."""
    tier = SharedTier.open_node(tmp_path, max_bytes=100_000)
    try:
        for n in range(150):  # full, and evicting
            store(tier, f"/{n}", 1_000, tier.lookup(DOMAIN, f"/{n}").token)
        env: lmdb.Environment = tier._env
        with env.begin(write=True, db=env.open_db(database)) as txn:
            for key in list(txn.cursor().iternext(values=False)):
                txn.put(key, b"short")
        store(tier, "/after", 1_000, tier.lookup(DOMAIN, "/after").token)
        store(tier, "/149", 1_000, tier.lookup(DOMAIN, "/149").token)  # a refill: its place
        assert tier.status().corrupt == 1
        assert (tier.status().degraded or "").startswith("corrupt entry: eviction state")
        for n in range(300):
            target = f"/later/{n}"
            assert store(tier, target, 1_000, tier.lookup(DOMAIN, target).token)[0]
            assert tier.stats().bytes <= 100_000
        assert not tier.lookup(DOMAIN, "/149").variants  # evicted, oldest first
        assert tier.status().corrupt == 1
    finally:
        tier.close()


@pytest.mark.slow
def test_a_refused_first_fill_is_known_before_a_byte_is_written_and_remembered(
    tmp_path: Path,
) -> None:
    """``Fill.kept_if_filled`` answers ``admit``'s rule for a large object from a read
    transaction (the edge then writes nothing of a body the tier would refuse), and
    ``remember`` has the next fill kept, as a refused commit would."""
    tier = SharedTier.open_node(tmp_path, max_bytes=1_000_000)
    try:
        token = tier.lookup(DOMAIN, "/larger").token
        larger = Fill(tier, DOMAIN, "/larger", response(), token)
        assert Fill(tier, DOMAIN, "/big", response(), token).kept_if_filled(300_000)
        assert not larger.kept_if_filled(600_000)  # over half the tier, never seen
        assert not list((tmp_path / "bodies").glob("*.body"))
        larger.remember(600_000)
        assert larger.kept_if_filled(600_000)
        assert store(tier, "/larger", 600_000, token)[0] is True
        assert tier.lookup(DOMAIN, "/larger").variants
        huge = Fill(tier, DOMAIN, "/huge", response(), token)
        huge.remember(950_000)  # larger than the ghost: never remembered, never kept
        assert not huge.kept_if_filled(950_000)
    finally:
        tier.close()
