"""Purges beyond a whole domain: what a purge asks for, and which stored entries it covers.

Theory of operation (decision 0024). Every purge of a domain gets the next number in the
domain's purge sequence. The store remembers, on every entry, the number the domain was at
when the entry was stored or last checked (its *mark*). Then:

- **url** purges are eager: the store drops (hard) or expires (soft) the URL's variants at
  once, O(items).
- **all** (hard) is today's clear by generation (decision 0003), untouched.
- **prefix** purges are lazy *bans* (as Varnish's): a ban covers an entry whose request-target
  starts with one of its prefixes and whose mark is below the ban's number. Only entries
  stored before a ban can pay for it, and a checked entry is marked, so it pays once.
- **tag** purges are lazy too: the store keeps, per (domain, tag), the numbers of the tag's
  last hard and last soft purge; an entry carrying the tag is covered when one is above its
  mark.
- **soft** purges (any kind, ``all`` included, which is then a soft ban on the prefix "")
  do not make an entry unusable: they end its freshness at the purge's time, so the next
  request revalidates it (RFC 9111 §4.3) and stale-while-revalidate and stale-if-error
  (RFC 5861) still apply within their limits, counted from that time.

This module holds the request model, the tag parsing rules and the matching rules. It reads
no clock and does no I/O: times are passed in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import target_of
from proxy.core.http.fields import Headers

PurgeKind = Literal["url", "prefix", "tag", "all"]
KINDS: tuple[PurgeKind, ...] = ("url", "prefix", "tag", "all")

# Bounds on a purge request, so one purge's cost at purge time (O(items)) is bounded too.
MAX_ITEMS = 256  # Fastly's batch purge takes 256 surrogate keys
MAX_TARGET_CHARS = 8190  # aiohttp's longest request line: no longer target can be stored
MAX_SAMPLE = 20  # keys a dry run names

# Bounds on the tags an origin sets on one response. A response over them is not stored
# (Cache-Status detail "tags-over-limit"): dropping a tag would make a purge of it miss.
MAX_TAGS = 64
MAX_TAG_CHARS = 256
# Which response fields carry tags, and how each separates them (" ": any white space).
TAG_HEADERS = {"surrogate-key": " ", "cache-tag": ","}
DEFAULT_TAG_HEADERS = ("Surrogate-Key", "Cache-Tag")

_TAG = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # visible ASCII but for ',': one token
_TARGET = re.compile(r"/[\x21-\x7e]*")  # origin-form as received: no space, no control


class InvalidPurge(ValueError):
    """The purge request breaks a rule; the message says which, for a 4xx."""


@dataclass(frozen=True, slots=True)
class Purge:
    """One purge of one domain: a kind, its items (targets, prefixes or tags; none for
    ``all``), and the options. Build it with ``purge_request``, which checks it."""

    kind: PurgeKind
    items: tuple[str, ...] = ()
    soft: bool = False
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """The receipt of a purge as one store applied it.

    ``entries`` and ``bytes`` are exact when ``exact`` is true: every url purge, every
    ``all``, and every dry run (counted by a walk). A hard or soft prefix or tag purge is lazy
    and does not count at purge time (that would be O(entries)): it reports the domain's
    entries and bytes as an upper bound, with ``exact`` false. ``sample`` (dry runs only) names
    up to MAX_SAMPLE covered request-targets."""

    domain: str
    kind: PurgeKind
    items: tuple[str, ...]
    soft: bool
    dry_run: bool
    number: int  # the purge's number in the domain's sequence (a dry run: the current one)
    generation: int  # the domain's generation after it (moves only with a hard ``all``)
    entries: int
    bytes: int
    exact: bool
    seconds: float  # time the store took
    sample: tuple[str, ...] = ()
    # A fleet purge (proxy/fleet/purger.py): the live edge processes that applied it, and
    # those whose lease was live (as ClearResult); a fleet dry run: ``live`` only, the
    # processes asked. None: one process, no fleet.
    acked: int | None = None
    live: int | None = None
    epoch: str | None = None  # a fleet purge: the fleet's epoch its number belongs to
    # A fleet purge (decision 0026): how many of the ``acked`` processes reported their
    # entries and bytes with their ack (the figures above are their sum); a fleet dry run:
    # how many of the ``live`` ones answered (the figures are the sum of their caches').
    reported: int | None = None
    # One edge process's answer to a fleet dry run, as it sends it: the process. The
    # receipt of the whole dry run sums the answers and leaves this None; audit records
    # written before dry runs asked every process still name the one they asked.
    answered_by: str | None = None


def purge_request(
    kind: str, items: Sequence[object] = (), *, soft: bool = False, dry_run: bool = False
) -> Purge:
    """A checked ``Purge``, or InvalidPurge saying what is wrong. Items are kept in order,
    each once."""
    if kind not in KINDS:
        raise InvalidPurge(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if kind == "all":
        if items:
            raise InvalidPurge("a purge of all takes no items")
        return Purge("all", (), soft=soft, dry_run=dry_run)
    if not items:
        raise InvalidPurge(f"a {kind} purge needs at least one item")
    if len(items) > MAX_ITEMS:
        raise InvalidPurge(f"at most {MAX_ITEMS} items per purge, not {len(items)}")
    for item in items:
        _check_item(kind, item)
    unique = tuple(dict.fromkeys(str(item) for item in items))
    return Purge(kind, unique, soft=soft, dry_run=dry_run)


def _check_item(kind: str, item: object) -> None:
    if not isinstance(item, str):
        raise InvalidPurge(f"{kind} items must be strings, not {type(item).__name__}")
    if kind == "tag":
        if not valid_tag(item):
            raise InvalidPurge(
                f"tag {item[:40]!r} must be 1-{MAX_TAG_CHARS} visible ASCII characters without ','"
            )
    elif len(item) > MAX_TARGET_CHARS or not _TARGET.fullmatch(item):
        raise InvalidPurge(
            f"{kind} {item[:40]!r} must be a path (and query) starting with '/', in visible "
            f"ASCII as requested (percent-encoded), at most {MAX_TARGET_CHARS} characters"
        )


def valid_tag(tag: str) -> bool:
    return len(tag) <= MAX_TAG_CHARS and _TAG.fullmatch(tag) is not None


# -- tags from the origin -----------------------------------------------------------------------


@lru_cache(maxsize=64)  # one per domain's setting; asked on every origin response
def tag_header_names(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


def tagged(entry: StoredResponse, tags: tuple[str, ...]) -> StoredResponse:
    """The entry with the origin's tags (none: the entry itself)."""
    return replace(entry, tags=tags) if tags or entry.tags else entry


def split_tags(
    headers: Headers, tag_headers: frozenset[str]
) -> tuple[Headers, tuple[str, ...] | None]:
    """The response's fields without its tag fields (``tag_headers``, lowercase names: those
    never reach a client), and its tags, each once, in order: ``Surrogate-Key`` separated by
    spaces, ``Cache-Tag`` by commas. None for the tags when they are over the bounds
    (MAX_TAGS, MAX_TAG_CHARS) or not tokens: such a response must not be stored."""
    if not tag_headers:
        return headers, ()
    kept: list[tuple[str, str]] = []
    tags: dict[str, None] = {}
    valid = True
    for name, value in headers:
        lowered = name.lower()
        if lowered not in tag_headers:
            kept.append((name, value))
            continue
        separator = TAG_HEADERS[lowered]
        for tag in value.split(separator) if separator == "," else value.split():
            tag = tag.strip(" \t")
            if not tag:
                continue
            if not valid_tag(tag):
                valid = False
            tags[tag] = None
    if len(kept) == len(headers):
        return headers, ()
    if not valid or len(tags) > MAX_TAGS:
        return tuple(kept), None
    return tuple(kept), tuple(tags)


# -- matching -----------------------------------------------------------------------------------


@dataclass(slots=True)
class LastPurges:
    """The last hard and last soft purge of one prefix or one tag in one domain: their
    numbers (0 for none) and the soft one's time."""

    hard: int = 0
    soft: int = 0
    soft_at: float = 0.0

    def add(self, number: int, soft: bool, at: float) -> None:
        if soft:
            self.soft, self.soft_at = number, at
        else:
            self.hard = number

    @property
    def newest(self) -> int:
        return max(self.hard, self.soft)


TagPurges = LastPurges


class Bans:
    """A domain's outstanding prefix bans (a soft ``all`` is the ban of ""): per prefix its
    last purges, and how many prefixes have each length. An entry is checked by looking up
    each prefix of its target whose length some ban has: O(distinct lengths), whatever the
    number of bans, instead of one test per ban."""

    __slots__ = ("by_prefix", "lengths")

    def __init__(self) -> None:
        self.by_prefix: dict[str, LastPurges] = {}
        self.lengths: dict[int, int] = {}  # prefix length -> prefixes of that length

    def __len__(self) -> int:
        return len(self.by_prefix)

    def add(self, number: int, prefixes: tuple[str, ...], soft: bool, at: float) -> None:
        for prefix in prefixes:
            last = self.by_prefix.get(prefix)
            if last is None:
                last = self.by_prefix[prefix] = LastPurges()
                self.lengths[len(prefix)] = self.lengths.get(len(prefix), 0) + 1
            last.add(number, soft, at)

    def retire(self, upto: int) -> None:
        """Forget the prefixes whose purges are all numbered ``upto`` or below."""
        for prefix in [p for p, last in self.by_prefix.items() if last.newest <= upto]:
            del self.by_prefix[prefix]
            left = self.lengths[len(prefix)] - 1
            if left:
                self.lengths[len(prefix)] = left
            else:
                del self.lengths[len(prefix)]

    def newest(self) -> int:
        return max((last.newest for last in self.by_prefix.values()), default=0)

    def matching(self, target: str) -> list[LastPurges]:
        found = []
        by_prefix = self.by_prefix
        for length in self.lengths:
            if length <= len(target):
                last = by_prefix.get(target[:length])
                if last is not None:
                    found.append(last)
        return found


@dataclass(frozen=True, slots=True)
class Covered:
    """What the outstanding purges say about one entry: dropped (hard), or stale from
    ``stale_at`` on (soft)."""

    hard: bool
    stale_at: float = 0.0


HARD = Covered(hard=True)


def covering(
    bans: Bans,
    tag_purges: dict[str, LastPurges],
    *,
    mark: int,
    target: str,
    tags: tuple[str, ...],
) -> Covered | None:
    """Whether the purges newer than ``mark`` (the prefix bans; the tags' last purges) cover
    an entry stored under ``target`` with ``tags``: None when none does. A hard purge wins
    over soft ones. Soft: the entry is stale from a covering soft purge's time on; of several
    prefixes or tags, the earliest time counts, and for one prefix or tag its last soft purge
    (which is also in the past: the entry is stale now either way)."""
    stale_at: float | None = None
    lasts = bans.matching(target_of(target)) if bans.lengths else []  # either scheme's
    if tags:
        lasts.extend(last for tag in tags if (last := tag_purges.get(tag)) is not None)
    for last in lasts:
        if last.hard > mark:
            return HARD
        if last.soft > mark and (stale_at is None or last.soft_at < stale_at):
            stale_at = last.soft_at
    return None if stale_at is None else Covered(hard=False, stale_at=stale_at)


def stale_lifetime(birth: float, lifetime: float, stale_at: float) -> float:
    """A freshness lifetime that ends no later than ``stale_at`` (a soft purge's time)."""
    return max(0.0, min(lifetime, stale_at - birth))
