"""What the cache keeps for one response, with everything the hit path needs precomputed.

A ``StoredResponse`` is built once, on a miss, by ``policy.assess_response``; a hit only reads it.
Freshness is reduced at store time to two numbers, ``birth`` (when its age was 0) and
``freshness_lifetime``, so the hit path does one addition and one comparison instead of
re-parsing Cache-Control (RFC 9111 §4.2).

Every cached object carries one, so its layout is measured (tests/store/test_memory.py) and
kept to eight slots:
- An entry the fast path may serve keeps its fields once, as the lines a hit sends
  (``hit_lines``); ``headers`` is read back from them when a slower path needs the pairs.
- It stores no number it can derive: ``expires_at``, ``size``, and the validators ``etag``
  and ``last_modified`` (read from the fields) are computed when asked for.
- Its numbers cost nothing of their own when they can be shared: a lifetime is the same
  float object as every other entry's equal lifetime, and ``key_size`` is a small int.
- Only ``birth`` is a number of its own (24 bytes).

The store takes stored entries out of the garbage collector's reach (decision 0011), so an
entry must refer only to strings, bytes, numbers, None and tuples of them: nothing that could
put it in a reference cycle. ``holds_no_cycle`` checks that, slot by slot, and the store
leaves an entry it does not pass to the collector.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from proxy.core.http.fields import Headers, Lines, line_fields, write_lines

# (domain, generation, request-target as received). Callers pass the parts, never a string
# they joined, so no Host or path can be spelled to collide with another domain's key. (The
# memory store joins them inside, where they cannot collide: a domain holds no space and a
# generation is digits, so the first two spaces split any joined key back; memory.py.)
CacheKey = tuple[str, int, str]

T = TypeVar("T")


class _StoredHeaders:
    """``StoredResponse.headers``: the stored fields, read back from ``hit_lines`` when the
    entry has them (the usual case), so an entry keeps its fields once. Otherwise (Vary,
    no-cache, a field that cannot be written back) they are kept as pairs, in ``_rare``."""

    @overload
    def __get__(self, entry: None, owner: type[Any]) -> _StoredHeaders: ...

    @overload
    def __get__(self, entry: StoredResponse, owner: type[Any]) -> Headers: ...

    def __get__(self, entry: StoredResponse | None, owner: type[Any]) -> Headers | _StoredHeaders:
        if entry is None:
            raise AttributeError("headers")  # a required field: no class-level default
        rare = entry._rare
        own = None if rare is None else rare[_OWN_HEADERS]
        return own if own is not None else line_fields(entry.hit_lines[:-1])

    def __set__(self, entry: StoredResponse, headers: Headers) -> None:
        raise AttributeError("StoredResponse is frozen")


# What an entry costs in memory, counted against cache.max_bytes by ``StoredResponse.size``.
#
# Per entry besides its body, field and key characters: the entry object, its birth time, the
# lines tuple, the store's index slot and LRU node, the key string, the bucket-list slot, the
# object headers of the body, and the allocators' rounding. Measured at about 240 with
# tracemalloc (tests/store/test_memory.py); resident memory also pays for the hash tables'
# growth in steps, up to about 100 more at 100k entries (benchmarks/README.md).
ENTRY_OVERHEAD = 360
# Per stored header field of an entry without lines, besides its characters: its (name,
# value) tuple, the value string's object header and its slot in the header tuple (names are
# shared: aiohttp's constants, or respond.shared_fields). Measured at 132 by RSS, 133 by
# tracemalloc. An upper bound: fields repeated across entries are shared, and cost only the
# slot.
HEADER_OVERHEAD = 136
# Per line of an entry with lines, besides its characters: the bytes object's header, the
# allocator's rounding and its slot in the lines tuple.
LINE_OVERHEAD = 56


def lines_cost(lines: Lines) -> int:
    return sum(map(len, lines)) + LINE_OVERHEAD * len(lines)


def headers_cost(headers: Headers) -> int:
    return sum(len(name) + len(value) for name, value in headers) + HEADER_OVERHEAD * len(headers)


# Fields most entries hold at their default, kept together in one ``_rare`` tuple when any of
# them differs and not at all otherwise: six slots fewer per entry (48 bytes). The last is
# the fields as pairs, for an entry whose lines do not hold them.
_RARE_FIELDS = (
    "revalidate_always",
    "stale_if_error",
    "stale_while_revalidate",
    "vary",
    "vary_values",
    "tags",
)
_RARE_DEFAULTS: tuple[Any, ...] = (False, None, 0.0, (), (), (), None)
_OWN_HEADERS = 6


class _RarelySet(Generic[T]):
    """A field read from ``StoredResponse._rare``, or its default when the entry has none."""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._index = _RARE_FIELDS.index(name)
        self._name = name

    @overload
    def __get__(self, entry: None, owner: type[Any]) -> _RarelySet[T]: ...

    @overload
    def __get__(self, entry: StoredResponse, owner: type[Any]) -> T: ...

    def __get__(self, entry: StoredResponse | None, owner: type[Any]) -> T | _RarelySet[T]:
        if entry is None:
            raise AttributeError(self._name)  # a required field: no class-level default
        rare = entry._rare
        value = _RARE_DEFAULTS[self._index] if rare is None else rare[self._index]
        return cast(T, value)

    def __set__(self, entry: StoredResponse, value: object) -> None:
        raise AttributeError("StoredResponse is frozen")


# Equal lifetimes share one float: a site gives most of its objects one of a few max-ages.
_shared_seconds = lru_cache(maxsize=1024)(float)


@dataclass(frozen=True, init=False)
class StoredResponse:
    # Slots, not a __dict__: nine of them (104 bytes with the object's headers). The other
    # fields are read from these: see the module's docstring.
    __slots__ = (
        "_rare",
        "birth",
        "body",
        "freshness_lifetime",
        "hit_lines",
        "key_size",
        "mark",
        "reason",
        "status",
    )

    status: int
    reason: str
    body: bytes
    # Wall-clock second at which its age was 0: response_time - corrected_initial_age
    # (RFC 9111 §4.2.3), so its age is now - birth.
    birth: float
    freshness_lifetime: float  # RFC 9111 §4.2.1, as it was when stored
    # Bytes its key costs against cache.max_bytes, counted in ``size``: twice the target's
    # length (a small int, shared, for targets up to 128 characters).
    key_size: int
    # A fresh hit, ready to send but for Age: the status line and stored fields
    # (``write_lines``), then the edge's own lines in one (Via, Cache-Status), built by the
    # edge when it stores a response the fast path may serve. Empty otherwise.
    hit_lines: Lines
    if TYPE_CHECKING:  # a slot, not a field: the _RARE_FIELDS and the fields as pairs when
        _rare: tuple[Any, ...] | None  # one is not its default
        # A slot, not a field, and the one thing that changes in an entry: the domain's purge
        # number when the store stored it or last checked it against the outstanding purges
        # (core/purges.py), written only through ``set_mark``. 0 until stored; ``replace``
        # does not copy it.
        mark: int
    # The rarely set fields (``_RARE_FIELDS``), read from ``_rare``. After the slots: a
    # descriptor has a class-level default, as far as the dataclass machinery can tell.
    # no-cache: stored, but validated on every use (§5.2.2.4)
    revalidate_always: _RarelySet[bool] = _RarelySet()
    vary: _RarelySet[tuple[str, ...]] = _RarelySet()  # lowercase field names from Vary
    # the request's values for them, normalised
    vary_values: _RarelySet[tuple[str | None, ...]] = _RarelySet()
    # Seconds past expiry it may be served while the origin fails: 0 forbidden, None the
    # domain's default (freshness.stale_if_error).
    stale_if_error: _RarelySet[float | None] = _RarelySet()
    # Seconds past expiry it may answer while revalidated in the background (RFC 5861 §3).
    stale_while_revalidate: _RarelySet[float] = _RarelySet()
    # The origin's tags (Surrogate-Key, Cache-Tag: core/purges.py), each once.
    tags: _RarelySet[tuple[str, ...]] = _RarelySet()
    # End-to-end headers as stored: no hop-by-hop, no Age. Last: a descriptor has a default.
    headers: _StoredHeaders = _StoredHeaders()

    def __init__(
        self,
        *,
        status: int,
        reason: str,
        headers: Headers,
        body: bytes,
        birth: float,
        freshness_lifetime: float,
        key_size: int = 0,
        revalidate_always: bool = False,
        vary: tuple[str, ...] = (),
        vary_values: tuple[str | None, ...] = (),
        stale_if_error: float | None = None,
        stale_while_revalidate: float = 0.0,
        hit_lines: Lines = (),
        tags: tuple[str, ...] = (),
    ) -> None:
        # The lines are kept only while they say exactly what the entry says: ``replace`` with
        # new fields or status drops them, so the fast path can never send stale ones.
        held = bool(hit_lines) and hit_lines[:-1] == write_lines(status, reason, headers)
        rare = (
            revalidate_always,
            stale_if_error,
            stale_while_revalidate,
            vary,
            vary_values,
            tags,
            None if held else headers,
        )
        self._set_slots(
            status,
            reason,
            body,
            birth,
            freshness_lifetime,
            key_size,
            hit_lines if held else (),
            None if rare == _RARE_DEFAULTS else rare,
        )

    @classmethod
    def from_parts(
        cls,
        status: int,
        reason: str,
        body: bytes,
        birth: float,
        freshness_lifetime: float,
        key_size: int,
        hit_lines: Lines,
        rare: tuple[Any, ...] | None,
    ) -> StoredResponse:
        """An entry rebuilt from the pieces another entry kept (``parts``), without the checks
        of ``__init__``: the shared tier's decode of a record it wrote and checked (its CRC),
        so a hit from disk keeps its ``hit_lines`` at the cost of a few slot writes."""
        entry = cls.__new__(cls)
        entry._set_slots(status, reason, body, birth, freshness_lifetime, key_size, hit_lines, rare)
        return entry

    def _set_slots(
        self,
        status: int,
        reason: str,
        body: bytes,
        birth: float,
        freshness_lifetime: float,
        key_size: int,
        hit_lines: Lines,
        rare: tuple[Any, ...] | None,
    ) -> None:
        """Every slot, once (the entry is frozen): ``__init__`` after its checks, and
        ``from_parts`` with what another entry kept; ``mark`` starts at 0 (not yet stored)."""
        set_ = object.__setattr__
        set_(self, "status", status)
        set_(self, "reason", reason)
        set_(self, "body", body)
        set_(self, "birth", birth)
        set_(self, "freshness_lifetime", _shared_seconds(freshness_lifetime))
        set_(self, "key_size", key_size)
        set_(self, "mark", 0)
        set_(self, "hit_lines", hit_lines)
        set_(self, "_rare", rare)

    def parts(self) -> tuple[Any, ...]:
        """What ``from_parts`` rebuilds it from, but for the body: status, reason, birth,
        freshness lifetime, key size, hit lines, and the rarely set fields followed by the
        fields as pairs (always: an entry rebuilt from them serves a slow-path answer without
        parsing its lines; ``lean`` drops them again before it is kept in memory)."""
        rare = self._rare
        rest = _RARE_DEFAULTS[:_OWN_HEADERS] if rare is None else rare[:_OWN_HEADERS]
        pairs = self.headers  # the kept pairs, or read back from the lines
        return (
            self.status,
            self.reason,
            self.birth,
            self.freshness_lifetime,
            self.key_size,
            self.hit_lines,
            (*rest, pairs),
        )

    def lean(self) -> StoredResponse:
        """The entry as the memory tier keeps it: an entry with hit lines keeps its fields
        only there (its ``size`` counts them so), so the pairs ``from_parts`` may have added
        beside them go."""
        rare = self._rare
        if not self.hit_lines or rare is None or rare[_OWN_HEADERS] is None:
            return self
        rest = rare[:_OWN_HEADERS]
        kept = None if rest == _RARE_DEFAULTS[:_OWN_HEADERS] else (*rest, None)
        lean = StoredResponse.from_parts(
            self.status,
            self.reason,
            self.body,
            self.birth,
            self.freshness_lifetime,
            self.key_size,
            self.hit_lines,
            kept,
        )
        return lean

    def set_mark(self, number: int) -> None:
        """The store's note that the entry is checked against the domain's purges up to
        ``number`` (memory.py), or was stored under it (the shared tier's decode of a record,
        store/shared/records.py). The one write to an entry, and not one a hit can see:
        whatever the mark, the entry serves the same bytes; only the store's purge check
        reads it."""
        object.__setattr__(self, "mark", number)

    def copy_with(self, **changes: Any) -> StoredResponse:
        """A new entry with ``changes`` (``dataclasses.replace``) and this one's mark: a copy
        a store changes for one answer (the shorter freshness of a soft purge, a distrusted
        copy: store/shared) is judged by the purges as the entry it was made from, where
        ``replace`` alone starts a new entry's mark at 0."""
        copy = replace(self, **changes)
        copy.set_mark(self.mark)
        return copy

    @property
    def expires_at(self) -> float:
        """When it stops being fresh (wall-clock seconds)."""
        return self.birth + self.freshness_lifetime

    @property
    def size(self) -> int:
        """Bytes counted against cache.max_bytes: an upper bound on what it costs in memory,
        its fields counted as it keeps them (lines or pairs) and its key by ``key_size``."""
        lines = self.hit_lines
        fields = lines_cost(lines) if lines else headers_cost(self.headers)
        return len(self.body) + fields + ENTRY_OVERHEAD + self.key_size

    @property
    def etag(self) -> str | None:
        """The stored ETag (the last, if several), or None."""
        return last_field(self.headers, "etag")

    @property
    def last_modified(self) -> str | None:
        """The stored Last-Modified (the last, if several), or None."""
        return last_field(self.headers, "last-modified")

    def age(self, now: float) -> float:
        """Current age, RFC 9111 §4.2.3: the corrected initial age plus the time since it was
        received, which is now - birth. Never negative, even when the clock steps back."""
        age = now - self.birth
        return age if age > 0.0 else 0.0

    def fresh_age(self, now: float) -> float | None:
        """Its age (``age``) while its freshness lifetime has not run out, else None: RFC 9111
        §4.2, "fresh if its age has not yet exceeded its freshness lifetime" (equal counts
        as stale, as in §4.2's ``response_is_fresh = (freshness_lifetime > current_age)``).
        This is the freshness rule; the fast path asks it directly, ``is_fresh`` adds
        no-cache."""
        age = now - self.birth
        if age < 0.0:
            age = 0.0
        return age if age < self.freshness_lifetime else None

    def is_fresh(self, now: float) -> bool:
        """May it be served without validation (§4.2, and no-cache §5.2.2.4)?"""
        return not self.revalidate_always and self.fresh_age(now) is not None


def last_field(fields: Iterable[tuple[str, str]], lowered_name: str) -> str | None:
    """The value of the last field named ``lowered_name`` (any case), or None: where a field
    that should appear once appears several times, the cache reads the last (the ETag,
    Last-Modified and Date it validates and ages with)."""
    found = None
    for name, value in fields:
        if name.lower() == lowered_name:
            found = value
    return found


# -- acyclicity (decision 0011) ------------------------------------------------------------------

# What an entry's slots may hold, directly or in tuples (nested to any depth): objects that
# refer to no other object, so no reference cycle can run through them. Exact types: a
# subclass made in Python has a __dict__, which can refer to anything.
_LEAVES = frozenset({str, bytes, int, float, bool, type(None)})
_HAVE_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC: the type's objects can refer to others
_slots = attrgetter(*StoredResponse.__slots__)


def _leaf(value: object) -> bool:
    kind = type(value)
    if kind in _LEAVES:
        return True
    if kind is tuple:
        leaves = _LEAVES
        for item in cast(tuple[object, ...], value):
            if type(item) not in leaves and not _leaf(item):
                return False
        return True
    # A str subclass written in C without the collector's support: aiohttp's header-name
    # constants (multidict's istr, which holds only its canonical str). The collector never
    # looks inside such an object, so it cannot carry a cycle the collector could free.
    return issubclass(kind, str) and not kind.__flags__ & _HAVE_GC


def holds_no_cycle(entry: object) -> bool:
    """True when ``entry`` is a ``StoredResponse`` whose every slot holds only str, bytes,
    int, float, bool, None or tuples of them: then no reference cycle can run through it, and
    the collector need never visit it (the store untracks it, decision 0011). Anything else
    (a list, a dict, an object of another class) could refer back to the entry."""
    return type(entry) is StoredResponse and _leaf(_slots(entry))
