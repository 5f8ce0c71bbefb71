"""The checker's check (benchmarks/fleet_history.py) with purges mixed in: a purge constrains
the reads of the pages it covers, and only those; a clear constrains every page."""

from __future__ import annotations

from benchmarks.fleet_history import Clear, History, Read


def read(page: str, version: int, start: float = 10.0) -> Read:
    return Read("edge0", "d.test", start, start + 0.1, 200, version, True, "", page)


def test_a_read_of_a_covered_page_older_than_a_purge_is_a_violation() -> None:
    history = History(
        reads=[read("page0", 1), read("page1", 1), read("page0", 1, start=0.5)],
        clears=[Clear("d.test", 2, 0.0, 1.0, 200, "", "url soft", ("page0",))],
    )
    [violation] = history.violations()
    assert (violation.read.page, violation.read.start) == ("page0", 10.0)
    assert "after the url soft to v2" in history.report()


def test_a_clear_covers_every_page_and_a_503_constrains_nothing() -> None:
    history = History(
        reads=[read("page0", 2), read("page1", 2)],
        clears=[
            Clear("d.test", 2, 0.0, 1.0, 200),
            Clear("d.test", 3, 2.0, 3.0, 503, "", "prefix", ("page0", "page1")),
        ],
    )
    assert history.violations() == []
    history.clears.append(Clear("d.test", 4, 4.0, 5.0, 200, "", "tag", ("page1",)))
    assert [v.read.page for v in history.violations()] == ["page1"]
