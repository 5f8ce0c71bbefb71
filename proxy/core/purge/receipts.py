"""The receipt of a purge, as the API sends it, the audit log keeps it and people read it.

One set of field names (decision 0025), built once here from a ``PurgeResult`` and used by
the API's 200 answer, the audit log, the CLI (``cdn-proxy purge``) and the dashboard:

- ``domain``, ``kind`` (url, prefix, tag, all), ``items`` (as purged: each once, in order),
  ``soft``, ``dry_run``;
- ``number``: the purge's number in the domain's sequence (a dry run: the current one);
  ``generation``: the domain's generation after it (moves only with a hard ``all``);
- ``entries``, ``bytes``: what the purge made unservable or stale (a dry run: would);
  exact when ``exact`` is true, else the domain's whole count (a prefix or tag purge matches
  lazily and does not count its own entries): read "not counted, among the domain's N";
- ``sample``: for a dry run, up to 20 covered request-targets; else empty;
- ``acked``, ``live``: with a fleet, the edge processes that applied it and those live;
  null without one (a fleet dry run: ``live`` only, the processes asked);
- ``reported``: with a fleet, how many processes' figures ``entries`` and ``bytes`` sum (the
  acked ones that sent figures; a dry run: those that answered in time);
- ``answered_by``: null (audit records of before decision 0026's "Dry runs" was revised
  name the one edge process such a dry run asked);
- ``seconds``: the time the control plane took, from the request's arrival to the answer.

Pure functions: no I/O, no clock (``seconds`` is passed in).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from proxy.core.purge.purges import PurgeResult

FIELDS = (
    "domain",
    "kind",
    "items",
    "soft",
    "dry_run",
    "number",
    "generation",
    "entries",
    "bytes",
    "exact",
    "sample",
    "acked",
    "live",
    "reported",
    "answered_by",
    "seconds",
)
# The audit log keeps the first of a purge's items (up to 256 targets of 8 KiB each would
# make one row megabytes) and their count in ``items_total``.
AUDIT_ITEMS = 20

_NOUNS = {"url": ("URL", "URLs"), "prefix": ("prefix", "prefixes"), "tag": ("tag", "tags")}


def receipt(result: PurgeResult, seconds: float) -> dict[str, object]:
    """The receipt of ``result``, answered after ``seconds``: FIELDS, in that order."""
    return {
        "domain": result.domain,
        "kind": result.kind,
        "items": list(result.items),
        "soft": result.soft,
        "dry_run": result.dry_run,
        "number": result.number,
        "generation": result.generation,
        "entries": result.entries,
        "bytes": result.bytes,
        "exact": result.exact,
        "sample": list(result.sample),
        "acked": result.acked,
        "live": result.live,
        "reported": result.reported,
        "answered_by": result.answered_by,
        "seconds": round(seconds, 6),
    }


def audit_text(fields: Mapping[str, object]) -> str:
    """The receipt as the audit log keeps it: compact ASCII JSON, items cut to AUDIT_ITEMS."""
    kept = dict(fields)
    items = kept.get("items")
    if isinstance(items, list) and len(items) > AUDIT_ITEMS:
        kept["items"] = items[:AUDIT_ITEMS]
        kept["items_total"] = len(items)
    return json.dumps(kept, ensure_ascii=True, separators=(",", ":"))


# A fleet numbers its clears and purges by Valkey's clock in microseconds
# (proxy/fleet/lua/prelude.lua: each number is the later of the last one + 1 and the time),
# so a number from 10**15 up stands for the time it was made; below, it is a count (a
# one-process node's own sequence for the domain).
CLOCK_NUMBERS = 10**15


def number_text(number: int, *, digits: int = 6) -> str:
    """A clear's or purge's number for people (issue 34 B3): the UTC time a fleet's number
    stands for, with ``digits`` of the second (6: every digit of the number, so two purges
    never read alike); a one-process node's small number as it is."""
    if number < CLOCK_NUMBERS:
        return str(number)
    stamp = datetime.fromtimestamp(number / 1_000_000, UTC)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S.%f")
    return text[: len(text) - 6 + digits] + " UTC"


def any_number_text(value: object) -> str:
    """``number_text`` of a receipt's or trace's field, read defensively (a JSON answer)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return number_text(value)
    return str(value)


def size_text(count: int) -> str:
    """Bytes for people: 512 B, 12.3 KiB, 4.0 MiB, 1.2 GiB."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def duration_text(seconds: float) -> str:
    """A purge's time for people: 0.2 ms, 12.5 ms, 1.25 s."""
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def amount_text(entries: object, size: object, *, exact: bool, dry_run: bool = False) -> str:
    """Entries and bytes for people. Not exact: a purge's are the domain's whole count (a
    prefix or tag is matched lazily, so the purge does not count its own), said as such and
    not as "at most N", which read as a count right after a preview that counted fewer; a
    fleet dry run's are a sum from the processes that answered ("at least")."""
    amount = f"{entries} {'entry' if entries == 1 else 'entries'}, "
    amount += size_text(size) if isinstance(size, int) else "? B"
    if exact:
        return amount
    if dry_run:  # a fleet dry run some edge processes did not answer in time
        return "at least " + amount + " (not every edge process answered)"
    return f"not counted, among the domain's {amount} (a dry run counts them)"


def _what(kind: object, items: object, domain: object, total: object = None) -> str:
    if kind == "all" or kind not in _NOUNS:
        return f"all of {domain}"
    count = len(items) if isinstance(items, list) else 0
    if isinstance(total, int) and total > count:  # an audit log's receipt (audit_text)
        count = total
    one, many = _NOUNS[str(kind)]
    return f"{count} {one if count == 1 else many} of {domain}"


def describe(fields: Mapping[str, object]) -> str:
    """One or two lines a person reads: what was purged (or would be), how much, how long.

    ``purged 3 URLs of example.com: 5 entries, 12.3 KiB (purge 42) in 2.1 ms``;
    ``soft-purged ...`` for a soft purge; ``not counted, among the domain's ...`` when not
    exact (amount_text); a dry run says
    ``would purge ...`` and names its sample (``at least ...``: a fleet dry run that not
    every edge process answered)."""
    soft = "soft-" if fields.get("soft") else ""
    what = _what(
        fields.get("kind"), fields.get("items"), fields.get("domain"), fields.get("items_total")
    )
    amount = amount_text(
        fields.get("entries"),
        fields.get("bytes"),
        exact=bool(fields.get("exact")),
        dry_run=bool(fields.get("dry_run")),
    )
    seconds = fields.get("seconds")
    took = f" in {duration_text(seconds)}" if isinstance(seconds, (int, float)) else ""
    if fields.get("dry_run"):
        line = f"would {soft}purge {what}: {amount}{took}; nothing was changed"
        sample = fields.get("sample")
        answered_by, live = fields.get("answered_by"), fields.get("live")
        if answered_by is not None:  # an audit record of before dry runs asked every one
            line += f" (counted in the cache of edge process {answered_by})"
        elif live is not None:
            line += f" (counted in the caches of {fields.get('reported')} of {live} live"
            line += " edge processes)"
        number = fields.get("number")
        if live is not None and isinstance(number, int) and number >= CLOCK_NUMBERS:
            line += f"\ncounted after purge {any_number_text(number)}, the fleet's latest"
        if isinstance(sample, list) and sample:
            line += "\nsample: " + " ".join(str(key) for key in sample)
        return line
    line = f"{soft}purged {what}: {amount} (purge {any_number_text(fields.get('number'))}){took}"
    acked, live = fields.get("acked"), fields.get("live")
    if live is not None:
        line += f"; applied by {acked} of {live} live edge processes"
        reported = fields.get("reported")
        if isinstance(reported, int) and reported != acked:
            line += f" (the figures are the sum of {reported} of them)"
    return line
