"""Eviction policies (proxy/store/eviction): what each evicts, in which order, on small
hand-made sequences; byte accounting; keys not held; a property test of the bookkeeping;
and agreement with libCacheSim, request by request, on random traces (decision 0029)."""

from __future__ import annotations

import gc
import random
from collections.abc import Hashable

import libcachesim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.store.eviction import LRU, POLICIES, S3FIFO, EvictionPolicy, Sieve, make_policy

# An op: ("admit", key, size) expecting the evicted keys, ("hit", key), ("remove", key)
# expecting whether it was held, ("resize", key, size) expecting the evicted keys.
Op = tuple[object, ...]

# 40 bytes of S3-FIFO filled: a and b in the small queue (4 bytes), m0-m11 in main (36).
# Every key is smaller than the small queue: one of 4 bytes or more would not be admitted.
S3FIFO_FILL: list[tuple[Op, object]] = [
    (("admit", "a", 2), []),
    (("admit", "b", 2), []),
    *((("admit", f"m{i}", 3), []) for i in range(12)),
]

ORDER_CASES: list[tuple[str, int, list[tuple[Op, object]], set[str]]] = [
    (
        # LRU: a hit moves a to the young end, so b goes first, then a once c was hit.
        "lru",
        3,
        [
            (("admit", "a", 1), []),
            (("admit", "b", 1), []),
            (("admit", "c", 1), []),
            (("hit", "a"), None),
            (("admit", "d", 1), ["b"]),
            (("hit", "c"), None),
            (("admit", "e", 1), ["a"]),
        ],
        {"c", "d", "e"},
    ),
    (
        # SIEVE: the hand clears a's bit and evicts b, stops on c; clears c's, evicts d;
        # wraps to the oldest, a, not visited since: evicted (LRU would have kept it).
        "sieve",
        3,
        [
            (("admit", "a", 1), []),
            (("admit", "b", 1), []),
            (("admit", "c", 1), []),
            (("hit", "a"), None),
            (("admit", "d", 1), ["b"]),
            (("hit", "c"), None),
            (("admit", "e", 1), ["d"]),
            (("admit", "f", 1), ["a"]),
        ],
        {"c", "e", "f"},
    ),
    (
        # S3-FIFO over 40 bytes: small queue 4, main 36. a and b fill the small queue; m0-m11
        # go to main (a cold cache's warm-up). e evicts a from the small queue into the
        # ghost; a comes back straight into main, and b leaves the small queue; main is then
        # over its share: m0 (hit once) gets another round, m1 is evicted.
        "s3fifo",
        40,
        [
            *S3FIFO_FILL,
            (("hit", "m0"), None),
            (("admit", "e", 2), ["a"]),
            (("admit", "a", 2), ["b"]),
            (("admit", "f", 2), ["m1"]),
        ],
        {"a", "e", "f", "m0", *(f"m{i}" for i in range(2, 12))},
    ),
    (
        # S3-FIFO: a, hit twice in the small queue, moves to main when its turn comes; b,
        # never hit, is evicted instead; then main, over its share, evicts its oldest, m0.
        "s3fifo",
        40,
        [
            *S3FIFO_FILL,
            (("hit", "a"), None),
            (("hit", "a"), None),
            (("admit", "e", 2), ["b"]),
            (("admit", "f", 2), ["m0"]),
        ],
        {"a", "e", "f", *(f"m{i}" for i in range(1, 12))},
    ),
    (
        # Removing keys (a purge) frees their bytes at once: no eviction for d; a removed
        # key, or one never held, is not there to remove; a hit on it adds nothing.
        "sieve",
        3,
        [
            (("admit", "a", 1), []),
            (("admit", "b", 1), []),
            (("admit", "c", 1), []),
            (("remove", "b"), True),
            (("remove", "b"), False),
            (("remove", "zz"), False),
            (("hit", "zz"), None),
            (("admit", "d", 1), []),
            (("admit", "e", 1), ["a"]),
        ],
        {"c", "d", "e"},
    ),
    (
        # Growing a key (a variant added) evicts others to make room; a key grown past the
        # capacity is dropped itself.
        "lru",
        10,
        [
            (("admit", "a", 4), []),
            (("admit", "b", 4), []),
            (("resize", "b", 6), []),
            (("resize", "b", 7), ["a"]),
            (("resize", "b", 11), ["b"]),
            (("resize", "b", 1), []),
        ],
        set(),
    ),
]


def apply(policy: EvictionPolicy[Hashable], op: Op) -> object:
    name, key = op[0], op[1]
    assert isinstance(key, str)
    if name == "admit":
        return policy.admit(key, int(str(op[2])))
    if name == "resize":
        return policy.resize(key, int(str(op[2])))
    if name == "remove":
        return policy.remove(key)
    assert name == "hit"
    policy.hit(key)
    return None


@pytest.mark.parametrize(("name", "capacity", "ops", "held"), ORDER_CASES)
def test_what_is_evicted_and_in_which_order(
    name: str, capacity: int, ops: list[tuple[Op, object]], held: set[str]
) -> None:
    policy = make_policy(name, capacity)
    for op, expected in ops:
        assert apply(policy, op) == expected, op
    assert set(policy) == held
    assert len(policy) == len(held)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_bytes_are_accounted_on_admit_resize_and_remove(name: str) -> None:
    policy = make_policy(name, 1000)
    assert policy.capacity == 1000
    assert policy.admit("a", 30) == []
    assert policy.admit("b", 50) == []
    assert (policy.used, len(policy)) == (80, 2)
    assert policy.resize("a", 45) == []
    assert policy.used == 95
    assert policy.admit("b", 20) == []  # held already: its new size, and a hit
    assert policy.used == 65
    assert policy.remove("a")
    assert (policy.used, len(policy), "a" in policy, "b" in policy) == (20, 1, False, True)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_keys_not_held_are_ignored(name: str) -> None:
    policy = make_policy(name, 1000)
    policy.admit("a", 10)
    policy.hit("nope")
    assert policy.remove("nope") is False
    assert policy.resize("nope", 5) == []
    assert (set(policy), policy.used) == ({"a"}, 10)


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("lru", 1001),
        ("sieve", 1001),
        ("s3fifo", 1001),
        # S3-FIFO admits into its small queue (10%) only what is smaller than it, as
        # libCacheSim does
        ("s3fifo", 100),
    ],
)
def test_a_key_too_large_comes_back_and_nothing_is_evicted(name: str, size: int) -> None:
    policy = make_policy(name, 1000)
    for key in "abcdefghij":
        policy.admit(key, 99)
    assert policy.admit("big", size) == ["big"]
    assert "big" not in policy
    assert (len(policy), policy.used) == (10, 990)


def test_an_unknown_policy_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown eviction policy 'arc'"):
        make_policy("arc", 10)
    with pytest.raises(ValueError, match="capacity"):
        Sieve(-1)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "hit", "remove", "resize"]),
        st.integers(0, 15),
        st.integers(1, 40),
    ),
    max_size=200,
)


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=150, deadline=None)
@given(ops=OPS, capacity=st.integers(0, 120))
def test_the_bookkeeping_holds_whatever_happens(
    name: str, ops: list[tuple[str, int, int]], capacity: int
) -> None:
    """The policy holds exactly the keys admitted and neither evicted nor removed, their
    bytes sum to ``used``, and ``used`` never exceeds the capacity."""
    policy = make_policy(name, capacity)
    model: dict[int, int] = {}  # key -> size, as the store would hold it
    for op, key, size in ops:
        if op in ("admit", "resize"):
            known = key in model
            evicted = policy.admit(key, size) if op == "admit" else policy.resize(key, size)
            assert len(evicted) == len(set(evicted))
            if op == "admit" or known:
                model[key] = size
            for gone in evicted:
                assert gone in model
                del model[gone]
        elif op == "hit":
            policy.hit(key)
        else:
            assert policy.remove(key) == (key in model)
            model.pop(key, None)
        assert set(policy) == set(model)
        assert len(policy) == len(model)
        assert policy.used == sum(model.values()) <= capacity


REFERENCES = {"lru": libcachesim.LRU, "sieve": libcachesim.Sieve, "s3fifo": libcachesim.S3FIFO}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize(("seed", "sized"), [(2, False), (4, True), (5, True)])
def test_each_request_is_a_hit_or_a_miss_as_in_libcachesim(
    name: str, seed: int, sized: bool
) -> None:
    """The same algorithm as libCacheSim's, not only the same miss ratio: replayed side by
    side over a skewed random trace, every request is a hit in both or a miss in both."""
    rng = random.Random(seed)
    ours = POLICIES[name](100)
    reference = REFERENCES[name](100)
    request = libcachesim.Request()
    for clock in range(30_000):
        key = int(rng.paretovariate(0.8)) % 400
        size = 1 + key % 3 if sized else 1
        request.obj_id, request.obj_size, request.clock_time = key, size, clock
        held = key in ours
        if held:
            ours.hit(key)
        else:
            ours.admit(key, size)
        assert held == reference.get(request), (clock, key)
    assert (len(ours), ours.used) == (reference.get_n_obj(), reference.get_occupied_byte())


def test_the_policies_are_the_classes() -> None:
    assert (POLICIES["lru"], POLICIES["sieve"], POLICIES["s3fifo"]) == (LRU, Sieve, S3FIFO)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_no_object_per_key_for_the_garbage_collector(name: str) -> None:
    """A full collection walks every object it tracks (decision 0011): a policy keeps its
    keys in a few containers, so holding 5,000 more keys adds no tracked object."""
    policy = make_policy(name, 10_000)
    keys = [f"example.com 0 /{i}" for i in range(5_000)]
    gc.collect()
    before = len(gc.get_objects())
    for key in keys:
        policy.admit(key, 1)
    for key in keys[::2]:
        policy.hit(key)
    policy.admit("another", 1)
    gc.collect()
    assert len(gc.get_objects()) - before < 10
    assert len(policy) == 5_001


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_key_evicted_already_is_not_removed_twice(name: str) -> None:
    """The store drops a dead key (a cleared generation) when it gets to it; by then the
    policy may have evicted it: removing it again changes nothing."""
    policy = make_policy(name, 100)
    for key in ("dead", "b", "c", "d", "e"):
        policy.admit(key, 9)
    evicted: list[Hashable] = []
    index = 0
    while "dead" not in evicted:
        evicted += policy.admit(f"new{index}", 9)
        index += 1
    held, used = set(policy), policy.used
    assert policy.remove("dead") is False
    assert (set(policy), policy.used) == (held, used)
    assert policy.used == 9 * len(policy) <= 100
