"""Accept-Encoding, reduced to the one content coding this cache asks the origin for.

Clients spell the same wish many ways ("gzip, deflate, br", "br;q=1.0, gzip;q=0.8", "GZIP",
"*"), and a response that varies on Accept-Encoding (RFC 9111 §4.1) would be stored once per
spelling, each one fetched from the origin. So the edge reads the header once per request and
replaces it, for the cache key and for the origin request alike, by a single coding: the first
of the domain's ``encodings`` (its order of preference) that the client accepts, else
``identity``. One URL then has at most one variant per coding the domain lists, plus identity.

How a value is read (RFC 9110 §12.5.3): a comma-separated list of codings, each with an
optional weight ``;q=``; names are case-insensitive, and ``x-gzip`` is gzip (§8.4.1.3). A
weight of 0 means "not acceptable"; ``*`` stands for every coding not listed by name. A weight
that is not a valid qvalue makes the member count as absent, never as acceptable. The client's
weights say only which codings it accepts: among those, the domain's order decides, so two
clients accepting the same codings share one variant.

An absent header means identity here, though §12.5.3 lets a cache send any coding then: clients
that send none (curl, scripts, health checks) mostly cannot decode one. An empty value means
identity too (§12.5.3). Identity is the answer even when a client refuses it ("identity;q=0")
and accepts nothing the domain lists: the origin sends identity or a 406 either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

IDENTITY = "identity"
# The codings a domain may list: what browsers send and origins produce today. deflate is left
# out: browsers disagree on what it means (zlib or raw deflate), so no CDN normalises to it.
CODINGS = ("br", "gzip", "zstd", IDENTITY)
DEFAULT_ENCODINGS = ("br", "gzip", "zstd")

_ALIASES = {"x-gzip": "gzip"}
# Header values longer than this are read only up to here: no client needs more to list the
# few codings that exist, and the result stays one of CODINGS whatever the input.
MAX_VALUE = 1024


def preferred(values: Sequence[str], encodings: tuple[str, ...]) -> str:
    """The coding to ask the origin for and to key the request by: the first of
    ``encodings`` the client accepts (``values``: its Accept-Encoding fields), else identity."""
    if not values:
        return IDENTITY
    joined = values[0] if len(values) == 1 else ",".join(values)
    return _preferred(joined[:MAX_VALUE], encodings)


# Few distinct header values reach an edge (one per browser build), and reading one costs
# far more than looking it up.
@lru_cache(maxsize=512)
def _preferred(value: str, encodings: tuple[str, ...]) -> str:
    weights = accepted(value)
    star = weights.get("*")
    for coding in encodings:
        weight = weights.get(coding)
        if weight is None:  # not named: "*" speaks for it, else only identity is acceptable
            weight = star if star is not None else (1.0 if coding == IDENTITY else 0.0)
        if weight > 0:
            return coding
    return IDENTITY


def accepted(value: str) -> dict[str, float]:
    """Each coding the value names, lowercased, with its weight (1 when none is given). A
    coding named twice keeps its first weight; a member whose weight is invalid is left out."""
    weights: dict[str, float] = {}
    for member in value.split(","):
        name, _, params = member.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        name = _ALIASES.get(name, name)
        weight = _weight(params)
        if weight is not None and name not in weights:
            weights[name] = weight
    return weights


def _weight(params: str) -> float | None:
    """The q parameter's value (RFC 9110 §12.4.2), 1.0 when absent, None when invalid."""
    weight = 1.0
    for param in params.split(";"):
        key, _, raw = param.partition("=")
        if key.strip().lower() != "q":
            continue
        raw = raw.strip()
        if not _is_qvalue(raw):
            return None
        weight = float(raw)
    return weight


def _is_qvalue(raw: str) -> bool:
    """qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ) (RFC 9110 §12.4.2)."""
    whole, _, fraction = raw.partition(".")
    if len(fraction) > 3 or not (fraction.isdigit() or not fraction):
        return False
    return whole == "0" or (whole == "1" and not fraction.strip("0"))


def check_codings(value: object, known: Sequence[str]) -> tuple[str, ...]:
    """A configured list of content codings: each one of ``known``, each once, in the
    order given. Raises ValueError with the reason."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list of codings from {', '.join(known)}")
    codings: list[str] = []
    for item in value:
        if not isinstance(item, str) or item not in known:
            raise ValueError(f"{item!r} is not one of {', '.join(known)}")
        if item in codings:
            raise ValueError(f"{item!r} is listed twice")
        codings.append(item)
    return tuple(codings)


def check_encodings(value: object) -> tuple[str, ...]:
    """A domain's ``encodings`` list, checked: known codings, each once, identity only last.
    Raises ValueError with the reason."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"must be a non-empty list of codings from {', '.join(CODINGS)}")
    codings = check_codings(value, CODINGS)
    if IDENTITY in codings[:-1]:
        raise ValueError("identity must come last: no coding after it would ever be chosen")
    return codings
