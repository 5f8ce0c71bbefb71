"""The Domains page's purge form: a dry run's preview, then Confirm, which runs exactly the
purge previewed and shows its receipt; bad input, CSRF and escaping; and History's kinds and
receipts. The last tests drive a real ``cdn-proxy serve`` with a versioned origin."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestServer

from proxy.core.purge.purges import tagged
from proxy.state.sqlite import AuditRecord
from tests.api.purge_support import FAILURES, FailingPurger, assert_purged, warm
from tests.api.support import stored_response
from tests.dashboard.purge_support import (
    CONFIRM,
    PREVIEW,
    alert,
    confirm_fields,
    dashboard_node,
    preview,
    preview_and_confirm,
    purge_fields,
    receipt_figure,
)
from tests.dashboard.support import ADMIN, START, Dashboard, DashboardFactory, Page
from tests.edge.test_purges_end_to_end import URLS

DOMAIN = "example.com"
STORED = ["/a", "/b?x=1", "/assets/c.css", "/assets/d.js"]


@pytest.fixture
async def filled(signed_in: Dashboard) -> Dashboard:
    """example.com holds STORED, /assets/* tagged "assets"; other.test holds /a."""
    for target in STORED:
        key = (await signed_in.store.lookup(DOMAIN, target)).key
        tags = ("assets",) if target.startswith("/assets/") else ()
        assert await signed_in.store.put(key, tagged(stored_response(b"x" * 100), tags))
    await signed_in.put_entry("other.test", "/a")
    return signed_in


async def stored(dashboard: Dashboard, domain: str = DOMAIN) -> set[str]:
    return {t for t in [*STORED, "/a"] if (await dashboard.store.lookup(domain, t)).variants}


def hidden(page: Page) -> list[tuple[str, str]]:
    return [(k, v) for k, v in confirm_fields(page).items() if k != "csrf"]


async def test_every_domain_row_has_a_purge_form_and_keeps_its_clear_button(
    signed_in: Dashboard,
) -> None:
    page = await signed_in.get("/dashboard/domains")
    for name in ("example.com", "other.test", "xn--bcher-kva.example"):
        row = page.html.find("tr", data_domain=name)
        assert row.find("button", type="submit").text == "Clear cache"
        form = page.html.find("tr", data_purge_for=name).find("form", action=PREVIEW)
        assert [o.attrs["value"] for o in form.find_all("option")] == [
            "url",
            "prefix",
            "tag",
            "all",
        ]
        assert [o.text for o in form.find_all("option")] == [
            "URLs",
            "Prefixes",
            "Tags",
            "Everything",
        ]
        assert form.find("textarea", name="items").text == ""
        assert form.find("input", name="soft").attrs["type"] == "checkbox"
        assert form.find("input", name="domain").attrs["value"] == name
        assert form.find("input", name="csrf").attrs["value"] == page.csrf
        assert "data-confirm" not in form.attrs  # the preview is the confirmation


async def test_a_preview_counts_exactly_names_its_sample_and_changes_nothing(
    filled: Dashboard,
) -> None:
    # A browser sends CRLF; blank lines, padding and repeats are dropped.
    shown = await preview(filled, purge_fields(DOMAIN, "url", "/a\r\n\r\n  /b?x=1 \r\n/a\r\n/none"))
    assert shown.status == 200, shown.words
    assert shown.html.find("h1").text == "Purge preview"
    assert receipt_figure(shown, "kind") == "URLs"
    assert receipt_figure(shown, "amount") == "2 entries, 1.2 KiB"
    assert "not counted" not in shown.words
    assert [li.text for li in shown.html.find("ul", data_testid="sample").find_all("li")] == [
        "/a",
        "/b?x=1",
    ]
    assert "A purge drops them" in shown.words
    assert hidden(shown) == [
        ("domain", DOMAIN),
        ("kind", "url"),
        ("item", "/a"),
        ("item", "/b?x=1"),
        ("item", "/none"),
    ]
    cancel = shown.html.find("form", action=CONFIRM).find("a")
    assert (cancel.attrs["href"], cancel.text) == ("/dashboard/domains", "Cancel")
    assert await stored(filled) == set(STORED)  # the dry run dropped nothing
    [record] = await filled.audit()
    assert (record.actor, record.outcome, record.kind, record.entries_dropped) == (
        f"admin:{ADMIN}",
        "dry_run",
        "url",
        0,
    )


@pytest.mark.parametrize(
    ("kind", "items", "covered", "exact"),
    [
        ("url", "/a\n/b?x=1", {"/a", "/b?x=1"}, True),
        ("prefix", "/assets/", {"/assets/c.css", "/assets/d.js"}, False),
        ("tag", "assets", {"/assets/c.css", "/assets/d.js"}, False),
        ("all", "", set(STORED), True),
    ],
)
async def test_confirm_purges_what_was_previewed_and_shows_the_receipt(
    filled: Dashboard, kind: str, items: str, covered: set[str], exact: bool
) -> None:
    before = await filled.store.domain_stats(DOMAIN)
    shown, done = await preview_and_confirm(filled, purge_fields(DOMAIN, kind, items))
    assert receipt_figure(shown, "amount").startswith(f"{len(covered)} entries, ")
    amount = shown.html.find("dd", data_testid="amount").attrs["title"]
    if kind == "all":
        assert amount == f"{before.bytes} bytes"
    assert {li.text for li in shown.html.find("ul", data_testid="sample").find_all("li")} == covered
    assert done.status == 200, done.words
    assert done.html.find("h1").text == "Purge receipt"
    assert receipt_figure(done, "domain") == DOMAIN
    assert receipt_figure(done, "number") == "1"
    assert re.fullmatch(r"\d+\.\d ms", receipt_figure(done, "seconds"))  # not "0.000 s"
    if exact:
        assert receipt_figure(done, "amount").startswith(f"{len(covered)} entries, ")
    else:  # lazy: the domain's entries, said as such (not "at most": issue 22 item 8)
        amount = receipt_figure(done, "amount")
        assert amount.startswith(f"not counted, among the domain's {len(STORED)} entries, ")
    assert "purged" in done.html.find(role="status").text
    assert done.html.find_all("form", action=CONFIRM) == []
    assert await stored(filled) == set(STORED) - covered
    assert await stored(filled, "other.test") == {"/a"}
    dry, real = reversed(await filled.audit())
    assert (dry.outcome, real.outcome, dry.kind, real.kind) == ("dry_run", "purged", kind, kind)
    assert real.receipt is not None and json.loads(real.receipt)["kind"] == kind


async def test_a_soft_preview_says_it_marks_stale_and_confirm_keeps_soft(
    filled: Dashboard,
) -> None:
    shown, done = await preview_and_confirm(filled, purge_fields(DOMAIN, "url", "/a", soft=True))
    assert "A soft purge marks them stale" in shown.words
    assert ("soft", "1") in hidden(shown)
    assert receipt_figure(shown, "kind") == "URLs (soft)"
    assert receipt_figure(done, "kind") == "URLs (soft)"
    assert "soft-purged" in done.html.find(role="status").text
    [record] = [r for r in await filled.audit() if r.outcome == "purged"]
    assert record.receipt is not None and json.loads(record.receipt)["soft"] is True


@pytest.mark.parametrize("path", [PREVIEW, CONFIRM])
@pytest.mark.parametrize("csrf", [None, "wrong"])
async def test_a_form_without_the_sessions_csrf_token_is_refused(
    filled: Dashboard, path: str, csrf: str | None
) -> None:
    fields = purge_fields(DOMAIN, "all", csrf=csrf)
    fields.add("item", "/a")
    page = await filled.post(path, fields)
    assert page.status == 403
    assert "CSRF token is missing or wrong" in page.words
    assert await stored(filled) == set(STORED)
    assert await filled.audit() == []


@pytest.mark.parametrize(
    ("kind", "items", "message"),
    [
        ("url", "", "A URL purge needs at least one item."),
        ("url", "\r\n  \r\n", "A URL purge needs at least one item."),
        ("url", "\n".join(f"/{n}" for n in range(257)), "At most 256 items per purge, not 257."),
        ("url", "/a\nno-slash", "URL 'no-slash' must be a path"),
        ("prefix", "assets/", "Prefix 'assets/' must be a path"),
        ("tag", "a,b", "Tag 'a,b' must be 1-256 visible ASCII characters without ','"),
        ("tag", "a b", "Tag 'a b' must be"),
        ("all", "/a", "A purge of everything takes no items: empty the list."),
        ("everything", "", "Choose what to purge: URLs, Prefixes, Tags, Everything."),
        ("url", "/caf\u00e9", "URL '/café' must be a path"),
    ],
)
async def test_bad_input_shows_the_form_again_with_the_error_and_changes_nothing(
    filled: Dashboard, kind: str, items: str, message: str
) -> None:
    page = await preview(filled, purge_fields("other.test", kind, items, soft=True))
    assert page.status == 400
    assert message in alert(page)
    form = page.html.find("tr", data_purge_for="other.test")
    assert "open" in form.find("details").attrs
    assert form.find(role="alert") is not None
    assert form.find("textarea").text.split() == items.split()
    assert "checked" in form.find("input", name="soft").attrs
    closed = page.html.find("tr", data_purge_for=DOMAIN).find("details")
    assert "open" not in closed.attrs
    assert await stored(filled) == set(STORED)
    assert await stored(filled, "other.test") == {"/a"}
    assert await filled.audit() == []  # it never reached the purge path


async def test_a_confirm_with_changed_fields_is_checked_again(filled: Dashboard) -> None:
    shown = await preview(filled, purge_fields(DOMAIN, "url", "/a"))
    fields = confirm_fields(shown)
    fields.add("item", "not a path")
    page = await filled.post(CONFIRM, fields)
    assert page.status == 400
    assert "URL 'not a path' must be a path" in alert(page)
    assert await stored(filled) == set(STORED)


async def test_a_domain_not_configured_is_a_404_on_the_page(filled: Dashboard) -> None:
    page = await preview(filled, purge_fields("nowhere.example", "url", "/a"))
    assert page.status == 404
    assert "'nowhere.example' is not a domain of this CDN" in alert(page)
    [record] = await filled.audit()
    assert (record.outcome, record.kind) == ("not_found", "url")


async def test_a_purger_that_fails_is_a_503_on_the_page(make_dashboard: DashboardFactory) -> None:
    dashboard = await make_dashboard(purger=FailingPurger(FAILURES["unavailable"]))
    assert (await dashboard.sign_in()).status == 303
    page = await preview(dashboard, purge_fields(DOMAIN, "tag", "t"))
    assert page.status == 503
    assert alert(page).startswith("The dry run was not done: ")
    assert "Retrying is safe" in alert(page)
    [record] = await dashboard.audit()
    assert (record.outcome, record.status, record.kind) == ("error", 503, "tag")


async def test_a_long_list_fits_the_form_and_a_huge_form_is_413(filled: Dashboard) -> None:
    items = "\n".join(f"/{n:03d}/" + "p" * 200 for n in range(256))  # 52 KiB: over 16 KiB
    _, done = await preview_and_confirm(filled, purge_fields(DOMAIN, "url", items))
    assert done.status == 200, done.words
    assert len(done.html.find("ul", data_testid="items").find_all("li")) == 256
    form = urlencode({"csrf": await filled.csrf(), "domain": DOMAIN, "kind": "url"})
    huge = await filled.post(
        PREVIEW,
        io.BytesIO((form + "&items=/" + "x" * (1024 * 1024)).encode()),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert huge.status == 413
    assert "The form is too large." in alert(huge)


MARKUP = '/"><script>alert(1)</script><img src=x onerror=alert(2)>'


async def test_items_are_escaped_on_every_page(filled: Dashboard) -> None:
    shown, done = await preview_and_confirm(
        filled, purge_fields(DOMAIN, "url", MARKUP.replace(" ", ""))
    )
    refused = await preview(filled, purge_fields(DOMAIN, "tag", "<b>bold</b> x"))
    history = await filled.get("/dashboard/history")
    for page in (shown, done, refused, history):
        assert "<script>alert" not in page.text and "<b>bold" not in page.text
        assert [s.attrs.get("src") for s in page.html.find_all("script")] == [
            "/dashboard/static/dashboard.js"
        ]
        assert page.html.find_all("img") == [] and page.html.find_all("b") == []
    assert ("item", MARKUP.replace(" ", "")) in hidden(shown)  # carried as typed
    assert MARKUP.replace(" ", "") == done.html.find("ul", data_testid="items").text
    assert "<b>bold</b> x" in alert(refused)


# -- History -----------------------------------------------------------------------------------


def history_rows(page: Page) -> list[dict[str, str]]:
    rows = []
    for tr in page.html.find("table").find("tbody").find_all("tr"):
        cells = {td.attrs["data-testid"]: td for td in tr.find_all("td", data_testid=None)}
        rows.append({key: td.text for key, td in cells.items()})
    return rows


async def test_history_shows_kinds_receipts_and_old_rows(filled: Dashboard) -> None:
    await filled.state.record_audit(  # a row of schema 4: no kind, no receipt
        AuditRecord(START - 60, "ci", "127.0.0.1", DOMAIN, "cleared", 200, 3, 1.0)
    )
    assert (await filled.act("/dashboard/domains/clear", {"domain": "other.test"})).status == 303
    many = "\n".join(f"/{n}" for n in range(30))
    await preview(filled, purge_fields(DOMAIN, "prefix", "/assets/"))
    await preview_and_confirm(filled, purge_fields(DOMAIN, "url", many, soft=True))
    await preview(filled, purge_fields("nowhere.example", "tag", "t"))
    page = await filled.get("/dashboard/history")
    assert page.status == 200
    refused, purged, dry_url, dry_prefix, cleared, old = history_rows(page)
    assert (refused["kind"], refused["receipt"]) == ("tag", "—")
    assert purged["kind"] == "url (soft)"
    assert purged["receipt"].startswith("/0 /1 /2 and 27 more : 0 entries, 0 B, purge 1 Receipt")
    details = page.html.find("table").find("tbody").find_all("details")[0]
    assert [li.text for li in details.find_all("li")] == [f"/{n}" for n in range(20)]
    assert "The log keeps the first 20 of 30 items." in details.text
    assert "soft-purged 30 URLs of example.com" in details.text
    assert dry_url["kind"] == "url (soft) dry run"
    assert dry_prefix["kind"] == "prefix dry run"
    assert dry_prefix["receipt"].startswith("/assets/ : 2 entries, 1.2 KiB Receipt would purge")
    assert (cleared["kind"], cleared["receipt"]) == ("clear", "—")
    assert (old["kind"], old["receipt"]) == ("clear", "—")
    assert [row["dropped"] for row in (purged, dry_url, dry_prefix, cleared, old)] == [
        "0", "0", "0", "1", "3"
    ]  # fmt: skip


async def test_history_says_at_most_for_a_purge_that_did_not_count(filled: Dashboard) -> None:
    """A prefix purge drops what it covers without counting it: its record holds the
    domain's entries, an upper bound, and History must not show it as a count."""
    await preview_and_confirm(filled, purge_fields(DOMAIN, "prefix", "/assets/"))
    page = await filled.get("/dashboard/history?kind=prefix")
    purged, dry_run = history_rows(page)
    assert (purged["outcome"], purged["dropped"]) == ("purged", f"≤ {len(STORED)}")
    assert (dry_run["outcome"], dry_run["dropped"]) == ("dry_run", "0")


@pytest.mark.parametrize(
    ("kind", "outcomes"),
    [("url", ["purged", "dry_run"]), ("prefix", ["dry_run"]), ("clear", ["cleared"]), ("all", [])],
)
async def test_history_filters_by_kind(filled: Dashboard, kind: str, outcomes: list[str]) -> None:
    assert (await filled.act("/dashboard/domains/clear", {"domain": DOMAIN})).status == 303
    await preview(filled, purge_fields(DOMAIN, "prefix", "/assets/"))
    await preview_and_confirm(filled, purge_fields(DOMAIN, "url", "/a"))
    page = await filled.get(f"/dashboard/history?kind={kind}&domain={DOMAIN}")
    assert page.status == 200
    assert [row["outcome"] for row in history_rows(page) if "outcome" in row] == outcomes
    selected = page.html.find("select", name="kind").find("option", selected="")
    assert selected.attrs["value"] == kind


async def test_history_refuses_an_unknown_kind_and_survives_a_damaged_receipt(
    filled: Dashboard,
) -> None:
    assert (await filled.get("/dashboard/history?kind=everything")).status == 400
    await filled.state.record_audit(
        AuditRecord(START, "x", None, DOMAIN, "purged", 200, 1, 1.0, kind="url", receipt="{nope")
    )
    await filled.state.record_audit(
        AuditRecord(
            START,
            "x",
            None,
            DOMAIN,
            "purged",
            200,
            1,
            1.0,
            kind="tag",
            receipt='{"items": "not a list", "entries": "many", "seconds": true}',
        )
    )
    page = await filled.get("/dashboard/history")
    assert page.status == 200
    odd, damaged = history_rows(page)
    assert (damaged["kind"], damaged["receipt"]) == ("url", "—")
    assert odd["kind"] == "tag" and odd["receipt"].startswith("not recorded")


# -- a real node, a real origin ------------------------------------------------------------------

Served = Callable[..., Awaitable[TestServer]]
KINDS = [
    ("url", "/page", {"/page"}),
    ("prefix", "/assets/", {"/assets/a.css", "/assets/b.js"}),
    ("tag", "p-1", {"/page"}),  # a Surrogate-Key
    ("tag", "all-tagged", {"/assets/a.css", "/assets/b.js", "/page"}),  # a Cache-Tag
    ("all", "", set(URLS)),
]


@pytest.mark.slow
@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
async def test_on_a_node_the_preview_changes_nothing_and_confirm_leaves_no_old_content(
    tmp_path: Path, aiohttp_server: Served, soft: bool
) -> None:
    """For each kind in turn: the origin moves on a version; the dry run leaves every URL a
    hit on what it was; after Confirm's receipt every covered URL answers the new version
    from its first request on, and every other URL stays a hit."""
    async with dashboard_node(tmp_path, aiohttp_server) as live:
        node = live.purge
        for kind, items, covered in KINDS:
            served = await warm(node)
            fetched = dict(node.origin.full)
            node.origin.version += 1
            shown = await live.preview(purge_fields(DOMAIN, kind, items, soft=soft))
            assert shown.status == 200, shown.words
            assert receipt_figure(shown, "amount").startswith(f"{len(covered)} entr")
            for url in URLS:  # the dry run changed nothing
                assert await node.get(url) == ("cdn-proxy; hit", served[url]), url
            assert node.origin.full == fetched
            done = await live.confirm(shown)
            assert done.status == 200, done.words
            assert receipt_figure(done, "kind").startswith(
                {"url": "URLs", "prefix": "Prefixes", "tag": "Tags", "all": "Everything"}[kind]
            )
            await assert_purged(node, covered, served, fetched, kind)
        history = await live.page("GET", "/dashboard/history?kind=tag&outcome=purged")
        assert len(history_rows(history)) == 2


@pytest.mark.slow
async def test_a_purge_that_named_no_kind_shows_as_unknown_not_as_a_clear(
    filled: Dashboard,
) -> None:
    assert (await filled.act("/dashboard/domains/clear", {"domain": DOMAIN})).status == 303
    await filled.state.record_audit(  # as audited_purge records a body that named no kind
        AuditRecord(START, "deploy", None, DOMAIN, "bad_request", 400, 0, 1.0, kind="unknown")
    )
    page = await filled.get("/dashboard/history?kind=unknown")
    assert page.status == 200
    assert [(row["kind"], row["outcome"]) for row in history_rows(page) if "outcome" in row] == [
        ("unknown", "bad_request")
    ]
    cleared = await filled.get("/dashboard/history?kind=clear")
    assert [row["outcome"] for row in history_rows(cleared) if "outcome" in row] == ["cleared"]
