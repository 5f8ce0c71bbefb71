"""The Domains page and its "Clear cache" button, which takes the API's own audited path;
the History page; and the landing page's chart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from proxy.api import clear_cache
from proxy.api.app import create_api_app
from proxy.api.clear_cache import OUTCOMES
from proxy.core.tokens import Scope
from proxy.state.admins import hash_password
from proxy.state.sqlite import AsyncState, AuditRecord
from proxy.store.base import ClearResult, LocalPurger
from proxy.store.memory import MemoryStore
from proxy.telemetry import Telemetry
from tests.api.support import AiohttpClient, FakeClock
from tests.dashboard.support import (
    ADMIN,
    CHEAP,
    PASSWORD,
    START,
    Dashboard,
    DashboardFactory,
    dashboard_config,
)


def row_of(text: str, domain: str) -> str:
    return text.split(f'<tr data-domain="{domain}">', 1)[1].split("</tr>", 1)[0]


def cell(row: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}">(.*?)</td>', row, re.S)
    assert match
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


async def test_a_row_per_domain_with_origin_entries_bytes_and_hit_ratio(
    signed_in: Dashboard,
) -> None:
    await signed_in.put_entry("example.com", "/a", b"x" * 2000)
    await signed_in.put_entry("example.com", "/b")
    for outcome in ["hit", "hit", "hit", "miss"]:
        signed_in.telemetry.request("example.com", outcome)
    page = await signed_in.get("/dashboard/domains")
    assert page.status == 200
    assert page.text.count("<tr data-domain=") == 3
    row = row_of(page.text, "example.com")
    stats = await signed_in.store.domain_stats("example.com")
    assert "<td>http://127.0.0.1:9</td>" in row
    assert cell(row, "entries") == "2"
    assert f'title="{stats.bytes} bytes"' in row
    assert cell(row, "bytes") == f"{stats.bytes / 1024:.1f} KiB"
    assert cell(row, "hit-ratio") == "75.0 %"
    assert '<button type="submit" class="danger">Clear cache</button>' in row
    assert "data-confirm=" in row
    other = row_of(page.text, "other.test")
    assert (cell(other, "entries"), cell(other, "bytes")) == ("0", "0 B")
    assert cell(other, "hit-ratio") == "no requests yet"
    assert '<tr data-domain="xn--bcher-kva.example">' in page.text


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
    assert "Cache cleared for example.com." in shown.text
    assert cell(row_of(shown.text, "example.com"), "entries") == "0"


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
    assert "The cache was not cleared" in page.text
    [record] = await signed_in.audit()
    assert (record.actor, record.domain, record.outcome, record.status) == (
        f"admin:{ADMIN}",
        audited_domain,
        outcome,
        status,
    )
    assert (await signed_in.store.domain_stats("example.com")).entries == 1


class BrokenPurger:
    async def clear_domain(self, domain: str) -> ClearResult:
        raise ConnectionError("the fleet is unreachable")


async def test_a_failed_purge_is_a_503_like_the_api(make_dashboard: DashboardFactory) -> None:
    dashboard = await make_dashboard(purger=BrokenPurger())
    await dashboard.sign_in()
    page = await dashboard.act("/dashboard/domains/clear", {"domain": "example.com"})
    assert page.status == 503
    assert "could not be cleared; try again" in page.text
    [record] = await dashboard.audit()
    assert (record.outcome, record.status) == ("error", 503)


async def test_the_cleared_notice_only_ever_names_a_configured_domain(
    signed_in: Dashboard,
) -> None:
    page = await signed_in.get("/dashboard/domains", params={"cleared": "evil.test"})
    assert "Cache cleared" not in page.text


# -- history -----------------------------------------------------------------------------------


async def add_records(dashboard: Dashboard, count: int) -> None:
    for i in range(count):
        dashboard.state.record_audit(
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


def history_rows(text: str) -> list[str]:
    body = text.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [row for row in body.split("<tr>")[1:] if "<td>" in row]


async def test_history_is_newest_first_and_paginated(signed_in: Dashboard) -> None:
    await add_records(signed_in, 120)
    first = await signed_in.get("/dashboard/history")
    rows = history_rows(first.text)
    assert len(rows) == 50
    assert '<td class="number">119</td>' in rows[0]
    assert '<td class="number">70</td>' in rows[-1]
    assert 'href="/dashboard/history?page=2" rel="next">Older</a>' in first.text
    assert "Newer" not in first.text
    last = await signed_in.get("/dashboard/history?page=3")
    rows = history_rows(last.text)
    assert len(rows) == 20
    assert '<td class="number">0</td>' in rows[-1]
    assert 'href="/dashboard/history?page=2" rel="prev">Newer</a>' in last.text
    assert "Older" not in last.text
    beyond = await signed_in.get("/dashboard/history?page=4")
    assert "Nothing has been cleared yet." in beyond.text


async def test_history_filters_by_domain_and_outcome(signed_in: Dashboard) -> None:
    await add_records(signed_in, 120)
    page = await signed_in.get(
        "/dashboard/history", params={"domain": "Other.Test.", "outcome": "unauthorized"}
    )
    rows = history_rows(page.text)
    expected = [i for i in range(119, -1, -1) if i % 3 == 0 and i % 4 == 0]
    assert len(rows) == len(expected)
    for row, i in zip(rows, expected, strict=True):
        assert "<td>other.test</td>" in row
        assert "unauthorized" in row
        assert f'<td class="number">{i}</td>' in row
    assert 'value="other.test"' in page.text  # the filter shows, normalised
    assert '<option value="unauthorized" selected>' in page.text
    none = await signed_in.get("/dashboard/history", params={"domain": "nowhere.test"})
    assert "Nothing matches these filters." in none.text


async def test_history_links_keep_the_filters(signed_in: Dashboard) -> None:
    await add_records(signed_in, 400)
    page = await signed_in.get("/dashboard/history", params={"outcome": "cleared", "page": "2"})
    assert 'href="/dashboard/history?outcome=cleared&amp;page=3" rel="next"' in page.text
    assert 'href="/dashboard/history?outcome=cleared&amp;page=1" rel="prev"' in page.text


def test_every_outcome_the_api_writes_can_be_filtered() -> None:
    source = Path(clear_cache.__file__).read_text(encoding="utf-8")
    written = set(re.findall(r'_reject\(\s*"([a-z_]+)"', source)) | {"cleared"}
    assert written == set(OUTCOMES)


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
    assert '<dd data-testid="total-hits">3</dd>' in page.text
    assert '<dd data-testid="total-misses">1</dd>' in page.text
    assert '<dd data-testid="total-clears">1</dd>' in page.text
    assert "75.0 %" in page.text
    assert page.text.count('data-testid="clear-mark"') == 1
    assert 'role="img"' in page.text
    assert "Over the last 60 minutes: 3 hits, 1 misses and 1 clears." in page.text
    points = re.findall(r'class="line hits" points="([^"]*)"', page.text)[0].split()
    assert len(points) == 60

    clock.now += 1800
    assert (await signed_in.get("/dashboard")).status == 200  # (keeps the session alive)
    clock.now += 1800  # an hour later, it has all scrolled off
    later = await signed_in.get("/dashboard")
    assert '<dd data-testid="total-hits">0</dd>' in later.text


async def test_without_a_store_the_page_says_it_does_not_know(
    tmp_path: Path, aiohttp_client: AiohttpClient
) -> None:
    config = dashboard_config(tmp_path)
    async with await AsyncState.open(config.state.path) as state:
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
        row = row_of(page.text, "example.com")
        assert (cell(row, "entries"), cell(row, "bytes")) == ("—", "—")
