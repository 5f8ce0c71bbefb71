"""How a receipt reads to a person (proxy/core/purge/receipts.py ``describe``), for the CLI and
the dashboard: a purge, a fleet purge, a fleet dry run, and an old audit record's dry run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.core.purge.purges import PurgeResult
from proxy.core.purge.receipts import describe, duration_text, receipt

URLS = PurgeResult(
    "a.test", "url", ("/a", "/b"), False, False, 7, 3, 2, 2048, True, 0.0, acked=None
)


def test_a_purge_of_one_process() -> None:
    assert describe(receipt(URLS, 0.002)) == (
        "purged 2 URLs of a.test: 2 entries, 2.0 KiB (purge 7) in 2.0 ms"
    )


def test_a_fleet_purge_names_who_applied_it_and_whose_figures_are_summed() -> None:
    fleet = replace(URLS, acked=3, live=3, reported=2)
    assert describe(receipt(fleet, 0.01)).endswith(
        "in 10.0 ms; applied by 3 of 3 live edge processes (the figures are the sum of 2 of them)"
    )


def test_a_lazy_purge_says_its_number_is_the_domains_not_a_count() -> None:
    """Issue 22 item 8: a prefix purge's receipt said "at most 8 entries" right after a
    preview that counted 4. The 8 is the domain's count (a prefix or tag is matched lazily,
    so the purge counts none of its own): it says so."""
    prefix = replace(URLS, kind="prefix", items=("/assets/",), entries=8, bytes=8192, exact=False)
    assert describe(receipt(prefix, 0.001)) == (
        "purged 1 prefix of a.test: not counted, among the domain's 8 entries, 8.0 KiB"
        " (a dry run counts them) (purge 7) in 1.0 ms"
    )


def test_a_fleet_dry_run_says_how_many_caches_counted() -> None:
    dry = replace(URLS, dry_run=True, live=3, reported=2, exact=False, sample=("/a",))
    assert describe(receipt(dry, 0.01)) == (
        "would purge 2 URLs of a.test: at least 2 entries, 2.0 KiB (not every edge process"
        " answered) in 10.0 ms; nothing was changed (counted in the caches of 2 of 3 live edge"
        " processes)\nsample: /a"
    )


def test_an_old_audit_records_dry_run_names_the_one_process_asked() -> None:
    old = replace(URLS, dry_run=True, live=None, answered_by="n/0/x")
    assert describe(receipt(old, 0.01)) == (
        "would purge 2 URLs of a.test: 2 entries, 2.0 KiB in 10.0 ms; nothing was changed"
        " (counted in the cache of edge process n/0/x)"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0002, "0.2 ms"),
        (0.0125, "12.5 ms"),
        (0.9999, "999.9 ms"),
        (1.0, "1.00 s"),
        (3.14159, "3.14 s"),
    ],
)
def test_a_purge_time_reads_in_milliseconds_below_a_second(seconds: float, text: str) -> None:
    """A purge takes well under a millisecond on one process: "0.000 s" said nothing."""
    assert duration_text(seconds) == text
