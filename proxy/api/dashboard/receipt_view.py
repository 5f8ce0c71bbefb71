"""Receipts for people: what the purge page and the History page show of a purge.

A receipt (proxy/core/purge/receipts.py) reaches the dashboard two ways: as the dict
``audited_purge`` answers, and as the JSON an audit record keeps (its first AUDIT_ITEMS items
and ``items_total``). Both become a ``ReceiptView``. The JSON is read defensively: a row
written by an older or newer program, or damaged, shows what can be read and never fails the
page. Clear-cache records and rows from before schema 5 have no kind and no receipt: History
shows them as "clear".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.api.dashboard.pages import clock_number
from proxy.api.purge import UNKNOWN_KIND
from proxy.core.purge.receipts import CLOCK_NUMBERS, amount_text, describe, duration_text
from proxy.state.sqlite import CLEAR_KIND, AuditRecord

# Labels of the kinds, for the form's select and the pages.
KIND_LABELS = {"url": "URLs", "prefix": "Prefixes", "tag": "Tags", "all": "Everything"}
# History's kind filter: the purge kinds, purge attempts whose body named no kind, then the
# records with none (clear-cache's).
HISTORY_KINDS = (*KIND_LABELS, UNKNOWN_KIND, CLEAR_KIND)
SHORT_ITEMS = 3  # items named in a History row before "and N more"
SHORT_CHARS = 48  # characters of one item in that short list


@dataclass(frozen=True, slots=True)
class ReceiptView:
    kind: str  # url, prefix, tag, all ("" when the receipt did not say)
    items: tuple[str, ...]  # as kept: all of them, or the audit log's first ones
    items_total: int  # how many the purge had
    soft: bool
    dry_run: bool
    number: int | None
    generation: int | None
    entries: int | None
    bytes: int | None
    exact: bool
    sample: tuple[str, ...]
    acked: int | None
    live: int | None
    reported: int | None  # a fleet dry run: the processes that answered in time
    seconds: float | None
    summary: str  # describe(): one line (and a sample line for a dry run)

    @property
    def kind_label(self) -> str:
        return KIND_LABELS.get(self.kind, self.kind or "?")

    @property
    def amount(self) -> str:
        """Entries and bytes, as the CLI says them (amount_text): the domain's count when
        the purge did not count its own."""
        if self.entries is None:
            return "not recorded"
        if self.bytes is None:  # an audit row that kept no size
            text = f"{self.entries} {'entry' if self.entries == 1 else 'entries'}"
            return text if self.exact else f"not counted, among the domain's {text}"
        return amount_text(self.entries, self.bytes, exact=self.exact, dry_run=self.dry_run)

    @property
    def number_text(self) -> str:
        """The purge's number for people (``clock_number``). A fleet's dry run is given the
        fleet's latest number (issue 34 B3); an audit record of before that kept one
        process's own count, of another series than the purge's, so none is shown."""
        if self.number is None:
            return "—"
        if self.dry_run and self.live is not None and self.number < CLOCK_NUMBERS:
            return "given with the purge"
        return clock_number(self.number)

    @property
    def generation_text(self) -> str:
        return "—" if self.generation is None else clock_number(self.generation)

    @property
    def took(self) -> str:
        return duration_text(self.seconds) if self.seconds is not None else "—"

    @property
    def edge(self) -> str | None:
        """Edge processes that applied it (a dry run: that counted it), when a fleet
        answered; in the words of ``describe`` and so of ``cdn-proxy purge``."""
        if self.live is None:
            return None
        if self.dry_run:
            counted = "?" if self.reported is None else self.reported
            return f"counted in the caches of {counted} of {self.live} live edge processes"
        applied = "?" if self.acked is None else self.acked
        return f"applied by {applied} of {self.live} live edge processes"

    @property
    def items_kept(self) -> bool:
        """False when the audit log kept only the first items."""
        return len(self.items) >= self.items_total

    @property
    def short_items(self) -> str:
        """The first few items, each cut short, and how many more there are."""
        shown = [_cut(item) for item in self.items[:SHORT_ITEMS]]
        more = self.items_total - len(shown)
        return " ".join(shown) + (f" and {more} more" if more > 0 else "")


def _cut(item: str) -> str:
    return item if len(item) <= SHORT_CHARS else item[: SHORT_CHARS - 1] + "…"


def receipt_view(fields: Mapping[str, object]) -> ReceiptView:
    """A view of a receipt; fields missing or of the wrong type read as unknown."""
    items = _strings(fields.get("items"))
    total = fields.get("items_total")
    return ReceiptView(
        kind=str(fields.get("kind") or ""),
        items=items,
        items_total=total if isinstance(total, int) and total > len(items) else len(items),
        soft=fields.get("soft") is True,
        dry_run=fields.get("dry_run") is True,
        number=_int(fields.get("number")),
        generation=_int(fields.get("generation")),
        entries=_int(fields.get("entries")),
        bytes=_int(fields.get("bytes")),
        exact=fields.get("exact") is True,
        sample=_strings(fields.get("sample")),
        acked=_int(fields.get("acked")),
        live=_int(fields.get("live")),
        reported=_int(fields.get("reported")),
        seconds=_seconds(fields.get("seconds")),
        summary=describe(fields),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One row of the History page: the record, its kind for people, its receipt if any."""

    record: AuditRecord
    kind: str  # url, prefix, tag, all, or "clear" (no kind: clear-cache, or before schema 5)
    dry_run: bool
    receipt: ReceiptView | None

    @property
    def dropped(self) -> str:
        """The Entries dropped cell: "≤ N" for a purge that did not count what it covered
        (N is then the domain's entries and bytes, an upper bound), else the count."""
        count = self.record.entries_dropped
        if self.receipt is not None and not self.receipt.exact and not self.dry_run:
            return f"≤ {count}"
        return str(count)

    @property
    def edge(self) -> str:
        """The Edge processes cell: "2 of 2" applied a purge or clear, "2 of 2 counted" a
        dry run (its record keeps no ``acked``: nothing was applied), "—" without a fleet."""
        live = self.record.live
        if live is None:
            return "—"
        if self.dry_run:
            reported = self.receipt.reported if self.receipt is not None else None
            return f"{'?' if reported is None else reported} of {live} counted"
        acked = self.record.acked
        return f"{'?' if acked is None else acked} of {live}"


def history_row(record: AuditRecord) -> HistoryRow:
    return HistoryRow(
        record=record,
        kind=record.kind or CLEAR_KIND,
        dry_run=record.outcome == "dry_run",
        receipt=_stored_receipt(record.receipt),
    )


def _stored_receipt(text: str | None) -> ReceiptView | None:
    if not text:
        return None
    try:
        fields = json.loads(text)
    except ValueError:  # a damaged row: the rest of the record still shows
        return None
    return receipt_view(fields) if isinstance(fields, dict) else None
