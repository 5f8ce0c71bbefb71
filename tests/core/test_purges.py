"""The purge request model, the origin's tags, and which entries a lazy purge covers
(core/purges.py, decision 0024)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.purge.purges import (
    HARD,
    MAX_ITEMS,
    MAX_TAG_CHARS,
    MAX_TAGS,
    Bans,
    Covered,
    InvalidPurge,
    LastPurges,
    Purge,
    covering,
    purge_request,
    split_tags,
    stale_lifetime,
    tag_header_names,
)

BOTH = tag_header_names(("Surrogate-Key", "Cache-Tag"))


# -- the request ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "items", "expected"),
    [
        ("url", ["/a", "/a?x=1", "/a"], ("/a", "/a?x=1")),  # each once, in order
        ("prefix", ["/assets/"], ("/assets/",)),
        ("prefix", ["/"], ("/",)),
        ("tag", ["product-42", "Cat:7"], ("product-42", "Cat:7")),
        ("all", [], ()),
    ],
)
def test_a_valid_purge_keeps_its_items(kind: str, items: list[str], expected: tuple[str]) -> None:
    purge = purge_request(kind, items, soft=True)
    assert (purge.kind, purge.items, purge.soft, purge.dry_run) == (kind, expected, True, False)


@pytest.mark.parametrize(
    ("kind", "items", "message"),
    [
        ("regex", ["/a"], "kind must be one of"),
        ("url", [], "needs at least one item"),
        ("all", ["/a"], "takes no items"),
        ("url", ["a"], "starting with '/'"),
        ("url", ["http://example.com/a"], "starting with '/'"),
        ("prefix", ["/a b"], "visible"),
        ("url", ["/\x00"], "visible"),
        ("url", ["/é"], "visible"),
        ("url", ["/" + "a" * 8190], "at most 8190"),
        ("tag", [""], "tag"),
        ("tag", ["a,b"], "without ','"),
        ("tag", ["a b"], "visible"),
        ("tag", ["x" * (MAX_TAG_CHARS + 1)], "1-256"),
        ("tag", [7], "must be strings"),
        ("url", ["/a"] * (MAX_ITEMS + 1), "at most 256 items"),
    ],
)
def test_an_invalid_purge_says_what_is_wrong(kind: str, items: list[object], message: str) -> None:
    with pytest.raises(InvalidPurge, match=message):
        purge_request(kind, items)


@given(st.text(max_size=20), st.lists(st.one_of(st.text(max_size=30), st.integers()), max_size=4))
def test_any_input_is_a_purge_or_invalid_purge(kind: str, items: list[object]) -> None:
    """Whatever a client sends, the model accepts it or raises InvalidPurge (a 4xx), never
    anything else."""
    try:
        purge = purge_request(kind, items)
    except InvalidPurge:
        return
    assert isinstance(purge, Purge)


# -- tags from the origin --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "names", "kept", "tags"),
    [
        ((("Surrogate-Key", "a  b\tc"),), BOTH, (), ("a", "b", "c")),
        ((("Cache-Tag", "a, b ,c,,"),), BOTH, (), ("a", "b", "c")),
        # both fields, repeated fields, duplicates: each tag once, in order
        (
            (("Surrogate-Key", "a b"), ("X", "1"), ("cache-tag", "b,c"), ("Surrogate-Key", "d")),
            BOTH,
            (("X", "1"),),
            ("a", "b", "c", "d"),
        ),
        # a domain that reads only Cache-Tag passes Surrogate-Key on as an ordinary field
        (
            (("Surrogate-Key", "a"), ("Cache-Tag", "b")),
            tag_header_names(("Cache-Tag",)),
            (("Surrogate-Key", "a"),),
            ("b",),
        ),
        ((("Surrogate-Key", "a"),), frozenset(), (("Surrogate-Key", "a"),), ()),
        ((("Surrogate-Key", ""),), BOTH, (), ()),
    ],
)
def test_tags_are_read_and_their_fields_removed(
    headers: tuple[tuple[str, str], ...],
    names: frozenset[str],
    kept: tuple[tuple[str, str], ...],
    tags: tuple[str, ...],
) -> None:
    assert split_tags(headers, names) == (kept, tags)


@pytest.mark.parametrize(
    "value",
    [
        " ".join(f"t{i}" for i in range(MAX_TAGS + 1)),
        "x" * (MAX_TAG_CHARS + 1),
        "caf\u00e9",
    ],
)
def test_tags_over_the_bounds_make_a_response_unstorable(value: str) -> None:
    """Dropping a tag would make a purge of it miss the response: it is not stored at all,
    and its tag field is still removed."""
    assert split_tags((("Surrogate-Key", value), ("X", "1")), BOTH) == ((("X", "1"),), None)


def test_exactly_the_bounds_are_allowed() -> None:
    value = " ".join(f"{i:0{MAX_TAG_CHARS}d}" for i in range(MAX_TAGS))
    _, tags = split_tags((("Surrogate-Key", value),), BOTH)
    assert tags is not None and len(tags) == MAX_TAGS


# -- covering ----------------------------------------------------------------------------------


def bans(*added: tuple[int, tuple[str, ...], bool, float]) -> Bans:
    made = Bans()
    for number, prefixes, soft, at in added:
        made.add(number, prefixes, soft, at)
    return made


def test_a_ban_covers_only_entries_stored_before_it_under_its_prefixes() -> None:
    banned = bans((5, ("/assets/", "/img/"), False, 100.0))
    assert covering(banned, {}, mark=4, target="/assets/a.css", tags=()) is HARD
    assert covering(banned, {}, mark=4, target="/img/", tags=()) is HARD
    assert covering(banned, {}, mark=5, target="/assets/a.css", tags=()) is None  # after it
    assert covering(banned, {}, mark=4, target="/asset", tags=()) is None
    assert covering(banned, {}, mark=4, target="/Assets/a.css", tags=()) is None  # as sent


def test_soft_purges_end_freshness_at_the_earliest_and_hard_wins() -> None:
    banned = bans((3, ("/a",), True, 10.0), (4, ("/",), True, 20.0))
    assert covering(banned, {}, mark=2, target="/a", tags=()) == Covered(False, 10.0)
    assert covering(banned, {}, mark=3, target="/a", tags=()) == Covered(False, 20.0)
    tags = {"t": LastPurges(hard=0, soft=5, soft_at=5.0)}
    assert covering(banned, tags, mark=2, target="/a", tags=("t",)) == Covered(False, 5.0)
    tags["u"] = LastPurges(hard=6)
    assert covering(banned, tags, mark=2, target="/a", tags=("t", "u")) is HARD


def test_bans_are_looked_up_by_prefix_length_and_retired() -> None:
    """A check costs a lookup per distinct prefix length, not a test per ban; retiring
    forgets the prefixes whose purges are all at or below the number."""
    banned = bans(*((n, (f"/p/{n:05d}/",), False, 0.0) for n in range(1, 10_001)))
    assert banned.lengths == {9: 10_000}
    assert covering(banned, {}, mark=0, target="/p/00042/x", tags=()) is HARD
    assert covering(banned, {}, mark=42, target="/p/00042/x", tags=()) is None
    banned.retire(9_999)
    assert (len(banned), banned.newest()) == (1, 10_000)
    banned.retire(10_000)
    assert (len(banned), banned.lengths, banned.newest()) == (0, {}, 0)


def test_a_tag_purge_covers_entries_carrying_the_tag_stored_before_it() -> None:
    tags = {"t": LastPurges(hard=7)}
    assert covering(Bans(), tags, mark=6, target="/x", tags=("s", "t")) is HARD
    assert covering(Bans(), tags, mark=7, target="/x", tags=("t",)) is None
    assert covering(Bans(), tags, mark=6, target="/x", tags=("s",)) is None
    assert covering(Bans(), tags, mark=6, target="/x", tags=()) is None


@pytest.mark.parametrize(
    ("birth", "lifetime", "stale_at", "expected"),
    [
        (100.0, 60.0, 130.0, 30.0),  # fresh at the purge: fresh until it
        (100.0, 60.0, 200.0, 60.0),  # already stale: unchanged
        (100.0, 60.0, 90.0, 0.0),  # born after the purge time (a clock step): stale now
    ],
)
def test_a_soft_purge_ends_freshness_at_its_time(
    birth: float, lifetime: float, stale_at: float, expected: float
) -> None:
    """RFC 9111 §4.2: fresh while age < lifetime; a soft purge makes the entry stale from its
    time on, so stale-while-revalidate and stale-if-error are counted from then."""
    assert stale_lifetime(birth, lifetime, stale_at) == expected
