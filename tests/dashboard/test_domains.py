"""The Domains page and its "Clear cache" button, which takes the API's own audited path;
the History page; and the landing page's chart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.api import clear_cache, gate, purge
from proxy.api.app import create_api_app
from proxy.api.clear_cache import OUTCOMES
from proxy.core.auth.tokens import Scope
from proxy.observe.telemetry import Telemetry
from proxy.state.admins import hash_password
from proxy.state.async_state import AsyncState
from proxy.state.sqlite import AuditRecord
from proxy.store.base import ClearResult, LocalPurger
from proxy.store.memory import MemoryStore
from tests.api.support import AiohttpClient, FakeClock
from tests.dashboard.purge_support import preview, preview_and_confirm, purge_fields
from tests.dashboard.support import (
    ADMIN,
    CHEAP,
    PASSWORD,
    START,
    Dashboard,
    DashboardFactory,
    Element,
    Page,
    dashboard_config,
)

TOTALS = ("hits", "misses", "clears")


def links(page: Page) -> dict[str, tuple[str, str]]:
    """The page's rel=prev/next links: rel -> (href, text)."""
    return {a.attrs["rel"]: (a.attrs["href"], a.text) for a in page.html.find_all("a", rel=None)}


def row_of(page: Page, domain: str) -> Element:
    return page.html.find("tr", data_domain=domain)


def cell(row: Element, testid: str) -> str:
    return row.find("td", data_testid=testid).text


async def test_a_row_per_domain_with_origin_entries_bytes_and_hit_ratio(
    signed_in: Dashboard,
) -> None:
    await signed_in.put_entry("example.com", "/a", b"x" * 2000)
    await signed_in.put_entry("example.com", "/b")
    for outcome in ["hit", "hit", "hit", "miss"]:
        signed_in.telemetry.request("example.com", outcome)
    page = await signed_in.get("/dashboard/domains")
    assert page.status == 200
    rows = page.html.find_all("tr", data_domain=None)
    assert [row.attrs["data-domain"] for row in rows] == [
        "example.com",
        "other.test",
        "xn--bcher-kva.example",
    ]
    row = row_of(page, "example.com")
    stats = await signed_in.store.domain_stats("example.com")
    assert "http://127.0.0.1:9" in [td.text for td in row.find_all("td")]
    assert cell(row, "entries") == "2"
    assert row.find(data_testid="bytes").find(title=None).attrs["title"] == f"{stats.bytes} bytes"
    assert cell(row, "bytes") == f"{stats.bytes / 1024:.1f} KiB"
    assert cell(row, "hit-ratio") == "75.0 %"
    assert row.find("button", type="submit").text == "Clear cache"
    assert row.find_all(data_confirm=None)
    other = row_of(page, "other.test")
    assert (cell(other, "entries"), cell(other, "bytes")) == ("0", "0 B")
    assert cell(other, "hit-ratio") == "no requests yet"


async def test_clear_cache_empties_the_domain_and_is_audited_as_the_admin(
    signed_in: Dashboard,
) -> None:
    await signed_in.put_entry("example.com")
    await signed_in.put_entry("other.test")
    page = await signed_in.act("/dashboard/domains/clear", {"domain": "example.com"})
    assert page.status == 303
    assert page.location == "/dashboard/domains?cleared=example.com"
    assert (await signed_in.store.domain_stats("example.com")).entries == 0
    assert (await signed_in.store.domain_stats("other.test")).entries == 1

    [record] = await signed_in.audit()
    assert (record.actor, record.client, record.domain) == (
        f"admin:{ADMIN}",
        "127.0.0.1",
        "example.com",
    )
    assert (record.outcome, record.status, record.entries_dropped) == ("cleared", 200, 1)
    assert record.at == START
    assert signed_in.telemetry.domain_counts("example.com").clears == 1  # as /metrics counts
    shown = await signed_in.get(page.location)
    assert "Cache cleared for example.com." in shown.words
    assert cell(row_of(shown, "example.com"), "entries") == "0"


async def test_the_dashboard_and_the_api_write_the_same_record(signed_in: Dashboard) -> None:
    token = await signed_in.state.create_token("deploy", Scope.everything(), START)
    await signed_in.put_entry("example.com")
    assert await signed_in.clear_via_api(token) == 200
    await signed_in.put_entry("example.com")
    await signed_in.act("/dashboard/domains/clear", {"domain": "example.com"})
    dashboard, api = await signed_in.audit()

    def fields(record: AuditRecord) -> tuple[object, ...]:
        return (record.client, record.domain, record.outcome, record.status, record.entries_dropped)

    assert fields(dashboard) == fields(api)
    assert (dashboard.actor, api.actor) == (f"admin:{ADMIN}", "deploy")


@pytest.mark.parametrize(
    ("domain", "status", "outcome", "audited_domain"),
    [
        ("elsewhere.test", 404, "not_found", "elsewhere.test"),
        ("", 400, "bad_request", ""),
        ("not a host!", 400, "bad_request", "not a host!"),
    ],
)
async def test_a_refused_clear_is_a_clear_error_and_audited_too(
    signed_in: Dashboard, domain: str, status: int, outcome: str, audited_domain: str
) -> None:
    await signed_in.put_entry("example.com")
    page = await signed_in.act("/dashboard/domains/clear", {"domain": domain})
    assert page.status == status
    assert "The cache was not cleared" in page.words
    [record] = await signed_in.audit()
    assert (record.actor, record.domain, record.outcome, record.status) == (
        f"admin:{ADMIN}",
        audited_domain,
        outcome,
        status,
    )
    assert (await signed_in.store.domain_stats("example.com")).entries == 1


class BrokenPurger:
    name = None  # one process, no fleet

    async def clear_domain(self, domain: str) -> ClearResult:
        raise ConnectionError("the fleet is unreachable")


async def test_a_failed_purge_is_a_503_like_the_api(make_dashboard: DashboardFactory) -> None:
    dashboard = await make_dashboard(purger=BrokenPurger())
    await dashboard.sign_in()
    page = await dashboard.act("/dashboard/domains/clear", {"domain": "example.com"})
    assert page.status == 503
    assert "could not be cleared; try again" in page.words
    [record] = await dashboard.audit()
    assert (record.outcome, record.status) == ("error", 503)


async def test_the_cleared_notice_only_ever_names_a_configured_domain(
    signed_in: Dashboard,
) -> None:
    page = await signed_in.get("/dashboard/domains", params={"cleared": "evil.test"})
    assert "Cache cleared" not in page.words


# -- history -----------------------------------------------------------------------------------


async def add_records(dashboard: Dashboard, count: int) -> None:
    for i in range(count):
        await dashboard.state.record_audit(
            AuditRecord(
                at=START + i,
                actor="deploy" if i % 2 else "admin:alice",
                client="127.0.0.1",
                domain="example.com" if i % 3 else "other.test",
                outcome="cleared" if i % 4 else "unauthorized",
                status=200 if i % 4 else 401,
                entries_dropped=i,
                duration_ms=1.5,
            )
        )


def history_rows(page: Page) -> list[dict[str, str]]:
    """The History table's records as {column heading: cell text}; no row if it has none."""
    table = page.html.find("table", class_="history")
    headings = [th.text for th in table.find("thead").find_all("th")]
    rows = [[td.text for td in tr.find_all("td")] for tr in table.find("tbody").find_all("tr")]
    return [dict(zip(headings, row, strict=True)) for row in rows if len(row) == len(headings)]


async def test_history_is_newest_first_and_paginated(signed_in: Dashboard) -> None:
    await add_records(signed_in, 120)
    first = await signed_in.get("/dashboard/history")
    rows = history_rows(first)
    assert len(rows) == 50
    assert (rows[0]["Entries dropped"], rows[-1]["Entries dropped"]) == ("119", "70")
    assert links(first) == {"next": ("/dashboard/history?page=2", "Older")}
    last = await signed_in.get("/dashboard/history?page=3")
    rows = history_rows(last)
    assert len(rows) == 20
    assert rows[-1]["Entries dropped"] == "0"
    assert links(last) == {"prev": ("/dashboard/history?page=2", "Newer")}
    beyond = await signed_in.get("/dashboard/history?page=4")
    assert history_rows(beyond) == []
    assert "Nothing has been cleared yet." in beyond.words


async def test_history_filters_by_domain_and_outcome(signed_in: Dashboard) -> None:
    await add_records(signed_in, 120)
    page = await signed_in.get(
        "/dashboard/history", params={"domain": "Other.Test.", "outcome": "unauthorized"}
    )
    rows = history_rows(page)
    expected = [i for i in range(119, -1, -1) if i % 3 == 0 and i % 4 == 0]
    assert len(rows) == len(expected)
    for row, i in zip(rows, expected, strict=True):
        assert (row["Domain"], row["Outcome"]) == ("other.test", "unauthorized")
        assert row["Entries dropped"] == str(i)
    filters = page.html.find("form", class_="filters")
    assert filters.find("input", name="domain").attrs["value"] == "other.test"  # normalised
    [selected] = filters.find("select", name="outcome").find_all("option", selected=None)
    assert selected.attrs["value"] == "unauthorized"
    none = await signed_in.get("/dashboard/history", params={"domain": "nowhere.test"})
    assert history_rows(none) == []
    assert "Nothing matches these filters." in none.words


async def test_history_links_keep_the_filters(signed_in: Dashboard) -> None:
    await add_records(signed_in, 400)
    page = await signed_in.get("/dashboard/history", params={"outcome": "cleared", "page": "2"})
    assert links(page) == {
        "next": ("/dashboard/history?outcome=cleared&page=3", "Older"),
        "prev": ("/dashboard/history?outcome=cleared&page=1", "Newer"),
    }


def test_every_outcome_the_api_writes_can_be_filtered() -> None:
    # The clear and purge endpoints share their gate (proxy/api/gate.py).
    modules = (clear_cache, gate, purge)
    source = "".join(Path(str(m.__file__)).read_text(encoding="utf-8") for m in modules)
    written = set(re.findall(r'\breject\(\s*"([a-z_]+)"', source))
    assert written | {"cleared", "purged", "dry_run"} == set(OUTCOMES)


# -- the landing page's chart ------------------------------------------------------------------


async def test_the_landing_page_charts_the_last_hour(signed_in: Dashboard) -> None:
    clock = signed_in.clock
    clock.now = START - START % 60  # the start of a minute
    for outcome in ["hit", "hit", "miss"]:
        signed_in.telemetry.request("example.com", outcome)
    clock.now += 600
    signed_in.telemetry.request("other.test", "hit")
    await signed_in.act("/dashboard/domains/clear", {"domain": "example.com"})
    clock.now += 120
    page = await signed_in.get("/dashboard")
    assert page.status == 200
    totals = {name: page.html.find(data_testid=f"total-{name}").text for name in TOTALS}
    assert totals == {"hits": "3", "misses": "1", "clears": "1"}
    assert "75.0 %" in page.words
    assert len(page.html.find_all(data_testid="clear-mark")) == 1
    chart = page.html.find("svg", role="img")
    assert "Over the last 60 minutes: 3 hits, 1 misses and 1 clears and purges." in chart.text
    points = chart.find("polyline", class_="line hits").attrs["points"].split()
    assert len(points) == 60

    clock.now += 1800
    assert (await signed_in.get("/dashboard")).status == 200  # (keeps the session alive)
    clock.now += 1800  # an hour later, it has all scrolled off
    later = await signed_in.get("/dashboard")
    assert later.html.find(data_testid="total-hits").text == "0"


async def test_the_chart_counts_purges_and_they_survive_a_restart(
    signed_in: Dashboard, aiohttp_client: AiohttpClient
) -> None:
    """Issue 22 item 8: the Overview counted clears but not purges, and its last hour began
    again from zero at each restart. Clears and purges now come from the audit log (which a
    restart keeps); a dry run and a refused attempt changed nothing and are not counted."""
    signed_in.clock.now = START - START % 60
    await signed_in.act("/dashboard/domains/clear", {"domain": "example.com"})
    signed_in.clock.now += 300
    _, done = await preview_and_confirm(signed_in, purge_fields("example.com", "url", "/a"))
    assert done.status == 200, done.words
    await preview(signed_in, purge_fields("other.test", "prefix", "/b"))  # a dry run only
    await signed_in.act("/dashboard/domains/clear", {"domain": "unknown.test"})  # refused
    signed_in.clock.now += 60
    page = await signed_in.get("/dashboard")
    assert page.html.find(data_testid="total-clears").text == "2"
    assert len(page.html.find_all(data_testid="clear-mark")) == 2

    await signed_in.state.close()  # the process ends (the state db admits one at a time)
    # A new one: new counters and store, the same state db.
    clock = FakeClock(signed_in.clock.now)
    async with await AsyncState.open(signed_in.config.api_role()[1].path) as state:
        store = MemoryStore(max_bytes=1024**2)
        telemetry = Telemetry(store=store, domains=["example.com"], clock=clock)
        app = create_api_app(
            config=signed_in.config,
            state=state,
            purger=LocalPurger(store),
            clock=clock,
            telemetry=telemetry,
            store=store,
            password_hasher=CHEAP,
        )
        restarted = Dashboard(
            await aiohttp_client(app), signed_in.config, state, store, telemetry, clock
        )
        assert (await restarted.sign_in()).status == 303
        page = await restarted.get("/dashboard")
        totals = {name: page.html.find(data_testid=f"total-{name}").text for name in TOTALS}
        assert totals == {"hits": "0", "misses": "0", "clears": "2"}
        clock.now += 3500  # (within the session's idle timeout) an hour after the clear:
        later = await restarted.get("/dashboard")  # it has scrolled off, the purge not yet
        assert later.html.find(data_testid="total-clears").text == "1"


@pytest.mark.slow
async def test_without_a_store_the_page_says_it_does_not_know(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> None:
    config = dashboard_config(tmp_path)
    async with await AsyncState.open(config.api_role()[1].path) as state:
        await state.admins.create(ADMIN, hash_password(CHEAP, PASSWORD), START)
        app = create_api_app(
            config=config,
            state=state,
            purger=LocalPurger(MemoryStore(max_bytes=1024)),
            password_hasher=CHEAP,
        )
        client = await aiohttp_client(app)
        dashboard = Dashboard(
            client, config, state, MemoryStore(max_bytes=1), Telemetry(), FakeClock()
        )
        assert (await dashboard.sign_in()).status == 303
        page = await dashboard.get("/dashboard/domains")
        row = row_of(page, "example.com")
        assert (cell(row, "entries"), cell(row, "bytes")) == ("—", "—")
